import AbrovaCore
import AbrovaLocking
import AbrovaStore

extension AbrovaSync {
    /// Writes to several documents that stand or fall together, with Firestore's spelling:
    ///
    ///     let batch = sync.batch()
    ///     batch.updateData(["qty.eggs": .delete(), "items": .arrayRemove(["eggs"])], forDocument: cart)
    ///     batch.setData(["qty": 6], forDocument: savedForLater.document("eggs"), merge: true)
    ///     try await batch.commit()
    ///
    /// Staging is synchronous and checks nothing; `commit()` saves every write on the device in one
    /// transaction (or none, when one cannot be made: an update of a document the device does
    /// not have, a value that cannot be stored), and the server applies them all or none. Online,
    /// `commit()` returns once the server has the group, or throws the refusal of the write at
    /// fault; offline it returns at once, the group queued. A group refused later is rolled back
    /// on the device whole and reported once (`documentRejections`), by the write at fault. At
    /// most 500 writes; a batch commits once.
    public final class WriteBatch: Sendable {
        private struct Staged: Sendable {
            var writes: [(operation: WriteOperation, key: DocumentKey)] = []
            /// The first write that could not be staged, thrown by `commit()`.
            var error: AbrovaSyncError?
            var isCommitted = false
        }

        private let sync: AbrovaSync
        private let staged = Protected(Staged())

        init(sync: AbrovaSync) { self.sync = sync }

        private func stage(_ document: DocumentReference, _ operation: () throws(AbrovaSyncError) -> WriteOperation) -> WriteBatch {
            let made = Result { () throws(AbrovaSyncError) in try operation() }
            staged.withLock { staged in
                switch made {
                case .success(let operation): staged.writes.append((operation, document.key))
                case .failure(let error): if staged.error == nil { staged.error = error }
                }
            }
            return self
        }

        /// Replaces the document with exactly these fields (creating it), as `setData(_:)`.
        @discardableResult
        public func setData(_ data: [String: Value], forDocument document: DocumentReference) -> WriteBatch {
            stage(document) { .set(data) }
        }

        /// With `merge: true`, writes these fields into the document, as `setData(_:merge:)`.
        @discardableResult
        public func setData(_ data: [String: Value], forDocument document: DocumentReference, merge: Bool) -> WriteBatch {
            stage(document) { merge ? .setMerging(data) : .set(data) }
        }

        /// `setData` with Swift values, `serverTimestamp()` and `increment(_:)`.
        @_disfavoredOverload
        @discardableResult
        public func setData(
            _ data: [String: any FieldValueConvertible], forDocument document: DocumentReference, merge: Bool = false
        ) -> WriteBatch {
            stage(document) { () throws(AbrovaSyncError) in try WriteOperations.set(data, merge: merge) }
        }

        /// Updates fields by dotted path, as `updateData(_:)`; the document must exist when the
        /// batch commits.
        @discardableResult
        public func updateData(_ fields: [String: FieldValue], forDocument document: DocumentReference) -> WriteBatch {
            stage(document) { () throws(AbrovaSyncError) in try WriteOperations.update(fields) }
        }

        /// `updateData` with Swift values.
        @_disfavoredOverload
        @discardableResult
        public func updateData(_ fields: [String: any FieldValueConvertible], forDocument document: DocumentReference) -> WriteBatch {
            stage(document) { () throws(AbrovaSyncError) in try WriteOperations.update(fields.mapValues(\.fieldValue)) }
        }

        /// Deletes the document.
        @discardableResult
        public func deleteDocument(_ document: DocumentReference) -> WriteBatch {
            stage(document) { .delete }
        }

        /// Saves the writes together, as the seed's table says for one write (see the type).
        ///
        /// - Throws: `AbrovaSyncError`: `.refused` (`invalid`) for a batch with no write, more
        ///   than 500, a write that could not be staged or a second commit; otherwise as
        ///   `DocumentReference.setData(_:)` and `updateData(_:)`: nothing of the batch is saved.
        public func commit() async throws(AbrovaSyncError) {
            let writes = try staged.withLock { staged throws(AbrovaSyncError) in
                if let error = staged.error { throw error }
                guard !staged.isCommitted else {
                    throw AbrovaSyncError(.refused, reason: .invalid, message: "this batch was committed already")
                }
                staged.isCommitted = true
                return staged.writes
            }
            try await sync.writeGroup(writes)
        }
    }

    /// A batch of writes to commit together (`WriteBatch`).
    public func batch() -> WriteBatch { WriteBatch(sync: self) }
}

/// `AbrovaSync.WriteBatch`, by its short name.
public typealias WriteBatch = AbrovaSync.WriteBatch
