import AbrovaCore

/// What freezing the next batch does, decided from the oldest pending changes with no I/O:
/// which of them the batch takes, what it sends of each, and what the `inflight` rows keep.
/// `LocalStore.freezeBatch` loads the inputs, applies the plan in one transaction, then lets
/// memory follow it (Spec/storage.md, "Batches").
struct FreezePlan: Equatable {
    /// A change the batch sends, as its `inflight` row keeps it.
    struct FrozenChange: Equatable {
        var change: BatchChange
        /// Its bytes: the stored ones, unless pruning changed it.
        var encoded: [UInt8]
        var parts: [UInt8]?
        var isAsWritten: Bool
        var origin: Int64
        var isAlone = false
        /// On the document's last kept change of the batch, the view after the batch's last change
        /// of it (only the newest change of a document keeps a view); `nil` on the others.
        var view: String?
        /// The row (its sequence) whose view `view` is, on the change that takes one.
        var viewRow: Int64?
    }

    /// What planning keeps of one document while it walks the rows.
    private struct PlannedDocument {
        /// The document's sets as the batch's changes so far leave them, once a change of it has
        /// set changes; the whole document instead where a set overlaps another field
        /// (`ObservedSets.init`).
        var observedSets: ObservedSets?
        var observedState: DocumentState?
        var isObserved: Bool { observedSets != nil || observedState != nil }
        /// The change (its position) later queued changes of it may still compose into.
        var openChange: Int?
        /// The position of its last change in the batch.
        var lastChange: Int?
        /// The view after the batch's last change of it, cancelled or not, and that change's row.
        var lastView: String?
        var lastRow: Int64?
    }

    /// Gives each change that takes a view the view of its row as `view(ofRow:)` reads it, for
    /// rows read without their views (`QueueRow.pendingColumnsWithoutView`).
    mutating func takeViews(_ view: (_ ofRow: Int64) throws -> String?) rethrows {
        for position in changes.indices {
            if let row = changes[position].viewRow { changes[position].view = try view(row) }
        }
    }

    /// The batch's number.
    let sequence: Int64
    /// What the batch sends, in order.
    private(set) var changes: [FrozenChange]
    /// The pending rows (sequences) that leave `pending`: every change taken, sent or not.
    let takenRows: [Int64]
    /// Changes left with nothing to do once pruned, dropped with their writes, by document.
    let cancelledWrites: [DocumentKey: Int]
    /// The batch and its encoded body, the bytes every retry sends.
    let batch: Batch
    let body: [UInt8]

    /// Whether the queued change `delta` of `row` may compose into `earlier`, its document's
    /// open change of the batch (see `init`).
    private static func composes(_ delta: DocumentDelta, of row: QueueRow, into earlier: BatchChange) -> Bool {
        row.composes && LocalStore.composes(delta, into: earlier.delta)
    }

    /// The batch as it stays in flight; `nil` when every change taken was cancelled.
    var frozenBatch: FrozenBatch? {
        changes.isEmpty ? nil : FrozenBatch(batch: batch, body: body, rows: changes.map(\.origin))
    }

    /// The oldest of `rows` that one batch of at most `maximumChanges` changes and a body of at
    /// most `maximumBytes` holds; always at least one, and always whole atomic groups (the first
    /// one whatever its size). The bytes are counted from each row's stored
    /// bytes and a bound on what the body adds around it (a row that composes adds at most its
    /// own); the changes from the rows that compose as `init` composes them, except that a change
    /// on a newer base, which stays apart, is not foreseen: `init` cuts the batch there.
    static func rowsFitting(_ rows: [QueueRow], maximumChanges: Int = .max, maximumBytes: Int) -> ArraySlice<QueueRow> {
        var bodyBytes = Batch.encodedOverhead
        var count = 0
        var changes = 0
        // The documents whose open change later rows may compose into.
        var openDocuments: Set<DocumentKey> = []
        // Where the group being read began: a batch too full for the rest of it ends there (a
        // group goes whole), unless it is the batch's first, which goes whole whatever its size.
        var groupStart = 0
        for (index, row) in rows.enumerated() {
            let continuesGroup = row.group != nil && index > 0 && rows[index - 1].group == row.group
            if !continuesGroup { groupStart = count }
            let startsChange = !(row.composes && openDocuments.contains(row.key))
            let changeBytes = Batch.encodedOverhead(of: row.key) + row.delta.count
            let isFull = (startsChange && changes >= maximumChanges) || bodyBytes + changeBytes > maximumBytes
            if count > 0, isFull {
                if !continuesGroup { break }
                if groupStart > 0 {
                    count = groupStart
                    break
                }
            }
            bodyBytes += changeBytes
            count += 1
            if startsChange {
                changes += 1
                if row.composes { openDocuments.insert(row.key) } else { openDocuments.remove(row.key) }
            }
        }
        return rows.prefix(count)
    }

    /// The documents whose confirmed state the plan needs: those some change of which removes or
    /// adds set elements (`deltas` are the changes of `rows`, decoded).
    static func documentsPruned(_ rows: ArraySlice<QueueRow>, deltas: [DocumentDelta]) -> Set<DocumentKey> {
        Set(zip(rows, deltas).compactMap { row, delta in delta.setChanges.isEmpty ? nil : row.key })
    }

