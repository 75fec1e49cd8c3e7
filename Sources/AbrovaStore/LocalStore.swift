import AbrovaCore
import AbrovaSQLite
import Foundation

/// The device's store: the source of truth for every screen.
///
/// It keeps, per document, the state the server confirmed and the app's view of it (confirmed
/// state overlaid with the frozen in-flight batch and the pending changes); and, in the order the
/// app made them, the pending changes. A write lands together with its pending change in one
/// transaction, and listeners hear of it once it has committed. See Spec/storage.md.
///
/// An actor: its SQLite connection is used only from here.
public actor LocalStore {
    /// The version at which local (unconfirmed) changes are written into views. Views are rebuilt
    /// from confirmed states and changes, so this version never leaves the device.
    static let localVersion = Version(UInt64(Int64.max))

    let database: Database
    /// This store's client id, created once with the store.
    public nonisolated let clientID: String
    /// Documents read recently, with their confirmed state and view.
    var cache: [DocumentKey: CachedDocument] = [:]
    static let cacheLimit = 10_000
    /// The newest pending change: a write to the same document composes into it. A write to
    /// another document in between starts a new change, so that changes keep the app's order.
    var tail: PendingChange?
    /// Writes not yet confirmed by the server, in all documents.
    public internal(set) var unsentWriteCount: Int
    var listeners = Listeners()

    /// Opens the store at `path`, creating it when there is none, migrating an older one.
    ///
    /// - Throws: `StoreError`: `.newerSchema` for a store written by a newer version, `.notAStore`
    ///   for a file that is not a store, `.corrupt` for a damaged one.
    public init(path: String, durability: Database.Durability = .normal) throws {
        do {
            // The app's process owns its store: exclusive locking spares a file lock per transaction.
            database = try Database(path: path, durability: durability, isExclusive: true)
            try Schema.migrate(database)
            clientID = try Self.loadOrCreateClientID(database)
            unsentWriteCount = Int(try database.queryFirst("SELECT coalesce(sum(unsent_writes), 0) FROM documents") { $0.integer(0) } ?? 0)
            tail = try database.queryFirst("SELECT sequence, collection, id, delta, writes FROM pending ORDER BY sequence DESC LIMIT 1") { row in
                PendingChange(sequence: row.integer(0), key: DocumentKey(collection: row.text(1) ?? "", id: row.text(2) ?? ""),
                              delta: try Self.decodeDelta(row.blob(3)), writes: Int(row.integer(4)))
            }
        } catch let error as SQLiteError {
            throw StoreError(error)
        }
    }

    /// Opens a store at an older schema version, for migration tests.
    init(path: String, schemaVersion: Int) throws {
        database = try Database(path: path)
        try Schema.migrate(database, to: schemaVersion)
        clientID = ""
        unsentWriteCount = 0
    }

    private static func loadOrCreateClientID(_ database: Database) throws -> String {
        if let existing = try database.queryFirst("SELECT value FROM meta WHERE key = 'client_id'", [], { $0.text(0) }) ?? nil {
            return existing
        }
        let clientID = UUID().uuidString.lowercased()
        try database.write { database in
            try database.run("INSERT INTO meta (key, value) VALUES ('client_id', ?)", [.text(clientID)])
        }
        return clientID
    }

    // MARK: Writes

    /// Adds a document with a new id (a UUID made on the device).
    ///
    /// - Throws: `StoreError` `.invalidValue` naming the field when a value cannot be stored.
    @discardableResult
    public func add(to collection: String, data: [String: Value]) throws -> DocumentSnapshot {
        try setData(data, for: DocumentKey(collection: collection, id: UUID().uuidString.lowercased()))
    }

    /// Replaces the document (creating it when there is none) with exactly these fields.
    @discardableResult
    public func setData(_ data: [String: Value], for key: DocumentKey) throws -> DocumentSnapshot {
        try write(key, requiresExisting: false) { base in try DocumentDelta.create(data, base: base) }
    }

    /// Updates fields: assigns paths (a map replaces the subtree), removes paths, adds to and
    /// removes from sets.
    ///
    /// - Throws: `StoreError` `.documentNotFound` when the document does not exist.
    @discardableResult
    public func updateData(for key: DocumentKey, set assignments: [FieldPath: Value] = [:], remove removals: [FieldPath] = [],
                           setAdd: [FieldPath: [Value]] = [:], setRemove: [FieldPath: [Value]] = [:]) throws -> DocumentSnapshot {
        try write(key, requiresExisting: true) { base in
            try DocumentDelta.update(set: assignments, remove: removals, setAdd: setAdd, setRemove: setRemove, base: base)
        }
    }

    /// Deletes the document.
    @discardableResult
    public func delete(_ key: DocumentKey) throws -> DocumentSnapshot {
        try write(key, requiresExisting: false) { base in DocumentDelta.delete(base: base) }
    }

    /// One app write: the change and the new view commit together; listeners hear of it after.
    private func write(_ key: DocumentKey, requiresExisting: Bool,
                       _ makeDelta: (Version) throws -> DocumentDelta) throws -> DocumentSnapshot {
        try translatingErrors { try writeTranslated(key, requiresExisting: requiresExisting, makeDelta) }
    }

    private func writeTranslated(_ key: DocumentKey, requiresExisting: Bool,
                                 _ makeDelta: (Version) throws -> DocumentDelta) throws -> DocumentSnapshot {
        var document = try loaded(key)
        if requiresExisting && !document.view.exists {
            throw StoreError(.documentNotFound, "\(key) does not exist")
        }
        let delta: DocumentDelta
        let view: DocumentState
        do {
            delta = try makeDelta(document.confirmed.version)
            view = document.view.applyingLocally(delta, at: Self.localVersion)
            try view.checkSize()
        } catch let error as ValueError {
            throw StoreError(error)
        }
        let data = view.document
        let viewJSON = data.map { SQLiteValue.text($0.canonicalJSON) } ?? .null
        let newTail: PendingChange = try database.write { database in
            let change: PendingChange
            if var tail, tail.key == key {
                tail.delta.compose(with: delta)
                tail.writes += 1
                try database.run("UPDATE pending SET delta = ?, writes = ? WHERE sequence = ?",
                                 [.blob(Self.encode(tail.delta)), .integer(Int64(tail.writes)), .integer(tail.sequence)])
                change = tail
            } else {
                try database.run("INSERT INTO pending (collection, id, delta, writes) VALUES (?, ?, ?, 1)",
                                 [.text(key.collection), .text(key.id), .blob(Self.encode(delta))])
                change = PendingChange(sequence: database.lastInsertedRowID, key: key, delta: delta, writes: 1)
            }
            try database.run("""
                INSERT INTO documents (collection, id, view, unsent_writes) VALUES (?, ?, ?, 1)
                ON CONFLICT (collection, id) DO UPDATE SET view = excluded.view, unsent_writes = unsent_writes + 1
                """, [.text(key.collection), .text(key.id), viewJSON])
            return change
        }
        tail = newTail
        document.view = view
        document.unsentWrites += 1
        remember(document, for: key)
        unsentWriteCount += 1
        notify(changed: [key])
        return DocumentSnapshot(key: key, data: data, metadata: SnapshotMetadata(hasPendingWrites: true, isFromCache: true))
    }

    // MARK: Reads

    /// The document as the app sees it.
    public func document(_ key: DocumentKey) throws -> DocumentSnapshot {
        if let cached = cache[key] { return cached.snapshot(key) }
        do {
            let row = try database.queryFirst("SELECT view, unsent_writes FROM documents WHERE collection = ? AND id = ?",
                                              [.text(key.collection), .text(key.id)]) { row in (row.text(0), row.integer(1)) }
            let data = try row?.0.map { text in try Value(json: text) }
            return DocumentSnapshot(key: key, data: data,
                                    metadata: SnapshotMetadata(hasPendingWrites: (row?.1 ?? 0) > 0, isFromCache: true))
        } catch let error as SQLiteError {
            throw StoreError(error)
        } catch let error as ValueError {
            throw StoreError(.corrupt, "a stored document cannot be read: \(error)")
        }
    }

    /// The documents that match a query, evaluated in SQLite.
    public func documents(matching query: DocumentQuery) throws -> [DocumentSnapshot] {
        var sql = "SELECT id, view, unsent_writes FROM documents WHERE collection = ?1 AND view IS NOT NULL"
        var bindings: [SQLiteValue] = [.text(query.collection)]
        for filter in query.filters {
            let path = try Self.jsonPath(filter.path)
            let number = bindings.count + 1
            // Integers and doubles compare as numbers; other values only with their own type.
            sql += """
                 AND (CASE json_type(view, ?\(number)) WHEN 'integer' THEN 'number' WHEN 'real' THEN 'number'
                 ELSE json_type(view, ?\(number)) END) = ?\(number + 1)
                 AND json_extract(view, ?\(number)) IS json_extract(?\(number + 2), '$')
                """
            bindings += [.text(path), .text(Self.typeName(filter.value)), .text(filter.value.canonicalJSON)]
        }
        if let orderPath = query.orderPath {
            bindings.append(.text(try Self.jsonPath(orderPath)))
            sql += " ORDER BY json_extract(view, ?\(bindings.count)) \(query.isDescending ? "DESC" : "ASC"), id ASC"
        } else {
            sql += " ORDER BY id ASC"
        }
        if let limit = query.limit {
            bindings.append(.integer(Int64(max(limit, 0))))
            sql += " LIMIT ?\(bindings.count)"
        }
        do {
            let rows = try database.query(sql, bindings) { row in (row.text(0) ?? "", row.text(1) ?? "null", row.integer(2)) }
            return try rows.map { id, view, unsent in
                let key = DocumentKey(collection: query.collection, id: id)
                return DocumentSnapshot(key: key, data: try Value(json: view),
                                        metadata: SnapshotMetadata(hasPendingWrites: unsent > 0, isFromCache: true))
            }
        } catch let error as SQLiteError {
            throw StoreError(error)
        } catch let error as ValueError {
            throw StoreError(.corrupt, "a stored document cannot be read: \(error)")
        }
    }

    private static func jsonPath(_ path: FieldPath) throws -> String {
        var result = "$"
        for segment in path.segments {
            guard !segment.contains("\"") else {
                throw StoreError(.invalidQuery, "a query path cannot hold a quotation mark", field: path.dotted)
            }
            result += ".\"\(segment)\""
        }
        return result
    }

    private static func typeName(_ value: Value) -> String {
        switch value {
        case .null: "null"
        case .bool(let bool): bool ? "true" : "false"
        case .int, .double: "number"
        case .string: "text"
        case .array: "array"
        case .map: "object"
        }
    }

    // MARK: Documents in memory

    /// A document's confirmed state and view, as last committed.
    struct CachedDocument {
        var confirmed: DocumentState
        var view: DocumentState
        var unsentWrites: Int

        func snapshot(_ key: DocumentKey, isRollback: Bool = false) -> DocumentSnapshot {
            DocumentSnapshot(key: key, data: view.document,
                             metadata: SnapshotMetadata(hasPendingWrites: unsentWrites > 0, isFromCache: true, isRollback: isRollback))
        }
    }

    /// A pending change: one document's coalesced consecutive writes.
    struct PendingChange {
        var sequence: Int64
        var key: DocumentKey
        var delta: DocumentDelta
        var writes: Int
    }

    /// The document's confirmed state and view, from memory or rebuilt from the file.
    func loaded(_ key: DocumentKey) throws -> CachedDocument {
        if let cached = cache[key] { return cached }
        let bindings: [SQLiteValue] = [.text(key.collection), .text(key.id)]
        let row = try database.queryFirst("SELECT confirmed, unsent_writes FROM documents WHERE collection = ? AND id = ?", bindings) { row in
            (row.blob(0), row.integer(1))
        }
        let confirmed = try row?.0.map(Self.decodeState) ?? DocumentState()
        var view = confirmed
        for delta in try unsentChanges(of: key) { view.applyLocally(delta, at: Self.localVersion) }
        let document = CachedDocument(confirmed: confirmed, view: view, unsentWrites: Int(row?.1 ?? 0))
        remember(document, for: key)
        return document
    }

    /// The document's in-flight and pending changes, oldest first.
    func unsentChanges(of key: DocumentKey) throws -> [DocumentDelta] {
        let bindings: [SQLiteValue] = [.text(key.collection), .text(key.id)]
        let inflight = try database.query("SELECT delta FROM inflight WHERE collection = ? AND id = ? ORDER BY position", bindings) { row in
            row.blob(0)
        }
        let pending = try database.query("SELECT delta FROM pending WHERE collection = ? AND id = ? ORDER BY sequence", bindings) { row in
            row.blob(0)
        }
        return try (inflight + pending).map(Self.decodeDelta)
    }

    func remember(_ document: CachedDocument, for key: DocumentKey) {
        if cache.count >= Self.cacheLimit, cache[key] == nil { cache.removeAll(keepingCapacity: true) }
        cache[key] = document
    }

    // MARK: Encoding

    static func encode(_ delta: DocumentDelta) -> [UInt8] {
        var bytes: [UInt8] = []
        delta.encoded.writeCanonicalJSON(to: &bytes)
        return bytes
    }

    static func encode(_ state: DocumentState) -> [UInt8] {
        var bytes: [UInt8] = []
        state.encoded.writeCanonicalJSON(to: &bytes)
        return bytes
    }

    static func decodeDelta(_ bytes: [UInt8]?) throws -> DocumentDelta {
        do {
            return try DocumentDelta(encoded: try Value(json: bytes ?? []))
        } catch {
            throw StoreError(.corrupt, "a stored change cannot be read: \(error)")
        }
    }

    static func decodeState(_ bytes: [UInt8]) throws -> DocumentState {
        do {
            return try DocumentState(encoded: try Value(json: bytes))
        } catch {
            throw StoreError(.corrupt, "a stored document cannot be read: \(error)")
        }
    }
}

/// Runs `body`, turning SQLite's errors into the store's.
func translatingErrors<T>(_ body: () throws -> T) throws -> T {
    do {
        return try body()
    } catch let error as SQLiteError {
        throw StoreError(error)
    }
}

extension StoreError {
    /// An SQLite failure, named by what it means for the store.
    init(_ error: SQLiteError) {
        switch error.code.primary {
        case .corrupt: self.init(.corrupt, "the store file is damaged", underlying: error)
        case .notADatabase: self.init(.notAStore, "the file is not an AbrovaSync store", underlying: error)
        default: self.init(.database, error.message, underlying: error)
        }
    }
}
