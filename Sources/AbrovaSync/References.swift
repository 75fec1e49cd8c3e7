import AbrovaCore
import AbrovaStore
import Foundation

extension AbrovaSync {
    /// A collection of documents.
    public struct CollectionReference: Sendable {
        /// The collection's name.
        public let name: String
        let sync: AbrovaSync

        /// The document with this id (it need not exist).
        public func document(_ id: String) -> DocumentReference {
            DocumentReference(key: DocumentKey(collection: name, id: id), sync: sync)
        }

        /// A new document with an id made on the device (a UUID).
        public func document() -> DocumentReference { document(UUID().uuidString.lowercased()) }

        /// Adds a document with a new id, as `setData` would write it.
        ///
        /// - Throws: `AbrovaSyncError` (see `DocumentReference.setData(_:)`).
        @discardableResult
        public func add(data: [String: Value]) async throws(AbrovaSyncError) -> DocumentReference {
            let reference = document()
            try await reference.setData(data)
            return reference
        }

        /// Adds a document with a new id, its fields given as Swift values (see
        /// `DocumentReference.setData(_:)`).
        @_disfavoredOverload
        @discardableResult
        public func add(data: [String: any ValueConvertible]) async throws(AbrovaSyncError) -> DocumentReference {
            try await add(data: data.mapValues(\.documentValue))
        }

        /// Adds a document encoded from `value`.
        @discardableResult
        public func add(from value: some Encodable) async throws(AbrovaSyncError) -> DocumentReference {
            try await add(data: try encodeDocument(value))
        }

        /// A query over this collection on the device (filters, order, limit).
        public var query: DocumentQuery { DocumentQuery(collection: name) }

        /// The documents matching `query` (by default all of this collection), from the device.
        ///
        /// - Throws: `AbrovaSyncError` `.refused` (`invalid`) for a query the store cannot run.
        public func getDocuments(_ query: DocumentQuery? = nil) async throws(AbrovaSyncError) -> [DocumentSnapshot] {
            do {
                return try await sync.store.documents(matching: query ?? self.query)
            } catch {
                throw AbrovaSyncError.wrapping(error)
            }
        }

        /// The query's documents now and after every change to them.
        public func snapshots(_ query: DocumentQuery? = nil) async -> AsyncStream<[DocumentSnapshot]> {
            let query = query ?? self.query
            return await sync.followingStore { await $0.changes(matching: query) }
        }

        /// Calls `listener` on the main actor (as Firestore calls on the main queue) with the query's
        /// documents now and after every change, until the registration is removed.
        public func addSnapshotListener(
            _ query: DocumentQuery? = nil,
            _ listener: @escaping @MainActor @Sendable ([DocumentSnapshot]) -> Void
        ) async -> ListenerRegistration {
            let stream = await snapshots(query)
            return ListenerRegistration(Task { @MainActor in for await documents in stream { listener(documents) } })
        }
    }
}

/// `AbrovaSync.CollectionReference`, by its short name.
public typealias CollectionReference = AbrovaSync.CollectionReference

extension AbrovaSync {
    /// One document.
    public struct DocumentReference: Sendable {
        /// The document's collection and id.
        public let key: DocumentKey
        let sync: AbrovaSync

        /// The document's id.
        public var documentID: String { key.id }

        /// Reads the document: from the server when it can be reached (pending edits overlaid),
        /// else from the device; `source` can insist on either.
        ///
        /// - Throws: `AbrovaSyncError`: `.refused` with the server's reason (`forbidden` when
        ///   the rules refuse); `.unreachable` when the server is needed and cannot be reached.
        public func getDocument(source: Source = .default) async throws(AbrovaSyncError) -> DocumentSnapshot {
            try await sync.read(key, source: source)
        }

        /// Reads the document decoded as `type` (`nil` when it does not exist).
        public func getDocument<T: Decodable>(as type: T.Type, source: Source = .default) async throws(AbrovaSyncError) -> T? {
            guard let data = try await getDocument(source: source).data else { return nil }
            return try decodeDocument(type, from: data)
        }

        /// Replaces the document (creating it) with exactly these fields.
        ///
        /// - Throws: `AbrovaSyncError`: `.refused` with the server's reason (`forbidden` by the rules,
        ///   `invalid` data) or the device's (`invalid` for a value that cannot be stored); nothing is
        ///   queued then.
        @discardableResult
        public func setData(_ data: [String: Value]) async throws(AbrovaSyncError) -> DocumentSnapshot {
            try await set(data, serverTimestamps: [], increments: [:], merge: false)
        }

