import AbrovaCore

/// What the store keeps in memory of its tables, so that reads, writes and settles need not go to
/// the file: documents read recently, the documents with unsent changes, the newest pending
/// change, the batch in flight, pending changes a settle decoded, and the `meta` and `unresolved`
/// values the store consults on every call.
///
/// One value owns them because they change together: each method that mirrors a write is called
/// only once its transaction has committed, so memory never runs ahead of the file (the cache's
/// own methods, `remember` and `readInflight`, only hold what the file says; a write's document
/// changes in place just before its transaction, and is forgotten should the transaction fail).
/// `invariantViolations()` says what holds between them.
struct StoreMemory {
    /// The most documents kept in `cache`; a full cache is emptied (cheaper than tracking use).
    static let cacheLimit = 10_000

    /// Documents read recently, with their confirmed state and view.
    private(set) var cache: [DocumentKey: LocalStore.CachedDocument] = [:]
    /// Documents with unsent changes: the view after the newest one, and how many app writes they
    /// hold. As large as the unsent work, so that reads need no scan of `pending`.
    private(set) var unsent: [DocumentKey: LocalStore.UnsentDocument] = [:]
    /// Writes not yet confirmed by the server, in all documents.
    private(set) var unsentWriteCount = 0
    /// The fields (with their collection) whose query index `LocalStore.indexIfItPays` decided on.
    private(set) var decidedQueryIndexes: Set<String> = []
    /// The newest pending change: a write to the same document composes into it. A write to
    /// another document in between starts a new change, so that changes keep the app's order.
    private(set) var tail: LocalStore.PendingChange?
    /// The batch in flight as frozen or last read, so that settling it need not decode its body
    /// again; `nil` when there is none or it is not in memory (it is then read from `batch`).
    private(set) var inflight: FrozenBatch?
    /// Pending changes as a write or a settle left them (decoded, rebased), by sequence, so that
    /// the next settle and the freeze that sends them do not decode them again. An entry is always
    /// the row's stored change: a write composing into the row replaces it, the row leaving
    /// `pending` drops it.
    private(set) var decodedPending: [Int64: DocumentDelta] = [:]
    /// The most changes a write keeps in `decodedPending` (a queue of a few thousand writes, a
    /// batch's worth, is frozen without decoding one; a longer one is decoded past this).
    static let decodedWritesLimit = 4_096
    /// A resync is under way (`meta.resync`): pulled documents are ticked off `resync_unseen`.
    private(set) var isResyncing = false
    /// The number the next frozen batch takes (`meta.next_batch_sequence`).
    private(set) var nextBatch: Int64 = 1
    /// Documents with a conflict the app's resolver has not decided yet (the `unresolved` table):
    /// their unsent changes wait, so that the resolution goes before them.
    private(set) var heldDocuments: Set<DocumentKey> = []

    /// Nothing in memory: a store that was never opened at the current schema.
    init() {}

    /// Memory as a store's file holds it when it opens: `unsentRows` are its in-flight changes,
    /// then its pending ones, in order.
    init(unsentRows: [UnsentRow], tail: LocalStore.PendingChange?, nextBatch: Int64, heldDocuments: Set<DocumentKey>, isResyncing: Bool) {
        for row in unsentRows {
            unsent[row.key] = LocalStore.UnsentDocument(viewJSON: row.view, writes: (unsent[row.key]?.writes ?? 0) + row.writes)
            unsentWriteCount += row.writes
        }
        self.tail = tail
        self.nextBatch = nextBatch
        self.heldDocuments = heldDocuments
        self.isResyncing = isResyncing
    }

    // MARK: Documents

    /// Records that the query index of a field in a collection is decided (made, or not needed).
    mutating func decidedQueryIndex(_ decision: String) { decidedQueryIndexes.insert(decision) }

    /// Keeps a document as last committed.
    mutating func remember(_ document: LocalStore.CachedDocument, for key: DocumentKey) {
        if cache.count >= Self.cacheLimit, cache[key] == nil { cache.removeAll(keepingCapacity: true) }
        cache[key] = document
    }

    /// Runs `change` on the cached document of `key` in place (its state is not copied); `nil`
    /// when it is not cached. `change` must not touch the store's memory (it runs within an access
    /// to it). A write changes its document so before its transaction commits, and calls
    /// `forget(_:)` should it fail.
    mutating func changeCachedDocument<Result>(
        _ key: DocumentKey, _ change: (inout LocalStore.CachedDocument) throws -> Result
    ) rethrows -> Result? {
        guard let index = cache.index(forKey: key) else { return nil }
        return try change(&cache.values[index])
    }

