import AbrovaCore
import AbrovaSQLite

extension LocalStore {
    /// The batch to send: the one in flight if there is one (the same bytes as before), else the
    /// oldest pending changes (at most `maximumChanges`, and no more than fit in a body of
    /// `maximumBytes`, but always one), frozen now under the next sequence number, each with the
    /// strategy `strategyOf` gives its document (frozen with it, so that a retry is the same batch
    /// whatever the app's settings are by then). `nil` when nothing is unsent.
    package func freezeBatch(
        maximumChanges: Int = .max, maximumBytes: Int = .max,
        strategyOf: (DocumentKey) -> ConflictStrategy? = { _ in nil }
    ) throws(StoreError) -> FrozenBatch? {
        try translatingErrors {
            if let frozen = try inflightBatch() { return frozen }
            // The changes of a document whose conflict the resolver is deciding wait for it (the
            // resolution goes before them); the rest of the queue goes on.
            // A group with a change of such a document waits whole, and so does every change of
            // the group's other documents (none may overtake the group).
            let heldGroups =
                "SELECT group_id FROM pending WHERE group_id IS NOT NULL AND (collection, id) IN (SELECT collection, id FROM unresolved)"
            let held =
                memory.heldDocuments.isEmpty
                ? ""
                : "WHERE (collection, id) NOT IN (SELECT collection, id FROM unresolved) AND (collection, id) NOT IN "
                    + "(SELECT collection, id FROM pending WHERE group_id IN (\(heldGroups))) "
            // A batch composes each document's changes, so its changes may hold many more rows:
            // they are read a page at a time until the batch is full, or the queue ends.
            let page = max(1, min(maximumChanges, 4_096))
            var pending: [QueueRow] = []
            var rows: ArraySlice<QueueRow> = []
            // (A group is read to its end, so that the batch takes it whole.)
            while pending.count < page * Self.maximumComposedWrites || pending.last?.group != nil {
                let more = try database.query(
                    """
                    SELECT \(QueueRow.pendingColumnsWithoutView) FROM pending \(held.isEmpty ? "WHERE" : held + "AND") sequence > ?
                    ORDER BY sequence LIMIT ?
                    """,
                    [.integer(pending.last?.sequence ?? .min), .integer(Int64(page))], QueueRow.init)
                pending += more
                rows = FreezePlan.rowsFitting(pending, maximumChanges: maximumChanges, maximumBytes: maximumBytes)
                if more.count < page || rows.count < pending.count { break }
            }
            guard !pending.isEmpty else { return nil }
            let deltas = try rows.map { try memory.decodedPending[$0.sequence] ?? Self.decodeDelta($0.delta) }
            var confirmed: [DocumentKey: DocumentState] = [:]
            for key in FreezePlan.documentsPruned(rows, deltas: deltas) { confirmed[key] = try confirmedState(of: key) }
            var plan = FreezePlan(
                rows: rows, deltas: deltas, confirmed: confirmed, clientID: clientID, sequence: memory.nextBatch,
                maximumChanges: maximumChanges, strategyOf: strategyOf)
            try plan.takeViews { row in
                try database.queryFirst("SELECT view FROM pending WHERE sequence = ?", [.integer(row)]) { $0.text(0) } ?? nil
            }
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
            try database.run(
                """
                INSERT INTO inflight (position, collection, id, delta, writes, view, parts, as_written, origin, alone, group_id)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
                [
                    .integer(Int64(position)), .text(frozen.change.key.collection), .text(frozen.change.key.id),
                    .blob(frozen.encoded), .integer(Int64(frozen.change.writes)), SQLiteValue(frozen.view),
                    SQLiteValue(frozen.parts), .integer(frozen.isAsWritten ? 1 : 0), .integer(frozen.origin),
                    .integer(frozen.isAlone ? 1 : 0), frozen.change.group.map(SQLiteValue.integer) ?? .null,
                ])
        }
        if memory.heldDocuments.isEmpty, let last = plan.takenRows.last {
            if last == memory.tail?.sequence {
                // The whole queue: SQLite frees its pages without rewriting each row's.
                try database.run("DELETE FROM pending")
            } else {
                try database.run("DELETE FROM pending WHERE sequence <= ?", [.integer(last)])
            }
        } else {
            // Held changes stay among the frozen ones.
            for row in plan.takenRows { try database.run("DELETE FROM pending WHERE sequence = ?", [.integer(row)]) }
        }
        if !plan.changes.isEmpty {
            try database.run("INSERT INTO batch (sequence, body) VALUES (?, ?)", [.integer(plan.sequence), .blob(plan.body)])
        }
        try setMeta("next_batch_sequence", String(plan.sequence + 1), in: database)
        guard !plan.cancelledWrites.isEmpty else { return [] }
        return Set(
            try database.query("SELECT collection, id FROM pending") { row in
                DocumentKey(collection: row.text(0) ?? "", id: row.text(1) ?? "")
            })
    }

    /// The batch in flight, if there is one.
    func inflightBatch() throws -> FrozenBatch? {
        if let inflight = memory.inflight { return inflight }
        guard let body = try database.queryFirst("SELECT body FROM batch", [], { $0.blob(0) ?? [] }) else { return nil }
        do {
            let rows = try database.query("SELECT origin FROM inflight ORDER BY position") { $0.integer(0) }
            let frozen = FrozenBatch(
                batch: try Batch(encoded: try Value(json: body, maximumDepth: ValueLimits.maximumEncodedDepth)), body: body,
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
    package func unfreezeBatch() throws(StoreError) {
        try translatingErrors {
            guard try inflightBatch() != nil else { return }
            let rows = try database.query("SELECT \(QueueRow.inflightColumns) FROM inflight ORDER BY position", [], QueueRow.init)
            // Below every pending change: they were written after these.
            let first = try database.queryFirst("SELECT min(sequence) FROM pending") { $0.isNull(0) ? nil : $0.integer(0) } ?? nil
            let start = (first ?? 1) - Int64(rows.count)
            try database.write { database in
                for (offset, row) in rows.enumerated() {
                    try database.run(
                        """
                        INSERT INTO pending (sequence, collection, id, delta, writes, view, parts, as_written, origin, alone, group_id)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                        [
                            .integer(start + Int64(offset)), .text(row.key.collection), .text(row.key.id), .blob(row.delta),
                            .integer(Int64(row.writes)), SQLiteValue(row.view), SQLiteValue(row.parts), .integer(row.isAsWritten ? 1 : 0),
                            row.origin.map(SQLiteValue.integer) ?? .null, .integer(row.isAlone ? 1 : 0),
                            row.group.map(SQLiteValue.integer) ?? .null,
                        ])
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
    /// The server's cursor after the batch (`cursor`) is taken with it when the device's cursor is
    /// still the one the push sent and no resync is under way: the pull would bring only this
    /// batch, which the answer settles.
    ///
    /// - Throws: `StoreError` `.unexpectedAnswer` when the answer does not fit the batch in flight.
    package func settle(batch sequence: Int64, results: [ChangeResult], advancing cursor: CursorAdvance? = nil) throws(StoreError)
        -> SettleReport
    {
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
            for key in SettledAnswer.documentsLeftToResolver(changes, results) {
                localViews[key] = .some(try appsView(of: key).documentJSON)
            }
            let answer = try SettledAnswer(batch: frozen, results: results, confirmedBefore: before, extras: extras, localViews: localViews)
            // Their views are not read: the plan renders them again.
            let pending =
                !SettlePlan.needsPendingRows(answer, memory: memory)
                ? []
                : try database.query(
                    "SELECT sequence, collection, id, delta, writes, NULL, parts, 0, NULL, alone, group_id FROM pending ORDER BY sequence",
                    [],
                    QueueRow.init
                )
            let plan = try SettlePlan(answer: answer, pending: pending, memory: memory, newOrigin: { newOrigin() })
            let tookCursor = try database.write { database in
                try apply(plan, in: database)
                guard let cursor, !memory.isResyncing, try meta("cursor") == cursor.from else { return false }
                try setMeta("cursor", cursor.to, in: database)
                return true
            }
            memory.settled(plan)
            notify(changed: Set(plan.documents.keys), rollbacks: answer.rollbacks)
            // A document outside the sync scope kept for its unsent changes goes once they are sent.
            try dropDocumentsOutsideScope()
            var report = plan.report
            report.tookCursor = tookCursor
            return report
        }
    }

    /// The in-flight rows' parts and marks, by position, for those that have any.
    private func inflightExtras() throws -> [Int64: SettledAnswer.InflightExtras] {
        Dictionary(
            uniqueKeysWithValues: try database.query(
                "SELECT position, parts, as_written FROM inflight WHERE parts IS NOT NULL OR as_written != 0"
            ) { row in
                (row.integer(0), SettledAnswer.InflightExtras(parts: row.blob(1), isAsWritten: row.integer(2) != 0))
            })
    }

    /// Writes a settle: the new confirmed states, the resent writes, the rebased changes and the
    /// newest views, the conflicts kept for the resolver; and the batch is no longer in flight.
    private func apply(_ plan: SettlePlan, in database: Database) throws {
        for (key, state) in plan.answer.confirmed { try saveConfirmed(state, for: key, in: database) }
        for row in plan.resentRows {
            try database.run(
                "INSERT INTO pending (sequence, collection, id, delta, writes, as_written, origin, alone) VALUES (?, ?, ?, ?, 1, ?, ?, 1)",
                [
                    .integer(row.sequence), .text(row.key.collection), .text(row.key.id), .blob(row.delta),
                    .integer(row.isAsWritten ? 1 : 0),
                    row.origin.map(SQLiteValue.integer) ?? .null,
                ])
        }
        for row in plan.rebasedRows {
            try database.run(
                "UPDATE pending SET delta = ?, view = NULL, parts = ? WHERE sequence = ?",
                [.blob(Self.encode(row.delta)), SQLiteValue(row.parts), .integer(row.sequence)])
        }
        for newest in plan.newestViews {
            try database.run("UPDATE pending SET view = ? WHERE sequence = ?", [SQLiteValue(newest.view), .integer(newest.sequence)])
        }
        for (key, kept) in plan.answer.keptConflicts {
            try database.run(
                "INSERT OR REPLACE INTO unresolved (collection, id, local, conflicts) VALUES (?, ?, ?, ?)",
                [.text(key.collection), .text(key.id), SQLiteValue(kept.local), .text(UnresolvedConflict.encode(kept.conflicts))])
        }
        try database.run("DELETE FROM inflight")
        try database.run("DELETE FROM batch")
    }
}