        /// Replaces the document with these fields, given as Swift values (`String`, `Int`,
        /// `Double`, `Bool`, `Date`, `Data`, `Value`, and arrays, dictionaries and optionals of
        /// them), and `FieldValue.serverTimestamp()` for the server's time:
        ///
        ///     try await cart.setData(["owner": name, "total": total, "at": .serverTimestamp()])
        ///
        /// - Throws: as `setData(_:)`; `.refused` (`invalid`) for the sentinels that only
        ///   `updateData` takes (`delete()`, `arrayUnion`, `arrayRemove`).
        @_disfavoredOverload
        @discardableResult
        public func setData(_ data: [String: any FieldValueConvertible]) async throws(AbrovaSyncError) -> DocumentSnapshot {
            try await setData(data, merge: false)
        }

        /// With `merge: true`, writes these fields into the document leaf by leaf (a map merges
        /// into the map there) and leaves its other fields, creating the document when there is
        /// none; with `merge: false`, `setData(_:)`. A device that has never seen the document
        /// lets the server decide: its fields stay where it exists there (Spec/conflicts.md).
        ///
        ///     try await cart.setData(["qty": ["milk": 2]], merge: true)   // qty.eggs stays
        @discardableResult
        public func setData(_ data: [String: Value], merge: Bool) async throws(AbrovaSyncError) -> DocumentSnapshot {
            try await set(data, serverTimestamps: [], increments: [:], merge: merge)
        }

        /// `setData(_:merge:)` with Swift values and `FieldValue.serverTimestamp()`.
        @_disfavoredOverload
        @discardableResult
        public func setData(_ data: [String: any FieldValueConvertible], merge: Bool) async throws(AbrovaSyncError) -> DocumentSnapshot {
            try await write(try WriteOperations.set(data, merge: merge))
        }

        private func set(
            _ data: [String: Value], serverTimestamps: Set<String>, increments: [String: Value], merge: Bool
        ) async throws(AbrovaSyncError) -> DocumentSnapshot {
            try await write(
                merge
                    ? .setMerging(data, serverTimestamps: serverTimestamps, increments: increments)
                    : .set(data, serverTimestamps: serverTimestamps))
        }

        /// Writes one operation as the seed's table says (`AbrovaSync.write`).
        private func write(_ operation: WriteOperation) async throws(AbrovaSyncError) -> DocumentSnapshot {
            let key = key
            return try await sync.write(key) { store, online in try await store.write(operation, for: key, asWritten: online) }
        }

        /// Replaces the document with `value` encoded.
        @discardableResult
        public func setData(from value: some Encodable) async throws(AbrovaSyncError) -> DocumentSnapshot {
            try await setData(try encodeDocument(value))
        }

        /// Writes `value` encoded, merged into the document as `setData(_:merge:)` does.
        @discardableResult
        public func setData(from value: some Encodable, merge: Bool) async throws(AbrovaSyncError) -> DocumentSnapshot {
            try await setData(try encodeDocument(value), merge: merge)
        }

        /// Updates fields by dotted path: values, removals and set changes (`FieldValue`).
        ///
        /// - Throws: `AbrovaSyncError`: `.refused` for `notFound` when the document does not exist; otherwise as
        ///   `setData(_:)`.
        @discardableResult
        public func updateData(_ fields: [String: FieldValue]) async throws(AbrovaSyncError) -> DocumentSnapshot {
            try await update(fields)
        }

        /// Updates fields by dotted path, given as Swift values or `FieldValue`s:
        ///
        ///     try await cart.updateData(["qty.milk": quantity + 1, "items": .arrayUnion([item])])
        @_disfavoredOverload
        @discardableResult
        public func updateData(_ fields: [String: any FieldValueConvertible]) async throws(AbrovaSyncError) -> DocumentSnapshot {
            try await update(fields.mapValues(\.fieldValue))
        }

        private func update(_ fields: [String: FieldValue]) async throws(AbrovaSyncError) -> DocumentSnapshot {
            try await write(try WriteOperations.update(fields))
        }

