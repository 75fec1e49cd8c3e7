import AbrovaCore

/// Everything a settle writes and how memory follows it, decided with no I/O from the server's
/// answer (`SettledAnswer`), the pending changes of the batch's documents and the store's memory.
/// `LocalStore.settle` loads the inputs, applies the plan in one transaction, then hands it to
/// `StoreMemory.settled(_:)` (Spec/storage.md, "Batches").
struct SettlePlan {
    /// A pending change rebased past this client's own writes; its row's view is let go.
    struct RebasedRow: Equatable {
        var sequence: Int64
        var delta: DocumentDelta
        var parts: [UInt8]?
    }

    /// The view the newest pending change of a document takes.
    struct NewestView: Equatable {
        var sequence: Int64
        var view: String?
    }

    /// The answer read against the batch; its report with `resentRows` filled in.
    let answer: SettledAnswer
    let report: SettleReport
    /// The writes of the resent changes, back at the head of `pending` as changes of their own.
    let resentRows: [QueueRow]
    let rebasedRows: [RebasedRow]
    let newestViews: [NewestView]
    /// The pending changes of the batch's documents, decoded (and rebased), by sequence.
    let decoded: [Int64: DocumentDelta]
    /// What memory keeps of each document of the batch: its confirmed state and view, and its
    /// unsent changes (none when it has no entry).
    let documents: [DocumentKey: LocalStore.CachedDocument]
    let unsent: [DocumentKey: LocalStore.UnsentDocument]

    /// Whether the plan needs the pending changes: a document of the batch has some exactly when
    /// it holds more unsent writes than the batch settles. When none has, there is nothing to read
    /// (a queue of 100k writes would otherwise be read, and its changes decoded, once a batch).
    static func needsPendingRows(_ answer: SettledAnswer, memory: StoreMemory) -> Bool {
        !answer.resent.isEmpty || answer.settledWrites.contains { key, writes in (memory.unsent[key]?.writes ?? 0) > writes }
    }

    /// Plans the settle of `answer`. `pending` is every pending change, oldest first, when
    /// `needsPendingRows` (their views are not needed: they are rendered again); `newOrigin`
    /// makes the ids of the resent writes' changes.
    ///
    /// - Throws: `StoreError` `.corrupt` when a stored change cannot be read.
    init(answer: SettledAnswer, pending: [QueueRow], memory: StoreMemory, newOrigin: () -> Int64) throws {
        self.answer = answer
        var report = answer.report
        let confirmed = answer.confirmed
        // The resent writes go back at the head of the queue, before every pending change.
        var resentRows: [QueueRow] = []
        var nextResent = (pending.first?.sequence ?? 1) - Int64(answer.resent.reduce(0) { $0 + $1.parts.count })
        for change in answer.resent {
            var newRows: [Int64] = []
            for part in change.parts {
                let origin = newOrigin()
                resentRows.append(
                    QueueRow(
                        sequence: nextResent, key: change.key, delta: LocalStore.encode(part), writes: 1,
                        isAsWritten: change.isAsWritten, origin: origin, isAlone: true))
                newRows.append(origin)
                nextResent += 1
            }
            if let row = change.row { report.resentRows[row] = newRows }
        }
        let queue = resentRows + pending
        // The pending changes of these documents: rebased past this client's own writes, and the
        // view of each document's newest one rebuilt on the new confirmed state where the answer
        // may change it (the views of older ones are never shown: Spec/storage.md).
        var views = confirmed
        // The views that stay as they are (see `SettledAnswer.reshown`), for the documents in memory.
        var keptViews: [DocumentKey: DocumentState] = [:]
        for key in confirmed.keys where !answer.reshown.contains(key) { keptViews[key] = memory.cache[key]?.view }
        var rebasedRows: [RebasedRow] = []
        var newest: [DocumentKey: Int64] = [:]
        var stillUnsent: [DocumentKey: LocalStore.UnsentDocument] = [:]
        var decoded: [Int64: DocumentDelta] = [:]
        for row in queue where confirmed[row.key] != nil {
            var delta = try memory.decodedPending[row.sequence] ?? LocalStore.decodeDelta(row.delta)
            if let own = answer.ownWrites[row.key], let state = confirmed[row.key] {
                let moved = delta.rebased(onto: state, past: own)
                if moved != delta {
                    delta = moved
                    // Each write's change moves as the change does.
                    let movedParts = try row.parts.map {
                        LocalStore.encodeParts(try LocalStore.decodeParts($0).map { $0.rebased(onto: state, past: own) })
                    }
                    rebasedRows.append(RebasedRow(sequence: row.sequence, delta: moved, parts: movedParts))
                }
            }
            if keptViews[row.key] == nil { views[row.key]?.applyLocally(delta, at: LocalStore.localVersion) }
            decoded[row.sequence] = delta
            newest[row.key] = row.sequence
            stillUnsent[row.key, default: LocalStore.UnsentDocument(viewJSON: memory.unsent[row.key]?.viewJSON, writes: 0)].writes +=
                row.writes
        }
        var newestViews: [NewestView] = []
        for (key, sequence) in newest {
            // A kept view is written again too: its row may have been rebased (and its view let go).
            let view = keptViews[key] != nil ? stillUnsent[key]?.viewJSON ?? nil : views[key]?.documentJSON
            stillUnsent[key]?.viewJSON = view
            newestViews.append(NewestView(sequence: sequence, view: view))
        }
        var documents: [DocumentKey: LocalStore.CachedDocument] = [:]
        for (key, state) in confirmed {
            let view = stillUnsent[key] == nil ? nil : keptViews[key]
            documents[key] = LocalStore.CachedDocument(confirmed: state, view: view ?? views[key] ?? state)
        }
        self.report = report
        self.resentRows = resentRows
        self.rebasedRows = rebasedRows
        self.newestViews = newestViews
        self.decoded = decoded
        self.documents = documents
        unsent = stillUnsent
    }

    /// The app writes the settle confirms or drops: they leave the unsent count.
    var settledWriteCount: Int { answer.settledWrites.values.reduce(0, +) }
}
