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
            let held = heldDocuments.isEmpty ? "" : "WHERE (collection, id) NOT IN (SELECT collection, id FROM unresolved) "
            let pending = try database.query("SELECT collection, id, delta, writes, view, sequence, parts, as_written, origin FROM pending \(held)ORDER BY sequence LIMIT ?",
                                             [.integer(Int64(max(1, maximumChanges)))]) { row in
                (DocumentKey(collection: row.text(0) ?? "", id: row.text(1) ?? ""), row.blob(2) ?? [],
                 Int(row.integer(3)), row.text(4), row.integer(5), row.blob(6), row.integer(7) != 0, row.integer(8))
            }
            guard !pending.isEmpty else { return nil }
            var lastFrozen = pending[0].4
            // Removes of elements the server never showed this device take nothing: drop them, and
            // changes left with nothing to do (their views are those of the change before them).
            // An element an earlier change of this batch adds counts as shown: the server applies
            // that add first, and the remove must take it.
            // Each change keeps its stored bytes unless pruning changed it.
            var changes: [(change: BatchChange, encoded: [UInt8]?, parts: [UInt8]?, isAsWritten: Bool, row: Int64)] = []
            var cancelled: [DocumentKey: Int] = [:]
            var observed: [DocumentKey: DocumentState] = [:]
            // The view after the batch's last change of each document (cancelled or not): only the
            // newest change of a document keeps its view (Spec/storage.md), and once in flight that
            // is the document's last kept change of the batch, unless later ones are still pending.
            var lastViews: [DocumentKey: String?] = [:]
            var bodyBytes = Batch.encodedOverhead
            var frozenRows: [Int64] = []
            for (key, encoded, writes, view, sequenceNumber, parts, isAsWritten, origin) in pending {
                // The batch is full when this change would take its body past `maximumBytes`.
                let changeBytes = Batch.encodedOverhead(of: key) + encoded.count
                if !changes.isEmpty, bodyBytes + changeBytes > maximumBytes { break }
                bodyBytes += changeBytes
                lastFrozen = sequenceNumber
                frozenRows.append(sequenceNumber)
                // Leaves `pending` now (the entry, if any, is the row's change).
                let delta = try decodedPending.removeValue(forKey: sequenceNumber) ?? Self.decodeDelta(encoded)
                var pruned = delta
                var isPruned = false
                if !delta.setChanges.isEmpty || observed[key] != nil {
                    // Taken out while it changes, so that the change is made in place, not on a copy.
                    var state = try observed.removeValue(forKey: key) ?? confirmedState(of: key)
                    if !delta.setChanges.isEmpty {
                        pruned = delta.droppingUnobservedRemoves(confirmed: state)
                        isPruned = pruned != delta
                    }
                    state.applyLocally(pruned, at: Self.localVersion)
                    observed[key] = state
                }
                lastViews[key] = .some(view)
                if pruned.isEmpty {
                    cancelled[key, default: 0] += writes
                } else {
                    // Saved as written is what clientWins does to a change: each field it writes
                    // takes its value, a delete deletes (Spec/conflicts.md, "Online writes").
                    let strategy = isAsWritten ? .clientWins : strategyOf(key)
                    changes.append((BatchChange(key: key, delta: pruned, writes: writes, strategy: strategy), isPruned ? nil : encoded, parts, isAsWritten,
                                    origin))
                }
            }
            var lastPositions: [DocumentKey: Int] = [:]
            for (position, (change, _, _, _, _)) in changes.enumerated() { lastPositions[change.key] = position }
            let sequence = nextBatch
            let batch = Batch(clientID: clientID, sequence: sequence, changes: changes.map(\.change))
            var body: [UInt8] = []
            batch.writeEncoded(to: &body)
            try database.write { database in
                for (position, (change, encoded, parts, isAsWritten, row)) in changes.enumerated() {
                    let view = lastPositions[change.key] == position ? lastViews[change.key] ?? nil : nil
                    try database.run("""
                        INSERT INTO inflight (position, collection, id, delta, writes, view, parts, as_written, origin)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                                     [.integer(Int64(position)), .text(change.key.collection), .text(change.key.id),
                                      .blob(encoded ?? Self.encode(change.delta)), .integer(Int64(change.writes)), SQLiteValue(view),
                                      SQLiteValue(parts), .integer(isAsWritten ? 1 : 0), .integer(row)])
                }
                if heldDocuments.isEmpty {
                    try database.run("DELETE FROM pending WHERE sequence <= ?", [.integer(lastFrozen)])
                } else {
                    // Held changes stay among the frozen ones.
                    for row in frozenRows { try database.run("DELETE FROM pending WHERE sequence = ?", [.integer(row)]) }
                }
                if !changes.isEmpty { try database.run("INSERT INTO batch (sequence, body) VALUES (?, ?)", [.integer(sequence), .blob(body)]) }
                try setMeta("next_batch_sequence", String(sequence + 1), in: database)
            }
            nextBatch = sequence + 1
            if let tail, frozenRows.contains(tail.sequence) { self.tail = nil }
            var stillUnsent = Set(changes.map(\.change.key))
            if !cancelled.isEmpty {
                // Documents may have later changes that this batch left pending.
                stillUnsent.formUnion(try database.query("SELECT collection, id FROM pending") { row in
                    DocumentKey(collection: row.text(0) ?? "", id: row.text(1) ?? "")
                })
            }
            for (key, writes) in cancelled {
                unsentWriteCount -= writes
                if stillUnsent.contains(key) {
                    unsent[key]?.writes -= writes
                } else {
                    // Nothing of this document is left to send: it shows its confirmed state.
                    unsent[key] = nil
                    cache[key] = nil
                }
            }
            if !cancelled.isEmpty { notify(changed: Set(cancelled.keys)) }
            guard !changes.isEmpty else { return nil }
            inflight = FrozenBatch(batch: batch, body: body, rows: changes.map(\.row))
            return inflight
        }
    }

    /// The batch in flight, if there is one.
    func inflightBatch() throws -> FrozenBatch? {
        if let inflight { return inflight }
        guard let body = try database.queryFirst("SELECT body FROM batch", [], { $0.blob(0) ?? [] }) else { return nil }
        do {
            let rows = try database.query("SELECT origin FROM inflight ORDER BY position") { $0.integer(0) }
            inflight = FrozenBatch(batch: try Batch(encoded: try Value(json: body, maximumDepth: ValueLimits.maximumEncodedDepth)), body: body,
                                   rows: rows)
            return inflight
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
            let rows = try database.query("SELECT collection, id, delta, writes, view, parts, as_written, origin FROM inflight ORDER BY position") { row in
                (row.text(0) ?? "", row.text(1) ?? "", row.blob(2) ?? [], row.integer(3), row.text(4), row.blob(5), row.integer(6),
                 row.isNull(7) ? SQLiteValue.null : .integer(row.integer(7)))
            }
            // Below every pending change: they were written after these.
            let first = try database.queryFirst("SELECT min(sequence) FROM pending") { $0.isNull(0) ? nil : $0.integer(0) } ?? nil
            let start = (first ?? 1) - Int64(rows.count)
            try database.write { database in
                for (offset, (collection, id, delta, writes, view, parts, asWritten, origin)) in rows.enumerated() {
                    try database.run("""
                        INSERT INTO pending (sequence, collection, id, delta, writes, view, parts, as_written, origin)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                                     [.integer(start + Int64(offset)), .text(collection), .text(id), .blob(delta), .integer(writes),
                                      SQLiteValue(view), SQLiteValue(parts), .integer(asWritten), origin])
                }
                try database.run("DELETE FROM inflight")
                try database.run("DELETE FROM batch")
            }
            inflight = nil
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
            var report = SettleReport()
            // Only the confirmed states: rebuilding views here would scan the pending changes
            // (they have no index) once per document out of memory.
            var before: [DocumentKey: DocumentState] = [:]
            for change in changes where before[change.key] == nil { before[change.key] = try confirmedState(of: change.key) }
            var confirmed: [DocumentKey: DocumentState] = [:]
            var ownVersions: [DocumentKey: Set<Version>] = [:]
            var settledWrites: [DocumentKey: Int] = [:]
            var rollbacks: Set<DocumentKey> = []
            var unresolved: [DocumentKey: (local: String?, conflicts: [Conflict])] = [:]
            // Documents whose view the answer may change: any result but an uncontested change this
            // device joined itself. For the others the confirmed state now holds the changes the
            // view already showed, so the view (the confirmed state plus every unsent change) is
            // the same, and it is kept rather than rebuilt from the pending changes.
            var reshown: Set<DocumentKey> = []
            // Refused changes of several writes, sent again write by write (each write's change, in
            // order), so that the refusal lands on the write at fault and the others reach the
            // server; with them the document's later changes of the batch, whatever their answer
            // (they were judged without the refused one; sent again after its writes, they end on
            // top, and what they wrote bears being written twice).
            var resent: [(key: DocumentKey, parts: [DocumentDelta], isAsWritten: Bool, row: Int64?)] = []
            let frozenRows = frozen.rows.count == changes.count ? frozen.rows : nil
            var partsInFlight: [Int64: (parts: [UInt8]?, isAsWritten: Bool)]?
            func inflightRow(at position: Int) throws -> (parts: [UInt8]?, isAsWritten: Bool)? {
                if partsInFlight == nil {
                    partsInFlight = Dictionary(uniqueKeysWithValues: try database.query(
                        "SELECT position, parts, as_written FROM inflight WHERE parts IS NOT NULL OR as_written != 0") { row in
                            (row.integer(0), (row.blob(1), row.integer(2) != 0))
                        })
                }
                return partsInFlight?[Int64(position)]
            }
            func writes(at position: Int) throws -> [DocumentDelta]? {
                try inflightRow(at: position)?.parts.map(Self.decodeParts)
            }
            for (position, (change, result)) in zip(changes, results).enumerated() {
                // Taken out while it changes, so that the join is made in place, not on a copy of the
                // document's fields.
                var state = confirmed.removeValue(forKey: change.key) ?? before.removeValue(forKey: change.key) ?? DocumentState()
                settledWrites[change.key, default: 0] += change.writes
                if report.resent.contains(change.key) {
                    resent.append((change.key, try writes(at: position) ?? [change.delta], try inflightRow(at: position)?.isAsWritten ?? false,
                                   frozenRows?[position]))
                    settledWrites[change.key, default: 0] -= change.writes
                    if case .applied(let version, let server, _) = result {
                        if let server { state.merge(server) }
                        ownVersions[change.key, default: []].insert(version)
                    }
                    confirmed[change.key] = state
                    continue
                }
                switch result {
                case .applied(let version, let server, let conflicts):
                    if let server {
                        state.merge(server)
                        reshown.insert(change.key)
                    } else if state.version < version {
                        // Uncontested: the server's state is ours with the change joined, rebased as
                        // the server rebased it past this batch's earlier changes of the document.
                        // (From a version on, a pull already brought a state that holds the change.)
                        // Should the join fail here (it did not on the server), the next pull brings it.
                        let delta = ownVersions[change.key].map { change.delta.rebased(onto: state, ownVersions: $0) } ?? change.delta
                        if (try? ConflictStrategy.merge.apply(delta, to: &state, version: version)) == nil { reshown.insert(change.key) }
                    } else {
                        reshown.insert(change.key)
                    }
                    ownVersions[change.key, default: []].insert(version)
                    if !conflicts.isEmpty {
                        report.conflicts[change.key, default: []] += conflicts
                        reshown.insert(change.key)
                    }
                case .unresolved(let server, let conflicts):
                    state.merge(server)
                    reshown.insert(change.key)
                    report.unresolved[change.key, default: []] += conflicts
                    // Kept with the document as the app had it, until the resolution is written.
                    // (Rare, so the view is rebuilt here rather than read for every change.)
                    let local = try unresolved[change.key]?.local ?? appsView(of: change.key).documentJSON
                    unresolved[change.key] = (local, (unresolved[change.key]?.conflicts ?? []) + conflicts)
                case .rejected(let reason, let message):
                    reshown.insert(change.key)
                    if change.writes > 1, let parts = try writes(at: position) {
                        resent.append((change.key, parts, try inflightRow(at: position)?.isAsWritten ?? false, frozenRows?[position]))
                        settledWrites[change.key, default: 0] -= change.writes
                        report.resent.insert(change.key)
                        confirmed[change.key] = state
                        continue
                    }
                    rollbacks.insert(change.key)
                    report.rejections.append(Rejection(key: change.key, operation: OperationType(change.delta),
                                                       reason: reason, message: message))
                }
                confirmed[change.key] = state
            }
            // The pending changes of these documents: rebased past this client's own writes, and
            // the view of each document's newest one rebuilt on the new confirmed state where the
            // answer may change it (the views of older ones are never shown: Spec/storage.md). A document has some exactly when it
            // holds more unsent writes than the batch settles; when none has, there is nothing to
            // read (a queue of 100k writes would otherwise be read, and its changes decoded, once
            // a batch).
            let hasPending = !resent.isEmpty || settledWrites.contains { key, writes in (unsent[key]?.writes ?? 0) > writes }
            var pending = !hasPending ? [] : try database.query("SELECT sequence, collection, id, delta, writes, parts FROM pending ORDER BY sequence") { row in
                (row.integer(0), DocumentKey(collection: row.text(1) ?? "", id: row.text(2) ?? ""), row.blob(3), Int(row.integer(4)), row.blob(5))
            }
            // The resent writes go back at the head of the queue, before every pending change.
            var resentRows: [(sequence: Int64, key: DocumentKey, delta: [UInt8], isAsWritten: Bool, origin: Int64)] = []
            var nextResent = (pending.first?.0 ?? 1) - Int64(resent.reduce(0) { $0 + $1.parts.count })
            for (key, parts, isAsWritten, row) in resent {
                var newRows: [Int64] = []
                for part in parts {
                    let origin = Self.newOrigin()
                    resentRows.append((nextResent, key, Self.encode(part), isAsWritten, origin))
                    newRows.append(origin)
                    nextResent += 1
                }
                if let row { report.resentRows[row] = newRows }
            }
            pending.insert(contentsOf: resentRows.map { ($0.sequence, $0.key, $0.delta, 1, nil) }, at: 0)
            var views = confirmed
            // The views that stay as they are (see `reshown`), for the documents in memory.
            var keptViews: [DocumentKey: DocumentState] = [:]
            for key in confirmed.keys where !reshown.contains(key) { keptViews[key] = cache[key]?.view }
            var rebased: [(sequence: Int64, delta: [UInt8], parts: [UInt8]?)] = []
            var newest: [DocumentKey: Int64] = [:]
            var stillUnsent: [DocumentKey: UnsentDocument] = [:]
            var decoded: [(sequence: Int64, delta: DocumentDelta)] = []
            for (sequenceNumber, key, encodedDelta, writes, parts) in pending where confirmed[key] != nil {
                var delta = try decodedPending[sequenceNumber] ?? Self.decodeDelta(encodedDelta)
                if let versions = ownVersions[key], let state = confirmed[key] {
                    let moved = delta.rebased(onto: state, ownVersions: versions)
                    if moved != delta {
                        delta = moved
                        // Each write's change moves as the change does.
                        let movedParts = try parts.map { Self.encodeParts(try Self.decodeParts($0).map { $0.rebased(onto: state, ownVersions: versions) }) }
                        rebased.append((sequenceNumber, Self.encode(moved), movedParts))
                        if tail?.sequence == sequenceNumber {
                            tail?.delta = moved
                            tail?.parts = movedParts
                        }
                    }
                }
                if keptViews[key] == nil { views[key]?.applyLocally(delta, at: Self.localVersion) }
                decoded.append((sequenceNumber, delta))
                newest[key] = sequenceNumber
                stillUnsent[key, default: UnsentDocument(viewJSON: unsent[key]?.viewJSON, writes: 0)].writes += writes
            }
            var newestViews: [(sequence: Int64, view: String?)] = []
            for (key, sequenceNumber) in newest {
                // A kept view is written again too: its row may have been rebased (and its view let go).
                let view = keptViews[key] != nil ? stillUnsent[key]?.viewJSON ?? nil : views[key]?.documentJSON
                stillUnsent[key]?.viewJSON = view
                newestViews.append((sequenceNumber, view))
            }
            try database.write { database in
                for (key, state) in confirmed { try saveConfirmed(state, for: key, in: database) }
                for (sequenceNumber, key, delta, isAsWritten, origin) in resentRows {
                    try database.run("INSERT INTO pending (sequence, collection, id, delta, writes, as_written, origin) VALUES (?, ?, ?, ?, 1, ?, ?)",
                                     [.integer(sequenceNumber), .text(key.collection), .text(key.id), .blob(delta), .integer(isAsWritten ? 1 : 0),
                                      .integer(origin)])
                }
                for (sequenceNumber, delta, parts) in rebased {
                    try database.run("UPDATE pending SET delta = ?, view = NULL, parts = ? WHERE sequence = ?",
                                     [.blob(delta), SQLiteValue(parts), .integer(sequenceNumber)])
                }
                for (sequenceNumber, view) in newestViews {
                    try database.run("UPDATE pending SET view = ? WHERE sequence = ?", [SQLiteValue(view), .integer(sequenceNumber)])
                }
                for (key, left) in unresolved {
                    try database.run("INSERT OR REPLACE INTO unresolved (collection, id, local, conflicts) VALUES (?, ?, ?, ?)",
                                     [.text(key.collection), .text(key.id), SQLiteValue(left.local), .text(UnresolvedConflict.encode(left.conflicts))])
                }
                try database.run("DELETE FROM inflight")
                try database.run("DELETE FROM batch")
            }
            inflight = nil
            heldDocuments.formUnion(unresolved.keys)
            for (sequenceNumber, delta) in decoded { decodedPending[sequenceNumber] = delta }
            for (key, state) in confirmed {
                let view = stillUnsent[key] == nil ? nil : keptViews[key]
                remember(CachedDocument(confirmed: state, view: view ?? views[key] ?? state), for: key)
                unsent[key] = stillUnsent[key]
            }
            unsentWriteCount -= settledWrites.values.reduce(0, +)
            notify(changed: Set(confirmed.keys), rollbacks: rollbacks)
            return report
        }
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
                    if updated[key] == nil, cache[key] == nil, unsent[key] == nil {
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
                    if unsent[key] != nil {
                        document.view = try reapplyUnsentChanges(of: key, onto: document.confirmed, in: database)
                        unsentViews[key] = .some(document.view.documentJSON)
                    }
                    try saveConfirmed(document.confirmed, for: key, in: database)
                    updated[key] = document
                }
                if let cursor { try setMeta("cursor", cursor, in: database) }
                if isResyncing {
                    for (key, _) in documents {
                        try database.run("DELETE FROM resync_unseen WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
                    }
                }
            }
            // Only now that the page is committed does memory follow it.
            for (key, document) in updated where !inserted.contains(key) { remember(document, for: key) }
            for (key, view) in unsentViews { unsent[key]?.viewJSON = view }
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
        if let cached = cache[key] { return cached.view }
        var view = try confirmedState(of: key)
        if unsent[key] != nil {
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
            heldDocuments.remove(key)
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
            let first = try database.queryFirst("SELECT sequence, delta, writes, parts FROM pending WHERE collection = ? AND id = ? ORDER BY sequence LIMIT 1",
                                                [.text(key.collection), .text(key.id)]) { row in
                (row.integer(0), try Self.decodeDelta(row.blob(1)), Int(row.integer(2)), row.blob(3))
            }
            guard let resolution, let first else {
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
            let (sequence, waiting, writes, parts) = first
            // The change keeps its writes' own changes while it can (Spec/storage.md, "Writes").
            let keptParts = writes < Self.maximumComposedWrites && (parts != nil || writes == 1)
                ? Self.encodeParts([delta] + (try parts.map(Self.decodeParts) ?? [waiting])) : nil
            delta.compose(with: waiting)
            var view = DocumentState()
            try database.write { database in
                try database.run("UPDATE pending SET delta = ?, writes = ?, parts = ? WHERE sequence = ?",
                                 [.blob(Self.encode(delta)), .integer(Int64(writes + 1)), SQLiteValue(keptParts), .integer(sequence)])
                try database.run("DELETE FROM unresolved WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
                view = try reapplyUnsentChanges(of: key, onto: confirmed, in: database)
            }
            heldDocuments.remove(key)
            decodedPending[sequence] = nil
            if tail?.sequence == sequence {
                tail?.delta = delta
                tail?.writes = writes + 1
                tail?.parts = keptParts
            }
            cache[key] = nil
            unsent[key]?.writes += 1
            unsent[key]?.viewJSON = view.documentJSON
            unsentWriteCount += 1
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
            isResyncing = true
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
            guard isResyncing else { return [] }
            let unseen = try database.query("SELECT collection, id FROM resync_unseen") { row in
                DocumentKey(collection: row.text(0) ?? "", id: row.text(1) ?? "")
            }
            var unsentViews: [DocumentKey: String?] = [:]
            try database.write { database in
                for key in unseen {
                    try database.run("DELETE FROM documents WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
                    if unsent[key] != nil {
                        unsentViews[key] = .some(try reapplyUnsentChanges(of: key, onto: DocumentState(), in: database).documentJSON)
                    }
                }
                try database.run("DELETE FROM resync_unseen")
                try database.run("DELETE FROM meta WHERE key = 'resync'")
            }
            isResyncing = false
            for key in unseen { cache[key] = nil }
            for (key, view) in unsentViews { unsent[key]?.viewJSON = view }
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