    /// Drops a document from the cache: it is read from the file when next needed.
    mutating func forget(_ key: DocumentKey) {
        cache[key] = nil
    }

    // MARK: Events, each after its transaction committed

    /// A write committed: `change` is the newest pending change now (new, or `tail` with the write
    /// composed into it), and the document shows `viewJSON` (its cached entry changed in place).
    mutating func wrote(_ change: LocalStore.PendingChange, viewJSON: String?) {
        // The row's stored change is the one the write just made (while the cache has room).
        // A change of one write is a new row, which cannot have an entry yet.
        if decodedPending.count < Self.decodedWritesLimit || (change.writes > 1 && decodedPending[change.sequence] != nil) {
            decodedPending[change.sequence] = change.delta
        }
        tail = change
        unsent[change.key, default: LocalStore.UnsentDocument(viewJSON: nil, writes: 0)].add(writeShowing: viewJSON)
        unsentWriteCount += 1
    }

    /// The write of `receipt` was taken back from the pending row `sequence`; the document's
    /// newest change left shows `newestView`, or the document has nothing unsent (`nil`).
    mutating func tookBack(_ receipt: WriteReceipt, fromRow sequence: Int64, newestView: String??) {
        let key = receipt.change.key
        decodedPending[sequence] = nil
        if tail?.sequence == sequence {
            tail = receipt.before.map {
                LocalStore.PendingChange(
                    sequence: sequence, key: key, delta: $0.delta, writes: $0.writes, parts: $0.parts,
                    isAsWritten: $0.isAsWritten, origin: $0.origin, isAlone: $0.isAlone)
            }
        }
        cache[key] = nil
        unsentWriteCount -= 1
        if let newestView {
            unsent[key]?.writes -= 1
            unsent[key]?.viewJSON = newestView
        } else {
            unsent[key] = nil
        }
    }

    /// A freeze committed: the batch `plan` froze is in flight (none when it cancelled every
    /// change it took); `stillPending` are the documents with changes left in `pending`, when it
    /// cancelled some.
    mutating func froze(_ plan: FreezePlan, stillPending: Set<DocumentKey>) {
        nextBatch = plan.sequence + 1
        for row in plan.takenRows { decodedPending[row] = nil }
        if let tail, plan.takenRows.contains(tail.sequence) { self.tail = nil }
        if !plan.cancelledWrites.isEmpty {
            let sent = Set(plan.changes.map(\.change.key))
            for (key, writes) in plan.cancelledWrites {
                unsentWriteCount -= writes
                if sent.contains(key) || stillPending.contains(key) {
                    unsent[key]?.writes -= writes
                } else {
                    // Nothing of this document is left to send: it shows its confirmed state.
                    unsent[key] = nil
                    cache[key] = nil
                }
            }
        }
        if let frozen = plan.frozenBatch { inflight = frozen }
    }

    /// A settle committed: nothing is in flight, the batch's documents are as `plan` left them,
    /// and the conflicts it kept hold their documents' changes back.
    mutating func settled(_ plan: SettlePlan) {
        inflight = nil
        heldDocuments.formUnion(plan.answer.keptConflicts.keys)
        for (sequence, delta) in plan.decoded { decodedPending[sequence] = delta }
        if let sequence = tail?.sequence, let moved = plan.rebasedRows.first(where: { $0.sequence == sequence }) {
            tail?.delta = moved.delta
            tail?.parts = moved.parts
        }
        for (key, document) in plan.documents {
            remember(document, for: key)
            unsent[key] = plan.unsent[key]
        }
        unsentWriteCount -= plan.settledWriteCount
    }

    /// The batch in flight was read back from the file.
    mutating func readInflight(_ batch: FrozenBatch) {
        inflight = batch
    }

    /// The batch in flight went back to the queue unsent (its rows are pending again, under new
    /// sequences: none of them has a decoded entry).
    mutating func unfroze() {
        inflight = nil
    }

    /// A pulled page committed: `documents` are the documents it joined that memory keeps, and
    /// `unsentViews` the newest views of those with unsent changes.
    mutating func pulled(_ documents: [DocumentKey: LocalStore.CachedDocument], unsentViews: [DocumentKey: String?]) {
        for (key, document) in documents { remember(document, for: key) }
        for (key, view) in unsentViews { unsent[key]?.viewJSON = view }
    }