    /// Plans the batch `sequence` of `rows` (`rowsFitting`), whose changes are `deltas`;
    /// `confirmed` holds the confirmed states of `documentsPruned`. Each change is frozen with the
    /// strategy `strategyOf` gives its document, unless it is saved as written. The batch takes
    /// the rows up to the first that would make it more than `maximumChanges` changes.
    ///
    /// A document's queued changes compose into its first change of the batch: the server applies
    /// a batch in one transaction, so the order across documents inside it is not observable, and
    /// each thing is sent once. They stay apart where composing would change what the server
    /// does: a change saved as written (its call waits for its own answer, and its policy is not
    /// theirs), and every later change of the document after it; a change on a newer base than
    /// the earliest of the one it would join (made after a pull: composed, it would take the older
    /// base and meet the change it had seen as a conflict); and the changes of a document under
    /// the manual strategy, where a conflict holds back the whole change it is in. However many writes a change holds, its
    /// `parts` keep each one's change, sent again one by one after a refusal.
    init(
        rows: ArraySlice<QueueRow>, deltas: [DocumentDelta], confirmed: [DocumentKey: DocumentState], clientID: String, sequence: Int64,
        maximumChanges: Int = .max, strategyOf: (DocumentKey) -> ConflictStrategy?
    ) {
        var confirmed = confirmed
        var changes: [FrozenChange] = []
        var cancelled: [DocumentKey: Int] = [:]
        // What the plan keeps of each document, by its number in the batch: one lookup a row.
        var numbers: [DocumentKey: Int] = [:]
        var documents: [PlannedDocument] = []
        var composedParts: [Int: [UInt8]] = [:]
        var taken = 0
        for (row, delta) in zip(rows, deltas) {
            let number: Int
            if let known = numbers[row.key] {
                number = known
            } else {
                number = documents.count
                numbers[row.key] = number
                documents.append(PlannedDocument())
            }
            var pruned = delta
            var isPruned = false
            if !delta.setChanges.isEmpty || documents[number].isObserved {
                // Removes of elements the server never showed this device take nothing: dropped.
                // An element an earlier change of this batch adds counts as shown: the server
                // applies that add first, and the remove must take it. (What is observed is taken
                // out while it changes, so that it changes in place, not as a copy.)
                var sets = documents[number].observedSets
                var state = documents[number].observedState
                documents[number].observedSets = nil
                documents[number].observedState = nil
                if sets == nil, state == nil {
                    let confirmed = confirmed.removeValue(forKey: row.key) ?? DocumentState()
                    sets = ObservedSets(confirmed)
                    if sets == nil { state = confirmed }
                }
                if !delta.setChanges.isEmpty {
                    if let sets { pruned = delta.droppingUnobservedRemoves(observed: sets) }
                    if let state { pruned = delta.droppingUnobservedRemoves(confirmed: state) }
                    isPruned = pruned != delta
                }
                sets?.apply(pruned)
                state?.applyLocally(pruned, at: LocalStore.localVersion)
                documents[number].observedSets = sets
                documents[number].observedState = state
            }
            let composesInto = documents[number].openChange.flatMap {
                Self.composes(pruned, of: row, into: changes[$0].change) ? $0 : nil
            }
            // A group goes whole: the batch is cut before it, never within it.
            let continuesGroup = row.group != nil && taken > 0 && rows[rows.startIndex + taken - 1].group == row.group
            if !pruned.isEmpty, composesInto == nil, changes.count >= maximumChanges, !continuesGroup { break }
            taken += 1
            documents[number].lastView = row.view
            documents[number].lastRow = row.sequence
            if pruned.isEmpty {
                cancelled[row.key, default: 0] += row.writes
            } else if let position = composesInto {
                // In place: a copy of the change would copy its delta at every write composed.
                if composedParts[position] == nil {
                    composedParts[position] = changes[position].parts ?? LocalStore.PendingChange.parts(holding: changes[position].encoded)
                }
                LocalStore.PendingChange.append(
                    parts: row.parts ?? LocalStore.PendingChange.parts(holding: row.delta), to: &composedParts[position, default: []])
                changes[position].change.delta.compose(with: pruned)
                changes[position].change.writes += row.writes
            } else {
                // Saved as written is what clientWins does to a change: each field it writes takes
                // its value, a delete deletes (Spec/conflicts.md, "Online writes").
                let strategy = row.isAsWritten ? .clientWins : strategyOf(row.key)
                // Under manual a conflict holds back the whole change: composed, a write that
                // conflicts with nothing would wait for the resolver of another.
                documents[number].openChange = row.composes && strategy != .manual ? changes.count : nil
                documents[number].lastChange = changes.count
                changes.append(
                    FrozenChange(
                        change: BatchChange(key: row.key, delta: pruned, writes: row.writes, strategy: strategy, group: row.group),
                        encoded: isPruned ? LocalStore.encode(pruned) : row.delta, parts: row.parts,
                        isAsWritten: row.isAsWritten, origin: row.origin ?? 0, isAlone: row.isAlone, view: nil))
            }
        }
        for (position, parts) in composedParts {
            changes[position].parts = parts
            changes[position].encoded = LocalStore.encode(changes[position].change.delta)
        }
        for document in documents {
            guard let position = document.lastChange else { continue }
            changes[position].view = document.lastView
            changes[position].viewRow = document.lastRow
        }
        self.sequence = sequence
        self.changes = changes
        takenRows = rows.prefix(taken).map(\.sequence)
        cancelledWrites = cancelled
        batch = Batch(clientID: clientID, sequence: sequence, changes: changes.map(\.change))
        var body: [UInt8] = []
        batch.writeEncoded(to: &body)
        self.body = body
    }
}
