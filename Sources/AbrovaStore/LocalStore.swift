import AbrovaCore
import AbrovaSQLite
import Foundation

/// The device's store: the source of truth for every screen.
///
/// It keeps, per document, the state the server confirmed and its view; and, in the order the app
/// made them, the unsent changes, the newest of each document with the app's view of the document
/// after it (older ones' views are not kept current: nothing shows them). A write lands with its
/// change and view in one transaction (one row), and listeners hear of it once it has committed.
/// See Spec/storage.md.
///
/// An actor: its SQLite connection is used only from here.
package actor LocalStore {
    /// The version at which local (unconfirmed) changes are written into views. Views are rebuilt
    /// from confirmed states and changes, so this version never leaves the device.
    static let localVersion = Version(UInt64(Int64.max))

    let database: Database
    /// This store's client id, created once with the store.
    package nonisolated let clientID: String
    /// The file.
    package nonisolated let path: String
    /// The store's user as it was opened (see `owner()`).
    package nonisolated let ownerAtOpen: String??
    /// Set by `close()`.
    var isClosed = false
    /// What memory keeps of the tables; it changes only once a transaction has committed.
    var memory = StoreMemory()
    var listeners = Listeners()
    /// The id `newOrigin()` hands out next.
    private var nextOrigin = Int64.random(in: 1...Int64.max)
    /// The sync scope (`nil`: all), as `meta.scope` says; `nil` until read.
    var scopeInMemory: SyncScope??

    /// Writes not yet confirmed by the server, in all documents. A conflict kept for the resolver
    /// counts as one: the device's change is not on the server until its resolution is.
    package var unsentWriteCount: Int { memory.unsentWriteCount + memory.heldDocuments.count }

    /// The WAL's length (pages) at which a commit copies it into the file. A write appends to the
    /// queue, so each checkpoint writes new pages at the file's end and syncs the file: in a run
    /// of writes, the largest single cost. Four times SQLite's default checkpoints a quarter as
    /// often (the benchmark's local writes: 0.83–0.92× of plain upserts before, 0.93–1.01× after),
    /// for a WAL file of up to 8 MB at 2 KiB pages, folded in and removed when the store closes.
    static let checkpointPages = 4_096

    /// The page size of a new store file (SQLite's default is 4 KiB; a file keeps the size it was
    /// made with). A local write commits a page or two, and each page is a WAL frame that is copied,
    /// checksummed, synced at the next checkpoint and copied again into the file: half the page,
    /// half of that. The benchmark's local writes go from 0.90× to 1.09× of plain upserts (which
    /// keep SQLite's 4 KiB); pulls and initial syncs cost a few percent more (Docs/BENCHMARKS.md).
    package static let pageSize = 2_048

    /// Opens the store at `path`, creating it when there is none, migrating an older one.
    ///
    /// - Throws: `StoreError`: `.newerSchema` for a store written by a newer version, `.notAStore`
    ///   for a file that is not a store, `.corrupt` for a damaged one.
    /// A store opened `claimingFor` a user takes them as its owner when it has none yet
    /// (`owner()`); `ownerAtOpen` says whose it is once open.
    package init(path: String, durability: Database.Durability = .normal, claimingFor claimant: String?? = nil) throws(StoreError) {
        self.path = path
        do {
            // The app's process owns its store: exclusive locking spares a file lock per transaction.
            database = try Database(
                path: path, durability: durability, isExclusive: true, writesFramesWhole: true, newFilePageSize: Self.pageSize)
            try database.execute("PRAGMA wal_autocheckpoint=\(Self.checkpointPages)")
            try Schema.migrate(database)
            clientID = try Self.loadOrCreateClientID(database)
            let unsentRows = try database.query(
                """
                SELECT collection, id, writes, view, 0 AS kind, position AS ordering FROM inflight
                UNION ALL SELECT collection, id, writes, view, 1, sequence FROM pending ORDER BY kind, ordering
                """
            ) { row in
                UnsentRow(
                    key: DocumentKey(collection: row.text(0) ?? "", id: row.text(1) ?? ""), writes: Int(row.integer(2)), view: row.text(3))
            }
            let isResyncing = try database.queryFirst("SELECT value FROM meta WHERE key = 'resync'") { _ in true } ?? false
            let storedNextBatch: Int64?? = try database.queryFirst("SELECT value FROM meta WHERE key = 'next_batch_sequence'") {
                Int64($0.text(0) ?? "")
            }
            let heldDocuments = Set(
                try database.query("SELECT collection, id FROM unresolved") { row in
                    DocumentKey(collection: row.text(0) ?? "", id: row.text(1) ?? "")
                })
            var owner = try Self.readOwner(database)
            if owner == nil, let claimant {
                try database.write { database in try Self.writeOwner(claimant, in: database) }
                owner = claimant
            }
            ownerAtOpen = owner
            let tail = try database.queryFirst(
                "SELECT sequence, collection, id, delta, writes, parts, as_written, origin, alone FROM pending ORDER BY sequence DESC LIMIT 1"
            ) { row in
                PendingChange(
                    sequence: row.integer(0), key: DocumentKey(collection: row.text(1) ?? "", id: row.text(2) ?? ""),
                    delta: try Self.decodeDelta(row.blob(3)), writes: Int(row.integer(4)), parts: row.blob(5),
                    isAsWritten: row.integer(6) != 0, origin: row.integer(7), isAlone: row.integer(8) != 0)
            }
            memory = StoreMemory(
                unsentRows: unsentRows, tail: tail, nextBatch: (storedNextBatch ?? nil) ?? 1, heldDocuments: heldDocuments,
                isResyncing: isResyncing)
        } catch {
            throw StoreError.translating(error)
        }
    }

    /// Opens a store at an older schema version, for migration tests.
    init(path: String, schemaVersion: Int) throws {
        self.path = path
        ownerAtOpen = nil
        database = try Database(path: path)
        try Schema.migrate(database, to: schemaVersion)
        clientID = ""
    }

    /// Closes the store's file now (another store may then open it); every later call throws,
    /// and a stream asked for later ends at once.
    package func close() {
        // A count whose notice waits is told before the streams end: the last count is always told.
        if listeners.unsentCountNotices.isScheduled { listeners.tellUnsentCount(unsentWriteCount) }
        isClosed = true
        database.close()
        memory.closed()
        for listener in listeners.all.values {
            switch listener {
            case .document(_, let continuation, _): continuation.finish()
            case .query(_, let continuation, _): continuation.finish()
            case .unsentWrites(let continuation, _): continuation.finish()
            case .liveListenerCount(let continuation): continuation.finish()
            }
        }
        listeners.all = [:]
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
    package func add(to collection: String, data: [String: Value]) throws(StoreError) -> DocumentSnapshot {
        try setData(data, for: DocumentKey(collection: collection, id: UUID().uuidString.lowercased()))
    }

    /// Replaces the document (creating it when there is none) with exactly these fields.
    @discardableResult
    package func setData(_ data: [String: Value], for key: DocumentKey) throws(StoreError) -> DocumentSnapshot {
        try write(.set(data), for: key).snapshot
    }

    /// Updates fields: assigns paths (a map replaces the subtree), removes paths, adds to and
    /// removes from sets.
    ///
    /// - Throws: `StoreError` `.documentNotFound` when the document does not exist.
    @discardableResult
    package func updateData(
        for key: DocumentKey, set assignments: [FieldPath: Value] = [:], remove removals: [FieldPath] = [],
        setAdd: [FieldPath: [Value]] = [:], setRemove: [FieldPath: [Value]] = [:]
    ) throws(StoreError) -> DocumentSnapshot {
        try write(.update(set: assignments, remove: removals, setAdd: setAdd, setRemove: setRemove), for: key).snapshot
    }

    /// Deletes the document.
    @discardableResult
    package func delete(_ key: DocumentKey) throws(StoreError) -> DocumentSnapshot {
        try write(.delete, for: key).snapshot
    }

    /// One app write: the change and the new view commit together; listeners hear of it after.
    /// The receipt lets `takeBack(_:)` undo it while it is still pending as it left it.
    ///
    /// A write `asWritten` (made while the server answers) is saved by the server as written,
    /// whatever the collection's strategy: it composes only with writes made the same way, so
    /// that no queued write is sent under its policy, nor it under theirs.
    package func write(
        _ operation: WriteOperation, for key: DocumentKey,
        asWritten: Bool = false
    ) throws(StoreError) -> (snapshot: DocumentSnapshot, receipt: WriteReceipt) {
        try translatingErrors { try write(operation, for: key, asWritten: asWritten, alongside: nil) }
    }

    /// A write, with `alongside` run in its transaction (so that both commit, or neither), and
    /// `afterCommit` told of the commit before listeners are (so that they never see the memory
    /// of one without the other).
    func write(
        _ operation: WriteOperation, for key: DocumentKey, asWritten: Bool, alongside: ((Database) throws -> Void)?,
        afterCommit: ((inout StoreMemory) -> Void)? = nil
    ) throws -> (snapshot: DocumentSnapshot, receipt: WriteReceipt) {
        // Read before the write: its closure runs within an access to `memory`. Only a merge
        // needs it; other writes skip the lookup.
        let hasPendingChange = operation.isMerge && memory.unsent[key] != nil
        return try writeTranslated(
            key, requiresExisting: operation.requiresExistingDocument, asWritten: asWritten, alongside: alongside, afterCommit: afterCommit
        ) { document in
            try Self.delta(of: operation, on: document, hasPendingChange: hasPendingChange)
        }
    }

    /// The change an app write makes to `document` (`hasPendingChange`: the device has a change
    /// of its own to it still unsent; read for a merge alone).
    ///
    /// - Throws: `ValueError` naming the field when a path or a value cannot be stored.
    static func delta(of operation: WriteOperation, on document: CachedDocument, hasPendingChange: Bool) throws(ValueError)
        -> DocumentDelta
    {
        let base = document.confirmed.version
        switch operation {
        case .set(let data, let stamps):
            return try DocumentDelta.create(data, base: base).markingServerTimestamps(stamps)
        case .setMerging(let data, let stamps, let increments):
            return try DocumentDelta.setMerging(data, base: base, view: document.view, hasPendingChange: hasPendingChange)
                .markingServerTimestamps(stamps)
                .incrementing(topLevel: increments, base: base)
        case .update(let assignments, let removals, let setAdd, let setRemove, let stamps, let increments):
            return try DocumentDelta.update(
                set: assignments, remove: removals, setAdd: setAdd, setRemove: setRemove, serverTimestamps: stamps,
                increments: increments, base: base)
        case .delete:
            return DocumentDelta.delete(base: base)
        }
    }

    private func writeTranslated(
        _ key: DocumentKey, requiresExisting: Bool, asWritten: Bool, alongside: ((Database) throws -> Void)?,
        afterCommit: ((inout StoreMemory) -> Void)?, _ makeDelta: (CachedDocument) throws -> DocumentDelta
    ) throws -> (snapshot: DocumentSnapshot, receipt: WriteReceipt) {
        do {
            try key.validate()
        } catch {
            throw StoreError(error)
        }
        // The document changes in place in the cache, without a copy of its state; should the
        // write fail, the entry is dropped and rebuilt from the file when next needed.
        let delta: DocumentDelta
        let view: DocumentState
        let viewJSON: String?
        let newTail: PendingChange
        do {
            // The closure runs within an access to `memory`: it must not touch the store's state.
            (delta, view, viewJSON) = try applyToView(key, requiresExisting: requiresExisting, makeDelta)
            newTail = try appendToQueue(delta, of: key, view: view, viewJSON: viewJSON, asWritten: asWritten, alongside: alongside)
        } catch {
            memory.forget(key)
            throw error
        }
        let receipt = WriteReceipt(change: newTail, before: newTail.writes > 1 ? memory.tail : nil, batchFrom: memory.nextBatch)
        memory.wrote(newTail, viewJSON: viewJSON)
        afterCommit?(&memory)
        notify(changed: [key])
        return (DocumentSnapshot(key: key, state: view, metadata: SnapshotMetadata(hasPendingWrites: true, isFromCache: true)), receipt)
    }

    /// The most writes an atomic group holds (as Firestore's batches): a group goes in one batch.
    package static let maximumGroupWrites = 500

    /// An atomic group of writes (`WriteBatch`): all saved in one transaction, each a change of its
    /// own marked with the group (never composed with another), sent together in one batch and
    /// applied by the server all or none. Listeners hear of them once all are saved. Should any
    /// write fail here (a document to update that does not exist, a value that cannot be
    /// stored), none is saved.
    ///
    /// - Throws: `StoreError`: `.invalidValue` for an empty group or one of more than
    ///   `maximumGroupWrites` writes; as `write(_:for:asWritten:)` for a write that fails.
    package func writeGroup(
        _ writes: [(operation: WriteOperation, key: DocumentKey)], asWritten: Bool = false
    ) throws(StoreError) -> [(snapshot: DocumentSnapshot, receipt: WriteReceipt)] {
        guard !writes.isEmpty, writes.count <= Self.maximumGroupWrites else {
            throw StoreError(.invalidValue, "a batch of writes holds 1 to \(Self.maximumGroupWrites) writes, not \(writes.count)")
        }
        let group = newOrigin()
        var results: [(snapshot: DocumentSnapshot, receipt: WriteReceipt)] = []
        var committed: [(change: PendingChange, viewJSON: String?)] = []
        do {
            try database.write { database in
                for (operation, key) in writes {
                    let (snapshot, change, viewJSON) = try groupWrite(operation, for: key, group: group, asWritten: asWritten, in: database)
                    committed.append((change, viewJSON))
                    results.append(
                        (snapshot, WriteReceipt(change: change, before: nil, batchFrom: memory.nextBatch)))
                }
            }
        } catch {
            for (_, key) in writes { memory.forget(key) }
            throw StoreError.translating(error)
        }
        for (change, viewJSON) in committed { memory.wrote(change, viewJSON: viewJSON) }
        notify(changed: Set(writes.map(\.key)))
        return results
    }

    /// One write of a group, in the group's transaction: its document changes in place in the
    /// cache (the caller forgets it should the transaction fail), its change is a row of its own.
    private func groupWrite(
        _ operation: WriteOperation, for key: DocumentKey, group: Int64, asWritten: Bool, in database: Database
    ) throws -> (snapshot: DocumentSnapshot, change: PendingChange, viewJSON: String?) {
        try key.validate()
        let hasPendingChange = operation.isMerge && memory.unsent[key] != nil
        let (delta, view, viewJSON) = try applyToView(key, requiresExisting: operation.requiresExistingDocument) { document in
            try Self.delta(of: operation, on: document, hasPendingChange: hasPendingChange)
        }
        let origin = newOrigin()
        if try isOutsideScope(key, state: view) { try setMeta("scope_leftovers", "1", in: database) }
        try database.run(
            "INSERT INTO pending (collection, id, delta, writes, view, as_written, origin, alone, group_id) VALUES (?, ?, ?, 1, ?, ?, ?, 1, ?)",
            [
                .text(key.collection), .text(key.id), .blob(Self.encode(delta)), SQLiteValue(viewJSON), .integer(asWritten ? 1 : 0),
                .integer(origin), .integer(group),
            ])
        let change = PendingChange(
            sequence: database.lastInsertedRowID, key: key, delta: delta, writes: 1, parts: nil, isAsWritten: asWritten,
            origin: origin, isAlone: true)
        let snapshot = DocumentSnapshot(key: key, state: view, metadata: SnapshotMetadata(hasPendingWrites: true, isFromCache: true))
        return (snapshot, change, viewJSON)
    }

    /// Makes a write's change on its document (`makeDelta`) and applies it to the view, in place in
    /// the cache; the caller forgets the document should its transaction fail. The closure runs
    /// within an access to `memory`: it must not touch the store's state.
    ///
    /// - Throws: `StoreError`: `.documentNotFound` when `requiresExisting` and the view shows no
    ///   document; the value errors of the change or of the document's size.
    private func applyToView(
        _ key: DocumentKey, requiresExisting: Bool, _ makeDelta: (CachedDocument) throws -> DocumentDelta
    ) throws -> (delta: DocumentDelta, view: DocumentState, viewJSON: String?) {
        try changingCachedDocument(key) { document in
            if requiresExisting && !document.view.exists {
                throw StoreError(.documentNotFound, "\(key) does not exist")
            }
            let delta: DocumentDelta
            do {
                delta = try makeDelta(document)
            } catch let error as ValueError {
                throw StoreError(error)
            }
            let viewJSON = document.applyLocally(delta)
            do {
                try document.view.checkSize()
            } catch let error as ValueError {
                throw StoreError(error)
            }
            return (delta, document.view, viewJSON)
        }
    }

    /// Commits a write's change: composed into the newest pending change when it can be (see
    /// `write(_:for:asWritten:)`), else as a new one, with `alongside` in the same transaction.
    /// Returns the newest pending change after it.
    private func appendToQueue(
        _ delta: DocumentDelta, of key: DocumentKey, view: DocumentState, viewJSON: String?, asWritten: Bool,
        alongside: ((Database) throws -> Void)?
    ) throws -> PendingChange {
        let isOutsideScope = try isOutsideScope(key, state: view)
        return try database.write { database in
            try alongside?(database)
            // Kept until it is sent, then it leaves the device (`dropDocumentsOutsideScope`).
            if isOutsideScope { try setMeta("scope_leftovers", "1", in: database) }
            if var tail = memory.tail, tail.key == key, tail.isAsWritten == asWritten, tail.isSplittable, !tail.isAlone,
                tail.writes < Self.maximumComposedWrites, Self.composes(delta, into: tail.delta)
            {
                tail.parts = PendingChange.appending(
                    Self.encode(delta), to: tail.parts ?? PendingChange.parts(holding: Self.encode(tail.delta)))
                tail.delta.compose(with: delta)
                tail.writes += 1
                try database.run(
                    "UPDATE pending SET delta = ?, writes = ?, view = ?, parts = ? WHERE sequence = ?",
                    [
                        .blob(Self.encode(tail.delta)), .integer(Int64(tail.writes)), SQLiteValue(viewJSON),
                        SQLiteValue(tail.parts), .integer(tail.sequence),
                    ])
                return tail
            }
            let origin = newOrigin()
            try database.run(
                "INSERT INTO pending (collection, id, delta, writes, view, as_written, origin) VALUES (?, ?, ?, 1, ?, ?, ?)",
                [
                    .text(key.collection), .text(key.id), .blob(Self.encode(delta)), SQLiteValue(viewJSON), .integer(asWritten ? 1 : 0),
                    .integer(origin),
                ])
            return PendingChange(
                sequence: database.lastInsertedRowID, key: key, delta: delta, writes: 1, parts: nil, isAsWritten: asWritten,
                origin: origin)
        }
    }

    /// Undoes the write of `receipt` if its change is still its document's newest pending change,
    /// exactly as the write left it (not frozen into a batch, composed with or rebased since; an
    /// unfrozen batch's changes count as pending): the change goes back to what it was before the
    /// write, or away when the write made it. Listeners see the document as before, marked as a
    /// rollback. Returns whether it was undone.
    ///
    /// - Throws: `StoreError`.
    package func takeBack(_ receipt: WriteReceipt) throws(StoreError) -> Bool {
        try translatingErrors {
            let key = receipt.change.key
            guard
                let newest = try database.queryFirst(
                    "SELECT \(QueueRow.pendingColumns) FROM pending WHERE collection = ? AND id = ? ORDER BY sequence DESC LIMIT 1",
                    [.text(key.collection), .text(key.id)], QueueRow.init),
                newest.writes == receipt.change.writes, try Self.decodeDelta(newest.delta) == receipt.change.delta
            else { return false }
            let sequence = newest.sequence
            var view: DocumentState?
            try database.write { database in
                if let before = receipt.before {
                    try database.run(
                        "UPDATE pending SET delta = ?, writes = ?, parts = ? WHERE sequence = ?",
                        [
                            .blob(Self.encode(before.delta)), .integer(Int64(before.writes)), SQLiteValue(before.parts),
                            .integer(sequence),
                        ])
                } else {
                    try database.run("DELETE FROM pending WHERE sequence = ?", [.integer(sequence)])
                }
                // The change now newest (this one as it was, or an older one) takes the view.
                if memory.unsent[key].map({ $0.writes > 1 }) ?? false {
                    view = try reapplyUnsentChanges(of: key, onto: confirmedState(of: key), in: database)
                }
            }
            let newestView: String?? = if let view { .some(view.documentJSON) } else { nil }
            memory.tookBack(receipt, fromRow: sequence, newestView: newestView)
            notify(changed: [key], rollbacks: [key])
            return true
        }
    }

    // MARK: Reads

    /// The document as the app sees it.
    package func document(_ key: DocumentKey) throws(StoreError) -> DocumentSnapshot {
        let hasPendingWrites = memory.unsent[key] != nil
        let metadata = SnapshotMetadata(hasPendingWrites: hasPendingWrites, isFromCache: true)
        if let cached = memory.cache[key] { return DocumentSnapshot(key: key, state: cached.view, metadata: metadata) }
        return try translatingErrors {
            let viewJSON: String?
            if let unsentDocument = memory.unsent[key] {
                viewJSON = unsentDocument.viewJSON
            } else {
                viewJSON =
                    try database.queryFirst(
                        "SELECT view FROM documents WHERE collection = ? AND id = ?",
                        [.text(key.collection), .text(key.id)]
                    ) { $0.text(0) } ?? nil
            }
            return DocumentSnapshot(key: key, data: try viewJSON.map { try Value(json: $0) }, metadata: metadata)
        }
    }

    /// The documents that match a query, evaluated in SQLite.
    package func documents(matching query: DocumentQuery) throws(StoreError) -> [DocumentSnapshot] {
        let conditions = try QueryConditions(query.filters, after: [.text(query.collection)])
        var bindings = conditions.bindings
        let order =
            if let orderPath = query.orderPath {
                "\(try QueryConditions.field(orderPath)) \(query.isDescending ? "DESC" : "ASC"), id ASC"
            } else {
                "id ASC"
            }
        var limit = ""
        if let count = query.limit {
            bindings.append(.integer(Int64(max(count, 0))))
            limit = " LIMIT ?\(bindings.count)"
        }
        // A document's view is the one after its newest unsent change, else its confirmed view.
        // (Pending sequences are offset past every in-flight position: pending comes later.) The
        // confirmed documents are filtered, ordered and limited on their own, where an index on
        // the field (`indexIfItPays`) can find them without reading the others.
        let sql = """
            WITH unsent AS (
                SELECT id, view, max(ordering) FROM (
                    SELECT id, view, position AS ordering FROM inflight WHERE collection = ?1
                    UNION ALL
                    SELECT id, view, sequence + 4611686018427387904 FROM pending WHERE collection = ?1)
                GROUP BY id
            )
            SELECT id, view, unsent FROM (
                SELECT id, view, 1 AS unsent FROM unsent WHERE view IS NOT NULL\(conditions.sql)
                UNION ALL
                SELECT * FROM (
                    SELECT id, view, 0 AS unsent FROM documents
                    WHERE collection = ?1 AND view IS NOT NULL AND id NOT IN (SELECT id FROM unsent)\(conditions.sql)
                    ORDER BY \(order)\(limit))
            )
            ORDER BY \(order)\(limit)
            """
        return try translatingErrors {
            try indexIfItPays(query)
            let rows = try database.query(sql, bindings) { row in (row.text(0) ?? "", row.text(1) ?? "null", row.integer(2)) }
            return try rows.map { id, view, unsent in
                let key = DocumentKey(collection: query.collection, id: id)
                return DocumentSnapshot(
                    key: key, data: try Value(json: view),
                    metadata: SnapshotMetadata(hasPendingWrites: unsent > 0, isFromCache: true))
            }
        }
    }

    /// The most indexes queries make (each costs every write of a confirmed document a little).
    static let maximumQueryIndexes = 16
    /// The fewest documents of a collection for which a query's field is worth an index.
    static let queryIndexThreshold = 1_000

    /// Makes an index on the field a query orders by (else its first filtered field), once its
    /// collection holds `queryIndexThreshold` documents: over `(collection, json_extract(view,
    /// path))`, named after the path, so one serves that field in every collection. Decided once
    /// per field and collection while the store is open.
    private func indexIfItPays(_ query: DocumentQuery) throws {
        guard let path = query.orderPath ?? query.filters.first?.path else { return }
        let decision = "\(query.collection)\u{0}\(path.dotted)"
        guard !memory.decidedQueryIndexes.contains(decision) else { return }
        let name = "query_" + String(Self.stableHash(path.dotted), radix: 16)
        let exists =
            try database.queryFirst("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", [.text(name)]) { _ in true } ?? false
        if !exists {
            let documents =
                try database.queryFirst(
                    "SELECT count(*) FROM (SELECT 1 FROM documents WHERE collection = ? LIMIT ?)",
                    [.text(query.collection), .integer(Int64(Self.queryIndexThreshold))]
                ) { $0.integer(0) } ?? 0
            guard documents >= Self.queryIndexThreshold else { return } // asked again once it has grown
            let made =
                try database.queryFirst(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name LIKE 'query\\_%' ESCAPE '\\'"
                ) { $0.integer(0) } ?? 0
            if made < Self.maximumQueryIndexes {
                // Best effort: a query runs without its index (a full disk, a read-only file).
                try? database.execute("CREATE INDEX IF NOT EXISTS \(name) ON documents (collection, \(try QueryConditions.field(path)))")
            }
        }
        memory.decidedQueryIndex(decision)
    }

    /// FNV-1a over the path's bytes: the same name for a field in every session.
    private static func stableHash(_ text: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return hash
    }

    // MARK: Documents in memory

    /// A pending change: one document's coalesced consecutive writes.
    package struct PendingChange: Equatable, Sendable {
        var sequence: Int64
        var key: DocumentKey
        var delta: DocumentDelta
        var writes: Int
        /// Each write's change as it was made, `[delta, ...]` in the compact encoding, while it
        /// holds more than one; `nil` for one write (and for changes stored before schema 4).
        var parts: [UInt8]?
        /// Whether its writes were made while the server answered, to be saved as written.
        var isAsWritten = false
        /// The change's own id (`origin`; 0 for one stored before schema 5).
        var origin: Int64 = 0
        /// Whether it is a write sent again by itself after a refusal, never to compose again.
        var isAlone = false

        /// Whether a refusal of the change can be sent again write by write.
        var isSplittable: Bool { writes == 1 || parts != nil }

        /// The parts of a change of one write.
        static func parts(holding first: [UInt8]) -> [UInt8] { [UInt8(ascii: "[")] + first + [UInt8(ascii: "]")] }

        /// `parts` with one more write's change.
        static func appending(_ part: [UInt8], to parts: [UInt8]) -> [UInt8] {
            parts.dropLast() + [UInt8(ascii: ",")] + part + [UInt8(ascii: "]")]
        }

        /// `parts` with the writes of `later`, another change's parts, after its own.
        static func append(parts later: [UInt8], to parts: inout [UInt8]) {
            parts.removeLast()
            parts.append(UInt8(ascii: ","))
            parts.append(contentsOf: later.dropFirst())
        }
    }

    /// A new change's id: the next of `nextOrigin`, which starts at random at each opening, so
    /// that no counter is kept in the file (a collision only blurs which call a refusal is reported
    /// to, never what is sent) and a write makes no system call for randomness.
    func newOrigin() -> Int64 {
        defer { nextOrigin = nextOrigin == .max ? 1 : nextOrigin + 1 }
        return nextOrigin
    }

    /// The most writes a queued change composes as they are made (each write rewrites the row's
    /// `parts`, which keep every write's change for a refusal): the next write of the document
    /// starts a new change. A freeze composes a batch's changes past it, joining parts once.
    static let maximumComposedWrites = 64

    /// Whether `later` may compose into `earlier`: not when it was made after a pull brought a
    /// newer document (a newer base), since composed it would take the older base and meet the
    /// change it had seen as a conflict; nor when it overwrites a counter `earlier` increments
    /// (`DocumentDelta.canCompose(with:)`).
    static func composes(_ later: DocumentDelta, into earlier: DocumentDelta) -> Bool {
        later.latestBase <= earlier.earliestBase && earlier.canCompose(with: later)
    }

    /// The changes of `parts`, in the order they were made.
    static func decodeParts(_ parts: [UInt8]) throws -> [DocumentDelta] {
        do {
            guard case .array(let items) = try Value(json: parts, maximumDepth: ValueLimits.maximumEncodedDepth + 1) else {
                throw StoreError(.corrupt, "the writes of a stored change are not a list")
            }
            return try items.map { try DocumentDelta(encoded: $0) }
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(.corrupt, "the writes of a stored change cannot be read: \(error)")
        }
    }

    /// `parts` holding `changes`.
    static func encodeParts(_ changes: [DocumentDelta]) -> [UInt8] {
        var bytes: [UInt8] = [UInt8(ascii: "[")]
        for (index, change) in changes.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            change.writeEncoded(to: &bytes)
        }
        bytes.append(UInt8(ascii: "]"))
        return bytes
    }

    /// The document's confirmed state and view, from memory or rebuilt from the file.
    func loaded(_ key: DocumentKey) throws -> CachedDocument {
        if let cached = memory.cache[key] { return cached }
        let confirmed = try confirmedState(of: key)
        var view = confirmed
        if memory.unsent[key] != nil {
            for change in try unsentChanges(of: key) { view.applyLocally(change.delta, at: Self.localVersion) }
        }
        let document = CachedDocument(confirmed: confirmed, view: view)
        memory.remember(document, for: key)
        return document
    }

    /// Runs `change` on the document's cached confirmed state and view, in place (loaded from the
    /// file first when it is not in memory).
    func changingCachedDocument<Result>(_ key: DocumentKey, _ change: (inout CachedDocument) throws -> Result) throws -> Result {
        if let result = try memory.changeCachedDocument(key, change) { return result }
        _ = try loaded(key) // remembered, and not held here: the cached entry stays the only copy
        if let result = try memory.changeCachedDocument(key, change) { return result }
        var document = try loaded(key)
        let result = try change(&document)
        memory.remember(document, for: key)
        return result
    }

    /// The document's confirmed state alone (no view to rebuild), from memory or the file.
    func confirmedState(of key: DocumentKey) throws -> DocumentState {
        if let cached = memory.cache[key] { return cached.confirmed }
        let stored: DocumentState?? = try database.queryFirst(
            "SELECT confirmed, view FROM documents WHERE collection = ? AND id = ?",
            [.text(key.collection), .text(key.id)]
        ) { row in
            try row.blob(0).map { try Self.decodeState($0, view: row.text(1)) }
        }
        return (stored ?? nil) ?? DocumentState()
    }

    /// Loads the documents not in memory with one query per collection (a pulled page holds
    /// hundreds; one lookup each would cost more than the rest of the page).
    func preload(_ keys: [DocumentKey]) throws {
        let missing = Dictionary(grouping: keys.filter { memory.cache[$0] == nil }, by: \.collection)
        for (collection, keys) in missing {
            let placeholders = repeatElement("?", count: keys.count).joined(separator: ",")
            let rows = try database.query(
                "SELECT id, confirmed, view FROM documents WHERE collection = ? AND id IN (\(placeholders))",
                [.text(collection)] + keys.map { .text($0.id) }
            ) { row in
                (row.text(0) ?? "", try row.blob(1).map { try Self.decodeState($0, view: row.text(2)) })
            }
            var found: [String: DocumentState] = [:]
            for (id, state) in rows { found[id] = state ?? DocumentState() }
            for key in keys {
                let confirmed = found[key.id] ?? DocumentState()
                var view = confirmed
                if memory.unsent[key] != nil {
                    for change in try unsentChanges(of: key) { view.applyLocally(change.delta, at: Self.localVersion) }
                }
                memory.remember(CachedDocument(confirmed: confirmed, view: view), for: key)
            }
        }
    }

    /// An unsent change as stored: in flight (`sequence` is its position) or pending.
    struct StoredChange {
        var isInflight: Bool
        var sequence: Int64
        var delta: DocumentDelta
    }

    /// The document's in-flight and pending changes, oldest first. Pending changes have no index
    /// (every write would pay for it): this scans them, and runs only for documents with unsent
    /// changes that are not in memory.
    func unsentChanges(of key: DocumentKey) throws -> [StoredChange] {
        let bindings: [SQLiteValue] = [.text(key.collection), .text(key.id)]
        let inflight = try database.query(
            "SELECT position, delta FROM inflight WHERE collection = ? AND id = ? ORDER BY position",
            bindings
        ) { row in
            StoredChange(isInflight: true, sequence: row.integer(0), delta: try Self.decodeDelta(row.blob(1)))
        }
        let pending = try database.query(
            "SELECT sequence, delta FROM pending WHERE collection = ? AND id = ? ORDER BY sequence",
            bindings
        ) { row in
            StoredChange(isInflight: false, sequence: row.integer(0), delta: try Self.decodeDelta(row.blob(1)))
        }
        return inflight + pending
    }

    // MARK: Encoding

    static func encode(_ delta: DocumentDelta) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(64)
        delta.writeEncoded(to: &bytes)
        return bytes
    }

    static func decodeDelta(_ bytes: [UInt8]?) throws -> DocumentDelta {
        // One pass over the bytes for a well-formed change (as this store writes them); anything
        // else is read again as a tree, which names the problem.
        var reader = JSONReader(bytes: bytes ?? [], maximumDepth: ValueLimits.maximumEncodedDepth)
        if case .delta(let delta)? = try? DocumentDelta.read(from: &reader), (try? reader.finish()) != nil { return delta }
        do {
            return try DocumentDelta(encoded: try Value(json: bytes ?? [], maximumDepth: ValueLimits.maximumEncodedDepth))
        } catch {
            throw StoreError(.corrupt, "a stored change cannot be read: \(error)")
        }
    }

    static func decodeState(_ bytes: [UInt8], view: String?) throws -> DocumentState {
        do {
            return try DocumentState(
                versions: try Value(json: bytes, maximumDepth: ValueLimits.maximumEncodedDepth), view: try view.map { try Value(json: $0) })
        } catch {
            throw StoreError(.corrupt, "a stored document cannot be read: \(error)")
        }
    }
}

/// Runs `body`: the one place the store's failures become `StoreError`, which is all its API
/// throws. SQLite's errors are named by what they mean for the store; a stored value that no
/// longer reads (a `ValueError` that no step turned into a refusal first) is damage.
func translatingErrors<T>(_ body: () throws -> T) throws(StoreError) -> T {
    do {
        return try body()
    } catch {
        throw StoreError.translating(error)
    }
}

extension StoreError {
    /// Any failure below the store's API, as the store reports it (see `translatingErrors`).
    static func translating(_ error: any Error) -> StoreError {
        switch error {
        case let error as StoreError: error
        case let error as SQLiteError: StoreError(error)
        case let error as ValueError: StoreError(.corrupt, "a stored value cannot be read: \(error)")
        default: StoreError(.database, "\(error)")
        }
    }

    /// An SQLite failure, named by what it means for the store.
    init(_ error: SQLiteError) {
        switch error.code.primary {
        case .corrupt: self.init(.corrupt, "the store file is damaged", underlying: error)
        case .notADatabase: self.init(.notAStore, "the file is not an AbrovaSync store", underlying: error)
        default: self.init(.database, error.message, underlying: error)
        }
    }
}
