import AbrovaCore
import AbrovaSQLite

extension LocalStore {
    /// The batch to send: the one in flight if there is one (the same bytes as before), else the
    /// oldest pending changes (at most `maximumChanges`, and no more than fit in a body of
    /// `maximumBytes`, but always one), frozen now under the next sequence number, each with the
    /// strategy `strategyOf` gives its document (frozen with it, so that a retry is the same batch
    /// whatever the app's settings are by then). `nil` when nothing is unsent.
    public func freezeBatch(maximumChanges: Int = .max, maximumBytes: Int = .max,
                            strategyOf: (DocumentKey) -> ConflictStrategy? = { _ in nil }) throws -> FrozenBatch? {
        try translatingErrors {
            if let frozen = try inflightBatch() { return frozen }
            // The changes of a document whose conflict the resolver is deciding wait for it (the
            // resolution goes before them); the rest of the queue goes on.
            let held = memory.heldDocuments.isEmpty ? "" : "WHERE (collection, id) NOT IN (SELECT collection, id FROM unresolved) "
            let pending = try database.query("SELECT \(QueueRow.pendingColumns) FROM pending \(held)ORDER BY sequence LIMIT ?",
                                             [.integer(Int64(max(1, maximumChanges)))], QueueRow.init)
            guard !pending.isEmpty else { return nil }
            let rows = FreezePlan.rowsFitting(pending, maximumBytes: maximumBytes)
            let deltas = try rows.map { try memory.decodedPending[$0.sequence] ?? Self.decodeDelta($0.delta) }
            var confirmed: [DocumentKey: DocumentState] = [:]
            for key in FreezePlan.documentsPruned(rows, deltas: deltas) { confirmed[key] = try confirmedState(of: key) }
            let plan = FreezePlan(rows: rows, deltas: deltas, confirmed: confirmed, clientID: clientID, sequence: memory.nextBatch,
                                  strategyOf: strategyOf)
            let stillPending = try database.write { database in try apply(plan, in: database) }
            memory.froze(plan, stillPending: stillPending)
            if !plan.cancelledWrites.isEmpty { notify(changed: Set(plan.cancelledWrites.keys)) }
            return memory.inflight
        }
    }

