import AbrovaCore
import AbrovaSQLite

extension LocalStore {
    /// The batch to send: the one in flight if there is one (the same bytes as before), else the
    /// pending changes, frozen now under the next sequence number. `nil` when nothing is unsent.
    public func freezeBatch() throws -> FrozenBatch? {
        try translatingErrors {
            if let frozen = try inflightBatch() { return frozen }
            let pending = try database.query("SELECT sequence, collection, id, delta, writes FROM pending ORDER BY sequence") { row in
                PendingChange(sequence: row.integer(0), key: DocumentKey(collection: row.text(1) ?? "", id: row.text(2) ?? ""),
                              delta: try Self.decodeDelta(row.blob(3)), writes: Int(row.integer(4)))
            }
            guard !pending.isEmpty else { return nil }
            // Removes of elements the server never showed this device take nothing: drop them, and
            // changes left with nothing to do.
            var changes: [BatchChange] = []
            var cancelled: [DocumentKey: Int] = [:]
            for change in pending {
                let confirmed = try loaded(change.key).confirmed
                let delta = change.delta.droppingUnobservedRemoves(confirmed: confirmed)
                if delta.isEmpty {
                    cancelled[change.key, default: 0] += change.writes
                } else {
                    changes.append(BatchChange(key: change.key, delta: delta, writes: change.writes))
                }
            }
            let sequence = Int64(try meta("next_batch_sequence") ?? "1") ?? 1
            let batch = Batch(clientID: clientID, sequence: sequence, changes: changes)
            var body: [UInt8] = []
            batch.encoded.writeCanonicalJSON(to: &body)
            try database.write { database in
                for (position, change) in changes.enumerated() {
                    try database.run("INSERT INTO inflight (position, collection, id, delta, writes) VALUES (?, ?, ?, ?, ?)",
                                     [.integer(Int64(position)), .text(change.key.collection), .text(change.key.id),
                                      .blob(Self.encode(change.delta)), .integer(Int64(change.writes))])
                }
                try database.run("DELETE FROM pending")
                for (key, writes) in cancelled {
                    try database.run("UPDATE documents SET unsent_writes = unsent_writes - ? WHERE collection = ? AND id = ?",
                                     [.integer(Int64(writes)), .text(key.collection), .text(key.id)])
                }
                if !changes.isEmpty { try database.run("INSERT INTO batch (sequence, body) VALUES (?, ?)", [.integer(sequence), .blob(body)]) }
                try setMeta("next_batch_sequence", String(sequence + 1), in: database)
            }
            tail = nil
            for (key, writes) in cancelled {
                if var document = cache[key] {
                    document.unsentWrites -= writes
                    cache[key] = document
                }
                unsentWriteCount -= writes
            }
            if !cancelled.isEmpty { notify(changed: Set(cancelled.keys)) }
            return changes.isEmpty ? nil : FrozenBatch(batch: batch, body: body)
        }
    }

    /// The batch in flight, if there is one.
    func inflightBatch() throws -> FrozenBatch? {
        guard let body = try database.queryFirst("SELECT body FROM batch", [], { $0.blob(0) ?? [] }) else { return nil }
        do {
            return FrozenBatch(batch: try Batch(encoded: try Value(json: body)), body: body)
        } catch {
            throw StoreError(.corrupt, "the batch in flight cannot be read: \(error)")
        }
    }