        /// Deletes the document.
        @discardableResult
        public func delete() async throws(AbrovaSyncError) -> DocumentSnapshot {
            let key = key
            return try await sync.write(key) { store, online in try await store.write(.delete, for: key, asWritten: online) }
        }

        /// The document now and after every change (local writes, rollbacks, pulled changes).
        public func snapshots() async -> AsyncStream<DocumentSnapshot> {
            let key = key
            return await sync.followingStore { await $0.changes(of: key) }
        }

        /// Calls `listener` on the main actor (as Firestore calls on the main queue) with the document
        /// now and after every change, until the registration is removed. A rolled-back write's
        /// snapshot says so (`metadata.isRollback`).
        public func addSnapshotListener(_ listener: @escaping @MainActor @Sendable (DocumentSnapshot) -> Void) async -> ListenerRegistration
        {
            let stream = await snapshots()
            return ListenerRegistration(Task { @MainActor in for await snapshot in stream { listener(snapshot) } })
        }
    }
}

/// `AbrovaSync.DocumentReference`, by its short name.
public typealias DocumentReference = AbrovaSync.DocumentReference

extension AbrovaSync {
    /// A snapshot listener's registration: `remove()` stops it.
    public final class ListenerRegistration: Sendable {
        private let task: Task<Void, Never>

        init(_ task: Task<Void, Never>) { self.task = task }

        /// Stops the listener.
        public func remove() { task.cancel() }
    }
}

/// `AbrovaSync.ListenerRegistration`, by its short name.
public typealias ListenerRegistration = AbrovaSync.ListenerRegistration

extension DocumentSnapshot {
    /// The document's id in its collection.
    public var documentID: String { key.id }

    /// The value at a dotted path (`"qty.milk"`), or `nil` when the document does not exist, has
    /// no value there, or the path is not a valid one.
    public func get(_ field: String) -> Value? {
        guard let data, let path = try? FieldPath(field), !path.isRoot else { return nil }
        return data[path]
    }

    /// The document decoded as `type` (`nil` when it does not exist).
    public func data<T: Decodable>(as type: T.Type) throws(AbrovaSyncError) -> T? {
        guard let data else { return nil }
        return try decodeDocument(type, from: data)
    }
}

/// Writes `Date` and `Data` as the JSON forms of timestamps and bytes, which `Value(json:)` reads.
private var documentEncoder: JSONEncoder {
    let encoder = JSONEncoder()
    encoder.dateEncodingStrategy = .custom { date, encoder in
        var container = encoder.singleValueContainer()
        try container.encode(Value.timestamp(Timestamp(date)))
    }
    encoder.dataEncodingStrategy = .custom { data, encoder in
        var container = encoder.singleValueContainer()
        try container.encode(Value.bytes([UInt8](data)))
    }
    return encoder
}

/// Reads a `Date` from a timestamp and `Data` from bytes, and nothing else.
private var documentDecoder: JSONDecoder {
    let decoder = JSONDecoder()
    decoder.dateDecodingStrategy = .custom { decoder in
        let container = try decoder.singleValueContainer()
        guard let date = try container.decode(Value.self).dateValue else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "a Date is read from a timestamp")
        }
        return date
    }
    decoder.dataDecodingStrategy = .custom { decoder in
        let container = try decoder.singleValueContainer()
        guard let data = try container.decode(Value.self).dataValue else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "Data is read from bytes")
        }
        return data
    }
    return decoder
}

private func encodeDocument(_ value: some Encodable) throws(AbrovaSyncError) -> [String: Value] {
    do {
        let json = try documentEncoder.encode(value)
        guard case .map(let fields) = try Value(json: Array(json)) else {
            throw AbrovaSyncError(.refused, reason: .invalid, message: "a document must encode as a JSON object")
        }
        return fields
    } catch let error as AbrovaSyncError {
        throw error
    } catch {
        throw AbrovaSyncError(.refused, reason: .invalid, message: "the value cannot be stored: \(error)")
    }
}

private func decodeDocument<T: Decodable>(_ type: T.Type, from data: Value) throws(AbrovaSyncError) -> T {
    do {
        return try documentDecoder.decode(type, from: Data(data.canonicalJSON.utf8))
    } catch {
        throw AbrovaSyncError(.refused, reason: .invalid, message: "the document does not decode as \(type): \(error)")
    }
}