    /// A resync began: the cursor is forgotten and every document is listed as unseen.
    mutating func beganResync() {
        isResyncing = true
    }

    /// A resync ended: the documents in `left` left the device; those of them with unsent changes
    /// show `unsentViews` (their changes on nothing confirmed).
    mutating func endedResync(left: [DocumentKey], unsentViews: [DocumentKey: String?]) {
        isResyncing = false
        for key in left { cache[key] = nil }
        for (key, view) in unsentViews { unsent[key]?.viewJSON = view }
    }

    /// The conflict of `key` left to the resolver was forgotten: its changes go out again.
    mutating func forgotConflict(_ key: DocumentKey) {
        heldDocuments.remove(key)
    }

    /// A resolution was composed in front of `key`'s first waiting change (the pending row
    /// `sequence`), which now holds `delta` of `writes` writes; none of `key`'s waiting changes is
    /// as written any more; the document shows `viewJSON`.
    mutating func resolvedConflict(
        _ key: DocumentKey, intoRow sequence: Int64, delta: DocumentDelta, writes: Int, parts: [UInt8]?,
        viewJSON: String?
    ) {
        heldDocuments.remove(key)
        decodedPending[sequence] = nil
        if tail?.sequence == sequence {
            tail?.delta = delta
            tail?.writes = writes
            tail?.parts = parts
        }
        if tail?.key == key { tail?.isAsWritten = false }
        cache[key] = nil
        unsent[key]?.writes += 1
        unsent[key]?.viewJSON = viewJSON
        unsentWriteCount += 1
    }

    /// The store closed: nothing decoded is kept for a store that may open the file again.
    mutating func closed() {
        decodedPending = [:]
    }

    // MARK: Invariants

    /// What should hold between the mirrors and does not; empty when all is well. (A change of
    /// several writes stored before schema 4, sent again as one, is counted once: the count then
    /// says more than the documents' writes.)
    func invariantViolations() -> [String] {
        var violations: [String] = []
        let counted = unsent.values.reduce(0) { $0 + $1.writes }
        if counted != unsentWriteCount { violations.append("unsentWriteCount \(unsentWriteCount), documents hold \(counted)") }
        for (key, document) in unsent where document.writes <= 0 { violations.append("\(key) is unsent with \(document.writes) writes") }
        if let tail {
            if unsent[tail.key] == nil { violations.append("the tail's document \(tail.key) has nothing unsent") }
            if let decoded = decodedPending[tail.sequence], decoded != tail.delta {
                violations.append("the decoded change of the tail (row \(tail.sequence)) is not the tail's")
            }
        }
        if cache.count > Self.cacheLimit { violations.append("the cache holds \(cache.count) documents") }
        return violations
    }
}

/// A change of `inflight` or `pending` as the store counts it when it opens.
struct UnsentRow: Equatable {
    var key: DocumentKey
    var writes: Int
    var view: String?
}

extension LocalStore {
    /// A document's confirmed state and view, as last committed.
    struct CachedDocument: Equatable {
        var confirmed: DocumentState
        /// What the app sees. Setting it otherwise than by `applyLocally(_:)` drops the rendering.
        var view: DocumentState { didSet { rendered = nil } }
        /// The view's JSON member by member, kept from one local write to the next so that a write
        /// renders only the fields it changed; `nil` until a write renders it.
        private var rendered: RenderedFields?

        init(confirmed: DocumentState, view: DocumentState) {
            self.confirmed = confirmed
            self.view = view
        }

        /// Applies a local write to the view; returns the view's JSON after it.
        mutating func applyLocally(_ delta: DocumentDelta) -> String? {
            var rendering = rendered
            rendered = nil // so that `rendering` is the only reference and changes in place
            view.applyLocally(delta, at: LocalStore.localVersion)
            if rendering?.update(after: delta, in: view) != true { rendering = RenderedFields(view) }
            rendered = rendering
            return rendering?.json ?? view.documentJSON
        }

        /// Equal when the states are (the rendering only repeats the view).
        static func == (left: CachedDocument, right: CachedDocument) -> Bool {
            left.confirmed == right.confirmed && left.view == right.view
        }
    }

    /// A document with unsent changes: its view after the newest (canonical JSON; `nil` when it
    /// does not exist) and the app writes they hold.
    struct UnsentDocument: Equatable {
        var viewJSON: String?
        var writes: Int

        /// Counts one more write, after which the document shows `viewJSON`.
        mutating func add(writeShowing viewJSON: String?) {
            self.viewJSON = viewJSON
            writes += 1
        }
    }
}