    /// Settles the server's answer to the batch in flight, in one transaction: an applied change
    /// updates the confirmed state with the server's versions (and later pending changes of the
    /// document are rebased past this client's own write); a refused change is dropped and its
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
            var before: [DocumentKey: CachedDocument] = [:]
            for change in changes where before[change.key] == nil { before[change.key] = try loaded(change.key) }
            var confirmed: [DocumentKey: DocumentState] = [:]
            var ownVersions: [DocumentKey: Version] = [:]
            var settledWrites: [DocumentKey: Int] = [:]
            var rollbacks: Set<DocumentKey> = []
            for (change, result) in zip(changes, results) {
                var state = confirmed[change.key] ?? before[change.key]?.confirmed ?? DocumentState()
                settledWrites[change.key, default: 0] += change.writes
                switch result {
                case .applied(let version, let server, let conflicts):
                    state.merge(server)
                    ownVersions[change.key] = version
                    if !conflicts.isEmpty { report.conflicts[change.key, default: []] += conflicts }
                case .unresolved(let server, let conflicts):
                    state.merge(server)
                    report.unresolved[change.key, default: []] += conflicts
                case .rejected(let statusCode, let message):
                    rollbacks.insert(change.key)
                    report.rejections.append(Rejection(key: change.key, operation: OperationType(change.delta),
                                                       statusCode: statusCode, message: message))
                }
                confirmed[change.key] = state
            }
            // Pending changes of these documents, rebased past this client's own writes.
            let pending = try database.query("SELECT sequence, collection, id, delta FROM pending ORDER BY sequence") { row in
                (row.integer(0), DocumentKey(collection: row.text(1) ?? "", id: row.text(2) ?? ""), try Self.decodeDelta(row.blob(3)))
            }
            var rebased: [(Int64, DocumentDelta)] = []
            var views: [DocumentKey: DocumentState] = confirmed
            for (sequenceNumber, key, delta) in pending where confirmed[key] != nil {
                var delta = delta
                if let version = ownVersions[key], let state = confirmed[key] {
                    delta = delta.rebased(onto: state, ownVersion: version)
                    rebased.append((sequenceNumber, delta))
                    if tail?.sequence == sequenceNumber { tail?.delta = delta }
                }
                views[key]?.applyLocally(delta, at: Self.localVersion)
            }
            try database.write { database in
                for (key, state) in confirmed {
                    let view = views[key]?.document.map { SQLiteValue.text($0.canonicalJSON) } ?? .null
                    try database.run("""
                        INSERT INTO documents (collection, id, confirmed, view, unsent_writes) VALUES (?1, ?2, ?3, ?4, 0)
                        ON CONFLICT (collection, id) DO UPDATE SET confirmed = ?3, view = ?4, unsent_writes = unsent_writes - ?5
                        """, [.text(key.collection), .text(key.id), .blob(Self.encode(state)), view,
                              .integer(Int64(settledWrites[key] ?? 0))])
                }
                for (sequenceNumber, delta) in rebased {
                    try database.run("UPDATE pending SET delta = ? WHERE sequence = ?", [.blob(Self.encode(delta)), .integer(sequenceNumber)])
                }
                try database.run("DELETE FROM inflight")
                try database.run("DELETE FROM batch")
            }
            for (key, state) in confirmed {
                let unsent = (before[key]?.unsentWrites ?? 0) - (settledWrites[key] ?? 0)
                remember(CachedDocument(confirmed: state, view: views[key] ?? state, unsentWrites: unsent), for: key)
            }
            unsentWriteCount -= settledWrites.values.reduce(0, +)
            notify(changed: Set(confirmed.keys), rollbacks: rollbacks)
            return report
        }
    }

    /// Applies a pulled page of documents and the new cursor in one transaction. A document with
    /// unsent changes keeps them overlaid: the page replaces only its confirmed part.
    public func applyPulledPage(_ documents: [(key: DocumentKey, state: DocumentState)], cursor: String) throws {
        try translatingErrors {
            var updated: [DocumentKey: CachedDocument] = [:]
            for (key, state) in documents {
                var document = try updated[key] ?? loaded(key)
                document.confirmed.merge(state)
                var view = document.confirmed
                if document.unsentWrites > 0 {
                    for delta in try unsentChanges(of: key) { view.applyLocally(delta, at: Self.localVersion) }
                }
                document.view = view
                updated[key] = document
            }
            try database.write { database in
                for (key, document) in updated {
                    let view = document.view.document.map { SQLiteValue.text($0.canonicalJSON) } ?? .null
                    try database.run("""
                        INSERT INTO documents (collection, id, confirmed, view, unsent_writes) VALUES (?1, ?2, ?3, ?4, 0)
                        ON CONFLICT (collection, id) DO UPDATE SET confirmed = ?3, view = ?4
                        """, [.text(key.collection), .text(key.id), .blob(Self.encode(document.confirmed)), view])
                }
                try setMeta("cursor", cursor, in: database)
            }
            for (key, document) in updated { remember(document, for: key) }
            notify(changed: Set(updated.keys), unsentWritesChanged: false)
        }
    }

    /// The pull cursor saved with the last applied page, or `nil` before the first.
    public func pullCursor() throws -> String? {
        try translatingErrors { try meta("cursor") }
    }

    func meta(_ key: String) throws -> String? {
        try database.queryFirst("SELECT value FROM meta WHERE key = ?", [.text(key)]) { $0.text(0) } ?? nil
    }

    func setMeta(_ key: String, _ value: String, in database: Database) throws {
        try database.run("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                         [.text(key), .text(value)])
    }
}
