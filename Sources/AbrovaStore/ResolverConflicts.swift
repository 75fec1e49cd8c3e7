import AbrovaCore
import AbrovaSQLite

extension LocalStore {
    /// The conflicts the manual strategy left to the app's resolver whose resolution is not yet
    /// written (by document).
    ///
    /// - Throws: `StoreError`.
    package func unresolvedConflicts() throws(StoreError) -> [UnresolvedConflict] {
        try translatingErrors {
            try database.query("SELECT collection, id, local, conflicts FROM unresolved ORDER BY collection, id") { row in
                UnresolvedConflict(
                    key: DocumentKey(collection: row.text(0) ?? "", id: row.text(1) ?? ""),
                    local: try row.text(2).map { try Value(json: $0) },
                    conflicts: try UnresolvedConflict.decodeConflicts(row.text(3) ?? "[]"))
            }
        }
    }

    /// Whether the conflict of `key` is left to the resolver, its resolution not yet written.
    package func isConflictKept(_ key: DocumentKey) -> Bool {
        memory.heldDocuments.contains(key)
    }

    /// Forgets a conflict left to the resolver, once its resolution is written.
    ///
    /// - Throws: `StoreError`.
    package func forgetUnresolvedConflict(_ key: DocumentKey) throws(StoreError) {
        try translatingErrors {
            try database.write { database in
                try database.run("DELETE FROM unresolved WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
            }
            memory.forgotConflict(key)
            notify(changed: [])
        }
    }

    /// The server's document as this device last confirmed it, and its version: what a resolver
    /// is shown, and what its resolution is written on.
    ///
    /// - Throws: `StoreError`.
    package func confirmedDocument(_ key: DocumentKey) throws(StoreError) -> (data: Value?, version: Version) {
        try translatingErrors {
            let state = try confirmedState(of: key)
            return (state.document, state.version)
        }
    }

    /// Writes the resolver's answer to a kept conflict and forgets the conflict, in one
    /// transaction: `resolution` (a `set` or a `delete`; `nil` keeps the server's document) goes
    /// before the document's changes that waited for it, so that the app's writes made while the
    /// resolver decided stay on top; without such changes it is a write of its own.
    ///
    /// `seenVersion` is the version of the server's document the resolver was shown
    /// (`confirmedDocument`). When a newer one arrived while it decided, nothing is written, the
    /// conflict stays kept and this returns `false`: the resolution was made without the newer
    /// change, which it would overwrite unseen, so the resolver is to be asked again. A conflict
    /// resolved already is left alone (this returns `true`): a resolver asked twice for it, by runs
    /// that met it at once, must not have its first answer overwritten or counted twice.
    ///
    /// - Throws: `StoreError` (`.invalidValue` for a resolution that cannot be stored).
    @discardableResult
    package func resolveConflict(_ key: DocumentKey, with resolution: WriteOperation?, seenVersion: Version) throws(StoreError) -> Bool {
        try translatingErrors {
            guard memory.heldDocuments.contains(key) else { return true }
            guard try confirmedState(of: key).version == seenVersion else { return false }
            let first = try database.queryFirst(
                "SELECT \(QueueRow.pendingColumns) FROM pending WHERE collection = ? AND id = ? ORDER BY sequence LIMIT 1",
                [.text(key.collection), .text(key.id)], QueueRow.init)
            let waiting = try first.map { try Self.decodeDelta($0.delta) }
            guard let resolution, let first, let waiting else {
                if let resolution {
                    _ = try write(
                        resolution, for: key, asWritten: false,
                        alongside: { database in
                            try database.run(
                                "DELETE FROM unresolved WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
                        },
                        afterCommit: { $0.forgotConflict(key) })
                } else {
                    try forgetUnresolvedConflict(key)
                }
                return true
            }
            let confirmed = try confirmedState(of: key)
            var delta: DocumentDelta
            do {
                switch resolution {
                case .set(let data, let stamps):
                    delta = try DocumentDelta.create(data, base: confirmed.version).markingServerTimestamps(stamps)
                case .setMerging(let data, let stamps, let increments):
                    // Made before the writes waiting behind it, which are composed after it.
                    delta = try DocumentDelta.setMerging(data, base: confirmed.version, view: confirmed, hasPendingChange: false)
                        .markingServerTimestamps(stamps)
                        .incrementing(topLevel: increments, base: confirmed.version)
                case .delete: delta = DocumentDelta.delete(base: confirmed.version)
                case .update(let assignments, let removals, let setAdd, let setRemove, let stamps, let increments):
                    delta = try DocumentDelta.update(
                        set: assignments, remove: removals, setAdd: setAdd, setRemove: setRemove, serverTimestamps: stamps,
                        increments: increments, base: confirmed.version)
                }
            } catch let error as ValueError {
                throw StoreError(error)
            }
            if first.group != nil {
                // A group's change takes nothing in (it holds its group's writes, no other): the
                // resolution goes alone at the head of the queue, before it.
                var view = DocumentState()
                var sequence: Int64 = 0
                let origin = newOrigin()
                try database.write { database in
                    let head = try database.queryFirst("SELECT min(sequence) FROM pending") { $0.integer(0) } ?? 1
                    sequence = head - 1
                    try database.run(
                        "INSERT INTO pending (sequence, collection, id, delta, writes, as_written, origin, alone) VALUES (?, ?, ?, ?, 1, 0, ?, 1)",
                        [.integer(sequence), .text(key.collection), .text(key.id), .blob(Self.encode(delta)), .integer(origin)])
                    try database.run(
                        "UPDATE pending SET as_written = 0 WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
                    try database.run("DELETE FROM unresolved WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
                    view = try reapplyUnsentChanges(of: key, onto: confirmed, in: database)
                    // A resolution that takes the document out of the sync scope: it leaves once sent.
                    if try isOutsideScope(key, state: view) { try setMeta("scope_leftovers", "1", in: database) }
                }
                memory.resolvedConflict(key, intoRow: sequence, delta: delta, writes: 1, parts: nil, viewJSON: view.documentJSON)
                notify(changed: [key])
                return true
            }
            // The resolution goes first in the document's first pending change; were it to
            // increment a counter that change overwrites, composing would lose the increment.
            guard delta.canCompose(with: waiting) else {
                throw StoreError(
                    .invalidValue,
                    "the resolution increments a counter that the writes waiting behind it overwrite; assign the value instead")
            }
            // The change keeps its writes' own changes while it can (Spec/storage.md, "Writes").
            let keptParts =
                first.parts != nil || first.writes == 1
                ? Self.encodeParts([delta] + (try first.parts.map(Self.decodeParts) ?? [waiting])) : nil
            delta.compose(with: waiting)
            var view = DocumentState()
            try database.write { database in
                // The resolution is sent under the document's strategy, never as written: it is
                // made on the server's document as the resolver saw it, and a newer change there
                // must come back to the resolver, not be overwritten. The waiting writes, made on
                // the same document, go the same way.
                try database.run(
                    "UPDATE pending SET delta = ?, writes = ?, parts = ? WHERE sequence = ?",
                    [.blob(Self.encode(delta)), .integer(Int64(first.writes + 1)), SQLiteValue(keptParts), .integer(first.sequence)])
                try database.run(
                    "UPDATE pending SET as_written = 0 WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
                try database.run("DELETE FROM unresolved WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
                view = try reapplyUnsentChanges(of: key, onto: confirmed, in: database)
                // A resolution that takes the document out of the sync scope: it leaves once sent.
                if try isOutsideScope(key, state: view) { try setMeta("scope_leftovers", "1", in: database) }
            }
            memory.resolvedConflict(
                key, intoRow: first.sequence, delta: delta, writes: first.writes + 1, parts: keptParts,
                viewJSON: view.documentJSON)
            notify(changed: [key])
            return true
        }
    }
}