    /// Writes a freeze: the batch's changes into `inflight`, the rows it took out of `pending`, its
    /// body and the next batch's number. When it cancelled changes, returns the documents that
    /// still have changes pending (the batch left later ones of theirs in the queue).
    private func apply(_ plan: FreezePlan, in database: Database) throws -> Set<DocumentKey> {
        for (position, frozen) in plan.changes.enumerated() {
            try database.run("""
                INSERT INTO inflight (position, collection, id, delta, writes, view, parts, as_written, origin)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
                             [.integer(Int64(position)), .text(frozen.change.key.collection), .text(frozen.change.key.id),
                              .blob(frozen.encoded), .integer(Int64(frozen.change.writes)), SQLiteValue(frozen.view),
                              SQLiteValue(frozen.parts), .integer(frozen.isAsWritten ? 1 : 0), .integer(frozen.origin)])
        }
        if memory.heldDocuments.isEmpty, let last = plan.takenRows.last {
            try database.run("DELETE FROM pending WHERE sequence <= ?", [.integer(last)])
        } else {
            // Held changes stay among the frozen ones.
            for row in plan.takenRows { try database.run("DELETE FROM pending WHERE sequence = ?", [.integer(row)]) }
        }
        if !plan.changes.isEmpty {
            try database.run("INSERT INTO batch (sequence, body) VALUES (?, ?)", [.integer(plan.sequence), .blob(plan.body)])
        }
        try setMeta("next_batch_sequence", String(plan.sequence + 1), in: database)
        guard !plan.cancelledWrites.isEmpty else { return [] }
        return Set(try database.query("SELECT collection, id FROM pending") { row in
            DocumentKey(collection: row.text(0) ?? "", id: row.text(1) ?? "")
        })
    }

    /// The batch in flight, if there is one.
    func inflightBatch() throws -> FrozenBatch? {
        if let inflight = memory.inflight { return inflight }
        guard let body = try database.queryFirst("SELECT body FROM batch", [], { $0.blob(0) ?? [] }) else { return nil }
        do {
            let rows = try database.query("SELECT origin FROM inflight ORDER BY position") { $0.integer(0) }
            let frozen = FrozenBatch(batch: try Batch(encoded: try Value(json: body, maximumDepth: ValueLimits.maximumEncodedDepth)), body: body,
                                     rows: rows)
            memory.readInflight(frozen)
            return frozen
        } catch {
            throw StoreError(.corrupt, "the batch in flight cannot be read: \(error)")
        }
    }

    /// Puts the changes of the batch in flight back at the head of the queue, unsent, in their
    /// order, and forgets the batch: for a batch the server refused as a whole because of its
    /// size or one of its changes (it applied none of it), to be frozen again in smaller
    /// batches under new numbers. Nothing else changes: the views and the unsent writes stay.
    ///
    /// - Throws: `StoreError`.
    public func unfreezeBatch() throws {
        try translatingErrors {
            guard try inflightBatch() != nil else { return }
            let rows = try database.query("SELECT \(QueueRow.inflightColumns) FROM inflight ORDER BY position", [], QueueRow.init)
            // Below every pending change: they were written after these.
            let first = try database.queryFirst("SELECT min(sequence) FROM pending") { $0.isNull(0) ? nil : $0.integer(0) } ?? nil
            let start = (first ?? 1) - Int64(rows.count)
            try database.write { database in
                for (offset, row) in rows.enumerated() {
                    try database.run("""
                        INSERT INTO pending (sequence, collection, id, delta, writes, view, parts, as_written, origin)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                                     [.integer(start + Int64(offset)), .text(row.key.collection), .text(row.key.id), .blob(row.delta),
                                      .integer(Int64(row.writes)), SQLiteValue(row.view), SQLiteValue(row.parts), .integer(row.isAsWritten ? 1 : 0),
                                      row.origin.map(SQLiteValue.integer) ?? .null])
                }
                try database.run("DELETE FROM inflight")
                try database.run("DELETE FROM batch")
            }
            memory.unfroze()
        }
    }

    /// Settles the server's answer to the batch in flight, in one transaction: an applied change
    /// updates the confirmed state with the server's versions (and later pending changes of the
    /// document are rebased past this client's own writes); a refused change is dropped and its
    /// document rolls back to the confirmed state; under the manual strategy a conflicting change
    /// is dropped and its conflicts returned for the app's resolver.
    ///
    /// - Throws: `StoreError` `.unexpectedAnswer` when the answer does not fit the batch in flight.
    public func settle(batch sequence: Int64, results: [ChangeResult]) throws -> SettleReport {
        try translatingErrors {
            guard let frozen = try inflightBatch(), frozen.batch.sequence == sequence else {
                throw StoreError(.unexpectedAnswer, "batch \(sequence) is not the batch in flight")
            }
            let changes = frozen.batch.changes
            guard results.count == changes.count else {
                throw StoreError(.unexpectedAnswer, "batch \(sequence) holds \(changes.count) changes; the answer has \(results.count)")
            }
            // Only the confirmed states: rebuilding views here would scan the pending changes
            // (they have no index) once per document out of memory.
            var before: [DocumentKey: DocumentState] = [:]
            for change in changes where before[change.key] == nil { before[change.key] = try confirmedState(of: change.key) }
            let extras = SettledAnswer.needsInflightExtras(changes, results) ? try inflightExtras() : [:]
            // The app's view of a document left to the resolver (rare, so rebuilt here rather than
            // read for every change).
            var localViews: [DocumentKey: String?] = [:]
            for key in SettledAnswer.documentsLeftToResolver(changes, results) { localViews[key] = .some(try appsView(of: key).documentJSON) }
            let answer = try SettledAnswer(batch: frozen, results: results, confirmedBefore: before, extras: extras, localViews: localViews)
            // Their views are not read: the plan renders them again.
            let pending = !SettlePlan.needsPendingRows(answer, memory: memory) ? [] : try database.query(
                "SELECT sequence, collection, id, delta, writes, NULL, parts, 0, NULL FROM pending ORDER BY sequence", [], QueueRow.init)
            let plan = try SettlePlan(answer: answer, pending: pending, memory: memory, newOrigin: Self.newOrigin)
            try database.write { database in try apply(plan, in: database) }
            memory.settled(plan)
            notify(changed: Set(plan.documents.keys), rollbacks: answer.rollbacks)
            return plan.report
        }
    }

    /// The in-flight rows' parts and marks, by position, for those that have any.
    private func inflightExtras() throws -> [Int64: SettledAnswer.InflightExtras] {
        Dictionary(uniqueKeysWithValues: try database.query(
            "SELECT position, parts, as_written FROM inflight WHERE parts IS NOT NULL OR as_written != 0") { row in
                (row.integer(0), SettledAnswer.InflightExtras(parts: row.blob(1), isAsWritten: row.integer(2) != 0))
            })
    }

    /// Writes a settle: the new confirmed states, the resent writes, the rebased changes and the
    /// newest views, the conflicts kept for the resolver; and the batch is no longer in flight.
    private func apply(_ plan: SettlePlan, in database: Database) throws {
        for (key, state) in plan.answer.confirmed { try saveConfirmed(state, for: key, in: database) }
        for row in plan.resentRows {
            try database.run("INSERT INTO pending (sequence, collection, id, delta, writes, as_written, origin) VALUES (?, ?, ?, ?, 1, ?, ?)",
                             [.integer(row.sequence), .text(row.key.collection), .text(row.key.id), .blob(row.delta), .integer(row.isAsWritten ? 1 : 0),
                              row.origin.map(SQLiteValue.integer) ?? .null])
        }
        for row in plan.rebasedRows {
            try database.run("UPDATE pending SET delta = ?, view = NULL, parts = ? WHERE sequence = ?",
                             [.blob(Self.encode(row.delta)), SQLiteValue(row.parts), .integer(row.sequence)])
        }
        for newest in plan.newestViews {
            try database.run("UPDATE pending SET view = ? WHERE sequence = ?", [SQLiteValue(newest.view), .integer(newest.sequence)])
        }
        for (key, kept) in plan.answer.keptConflicts {
            try database.run("INSERT OR REPLACE INTO unresolved (collection, id, local, conflicts) VALUES (?, ?, ?, ?)",
                             [.text(key.collection), .text(key.id), SQLiteValue(kept.local), .text(UnresolvedConflict.encode(kept.conflicts))])
        }
        try database.run("DELETE FROM inflight")
        try database.run("DELETE FROM batch")
    }

    /// Applies a pulled page of documents and the new cursor in one transaction. A document with
    /// unsent changes keeps them overlaid: the page replaces only its confirmed part. Without a
    /// cursor (documents read online), the cursor stays where it is: states join, so a later page
    /// holding the same documents changes nothing.
    public func applyPulledPage(_ documents: [(key: DocumentKey, state: DocumentState)], cursor: String?) throws {
        try translatingErrors {
            var updated: [DocumentKey: CachedDocument] = [:]
            var inserted: Set<DocumentKey> = []
            var unsentViews: [DocumentKey: String?] = [:]
            try database.write { database in
                for (key, state) in documents {
                    // A document this device has never seen (the bulk of an initial sync) is just
                    // inserted; the insert tells whether it was there after all. It is not kept in
                    // memory: an initial sync would fill the cache, and empty it, again and again.
                    if updated[key] == nil, memory.cache[key] == nil, memory.unsent[key] == nil {
                        let (versions, view) = state.storedForms
                        try database.run("""
                            INSERT INTO documents (collection, id, confirmed, view) VALUES (?, ?, ?, ?)
                            ON CONFLICT (collection, id) DO NOTHING
                            """, [.text(key.collection), .text(key.id), .blob(versions), SQLiteValue(view)])
                        if database.changes == 1 {
                            updated[key] = CachedDocument(confirmed: state, view: state)
                            inserted.insert(key)
                            continue
                        }
                    }
                    var document = try updated[key] ?? loaded(key)
                    document.confirmed.merge(state)
                    document.view = document.confirmed
                    if memory.unsent[key] != nil {
                        document.view = try reapplyUnsentChanges(of: key, onto: document.confirmed, in: database)
                        unsentViews[key] = .some(document.view.documentJSON)
                    }
                    try saveConfirmed(document.confirmed, for: key, in: database)
                    updated[key] = document
                }
                if let cursor { try setMeta("cursor", cursor, in: database) }
                if memory.isResyncing {
                    for (key, _) in documents {
                        try database.run("DELETE FROM resync_unseen WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
                    }
                }
            }
            // Only now that the page is committed does memory follow it.
            memory.pulled(updated.filter { !inserted.contains($0.key) }, unsentViews: unsentViews)
            notify(changed: Set(updated.keys), unsentWritesChanged: false)
        }
    }

    /// The view of a document with unsent changes: they are applied again on `confirmed`; only the
    /// newest keeps its view, written here (the others' are never shown).
    func reapplyUnsentChanges(of key: DocumentKey, onto confirmed: DocumentState, in database: Database) throws -> DocumentState {
        var view = confirmed
        let changes = try unsentChanges(of: key)
        for change in changes { view.applyLocally(change.delta, at: Self.localVersion) }
        if let newest = changes.last {
            try database.run(newest.isInflight ? "UPDATE inflight SET view = ? WHERE position = ?"
                                               : "UPDATE pending SET view = ? WHERE sequence = ?",
                             [SQLiteValue(view.documentJSON), .integer(newest.sequence)])
        }
        return view
    }

    /// Writes a document's confirmed state and the view it shows.
    private func saveConfirmed(_ state: DocumentState, for key: DocumentKey, in database: Database) throws {
        let (versions, view) = state.storedForms
        try database.run("""
            INSERT INTO documents (collection, id, confirmed, view) VALUES (?1, ?2, ?3, ?4)
            ON CONFLICT (collection, id) DO UPDATE SET confirmed = ?3, view = ?4
            """, [.text(key.collection), .text(key.id), .blob(versions), SQLiteValue(view)])
    }

    /// The document as the app has it now (its confirmed state with every unsent change), without
    /// caching it.
    private func appsView(of key: DocumentKey) throws -> DocumentState {
        if let cached = memory.cache[key] { return cached.view }
        var view = try confirmedState(of: key)
        if memory.unsent[key] != nil {
            for change in try unsentChanges(of: key) { view.applyLocally(change.delta, at: Self.localVersion) }
        }
        return view
    }

    /// The conflicts the manual strategy left to the app's resolver whose resolution is not yet
    /// written (by document).
    ///
    /// - Throws: `StoreError`.
    public func unresolvedConflicts() throws -> [UnresolvedConflict] {
        try translatingErrors {
            try database.query("SELECT collection, id, local, conflicts FROM unresolved ORDER BY collection, id") { row in
                UnresolvedConflict(key: DocumentKey(collection: row.text(0) ?? "", id: row.text(1) ?? ""),
                                   local: try row.text(2).map { try Value(json: $0) },
                                   conflicts: try UnresolvedConflict.decodeConflicts(row.text(3) ?? "[]"))
            }
        }
    }

    /// Forgets a conflict left to the resolver, once its resolution is written.
    ///
    /// - Throws: `StoreError`.
    public func forgetUnresolvedConflict(_ key: DocumentKey) throws {
        try translatingErrors {
            try database.write { database in
                try database.run("DELETE FROM unresolved WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
            }
            memory.forgotConflict(key)
        }
    }

    /// Writes the resolver's answer to a kept conflict and forgets the conflict, in one
    /// transaction: `resolution` (a `set` or a `delete`; `nil` keeps the server's document) goes
    /// before the document's changes that waited for it, so that the app's writes made while the
    /// resolver decided stay on top; without such changes it is a write of its own.
    ///
    /// - Throws: `StoreError` (`.invalidValue` for a resolution that cannot be stored).
    package func resolveConflict(_ key: DocumentKey, with resolution: WriteOperation?) throws {
        try translatingErrors {
            let first = try database.queryFirst("SELECT \(QueueRow.pendingColumns) FROM pending WHERE collection = ? AND id = ? ORDER BY sequence LIMIT 1",
                                                [.text(key.collection), .text(key.id)], QueueRow.init)
            let waiting = try first.map { try Self.decodeDelta($0.delta) }
            guard let resolution, let first, let waiting else {
                if let resolution { _ = try write(resolution, for: key) }
                try forgetUnresolvedConflict(key)
                return
            }
            let confirmed = try confirmedState(of: key)
            var delta: DocumentDelta
            do {
                switch resolution {
                case .set(let data): delta = try DocumentDelta.create(data, base: confirmed.version)
                case .delete: delta = DocumentDelta.delete(base: confirmed.version)
                case .update(let assignments, let removals, let setAdd, let setRemove):
                    delta = try DocumentDelta.update(set: assignments, remove: removals, setAdd: setAdd, setRemove: setRemove, base: confirmed.version)
                }
            } catch let error as ValueError {
                throw StoreError(error)
            }
            // The change keeps its writes' own changes while it can (Spec/storage.md, "Writes").
            let keptParts = first.writes < Self.maximumComposedWrites && (first.parts != nil || first.writes == 1)
                ? Self.encodeParts([delta] + (try first.parts.map(Self.decodeParts) ?? [waiting])) : nil
            delta.compose(with: waiting)
            var view = DocumentState()
            try database.write { database in
                try database.run("UPDATE pending SET delta = ?, writes = ?, parts = ? WHERE sequence = ?",
                                 [.blob(Self.encode(delta)), .integer(Int64(first.writes + 1)), SQLiteValue(keptParts), .integer(first.sequence)])
                try database.run("DELETE FROM unresolved WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
                view = try reapplyUnsentChanges(of: key, onto: confirmed, in: database)
            }
            memory.resolvedConflict(key, intoRow: first.sequence, delta: delta, writes: first.writes + 1, parts: keptParts,
                                    viewJSON: view.documentJSON)
            notify(changed: [key])
        }
    }

    /// The pull cursor saved with the last applied page, or `nil` before the first.
    public func pullCursor() throws -> String? {
        try translatingErrors { try meta("cursor") }
    }

    /// Starts a resync (the server said "resync required", or did not know the cursor): the next
    /// pull starts from the beginning, and when a pull ends (`endOfPull()`), every document it did
    /// not bring leaves the device, so that the device holds exactly the server's documents plus
    /// its own unsent writes. Until then confirmed states and unsent changes stay: pulled states
    /// join them. Kept in the file, so a resync cut short goes on at the next start.
    ///
    /// - Throws: `StoreError`.
    public func beginResync() throws {
        try translatingErrors {
            try database.write { database in
                try database.run("DELETE FROM meta WHERE key = 'cursor'")
                try database.run("DELETE FROM resync_unseen")
                try database.run("INSERT INTO resync_unseen (collection, id) SELECT collection, id FROM documents")
                try setMeta("resync", "1", in: database)
            }
            memory.beganResync()
        }
    }

    /// Ends a pull that reached the server's last page: when it was a resync's, the documents it
    /// did not bring leave the device. One that has unsent changes keeps them, on nothing
    /// confirmed (the server has no such document for this user any more). Returns the
    /// documents that left.
    ///
    /// - Throws: `StoreError`.
    @discardableResult
    public func endOfPull() throws -> Set<DocumentKey> {
        try translatingErrors {
            guard memory.isResyncing else { return [] }
            let unseen = try database.query("SELECT collection, id FROM resync_unseen") { row in
                DocumentKey(collection: row.text(0) ?? "", id: row.text(1) ?? "")
            }
            var unsentViews: [DocumentKey: String?] = [:]
            try database.write { database in
                for key in unseen {
                    try database.run("DELETE FROM documents WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
                    if memory.unsent[key] != nil {
                        unsentViews[key] = .some(try reapplyUnsentChanges(of: key, onto: DocumentState(), in: database).documentJSON)
                    }
                }
                try database.run("DELETE FROM resync_unseen")
                try database.run("DELETE FROM meta WHERE key = 'resync'")
            }
            memory.endedResync(left: unseen, unsentViews: unsentViews)
            let removed = Set(unseen)
            if !removed.isEmpty { notify(changed: removed, unsentWritesChanged: false) }
            return removed
        }
    }

    func meta(_ key: String) throws -> String? {
        try database.queryFirst("SELECT value FROM meta WHERE key = ?", [.text(key)]) { $0.text(0) } ?? nil
    }

    func setMeta(_ key: String, _ value: String, in database: Database) throws {
        try Self.setMeta(key, value, in: database)
    }

    /// `setMeta` where there is no store yet (while it opens).
    static func setMeta(_ key: String, _ value: String, in database: Database) throws {
        try database.run("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                         [.text(key), .text(value)])
    }
}

extension LocalStore {
    /// The user whose store this is: `.some(nil)` for the anonymous caller, `nil` while no user
    /// has been named (the SDK names one when it opens the store for a configured user, or when
    /// the server first says whose token it syncs with). One store never holds two users' data.
    ///
    /// - Throws: `StoreError`.
    public func owner() throws -> String?? {
        try translatingErrors { try Self.readOwner(database) }
    }

    /// Names the store's user (see `owner()`); done once, when no user is named yet.
    ///
    /// - Throws: `StoreError`.
    public func adoptOwner(_ user: String?) throws {
        try translatingErrors {
            try database.write { database in try Self.writeOwner(user, in: database) }
        }
    }

    static func readOwner(_ database: Database) throws -> String?? {
        guard let stored = try database.queryFirst("SELECT value FROM meta WHERE key = 'owner'", [], { $0.text(0) }) ?? nil else { return nil }
        guard let value = try? Value(json: Array(stored.utf8)) else { throw StoreError(.corrupt, "the store's owner cannot be read") }
        if value == .null { return .some(nil) }
        guard let user = value.stringValue else { throw StoreError(.corrupt, "the store's owner is not a user id") }
        return .some(user)
    }

    static func writeOwner(_ user: String?, in database: Database) throws {
        try setMeta("owner", (user.map(Value.string) ?? .null).canonicalJSON, in: database)
    }
}
