import AbrovaCore

/// A sync server in memory, for unit tests: it joins batches with a strategy, assigns versions,
/// answers retried batches with the stored answer, and serves pulls. No rules, no network.
public struct InMemoryServer: Sendable {
    /// The server's documents.
    public private(set) var documents: [DocumentKey: DocumentState] = [:]
    /// The last version it assigned.
    public private(set) var version = Version.zero
    /// The last answered batch per client: (sequence, answer).
    private var answered: [String: (Int64, [ChangeResult])] = [:]
    /// Refuses a change with (status, message) when it returns one.
    public var refuse: @Sendable (DocumentKey, DocumentDelta) -> (Refusal.Reason, String)?

    /// A server with no documents; `refuse` decides which changes its "rules" refuse.
    public init(refuse: @escaping @Sendable (DocumentKey, DocumentDelta) -> (Refusal.Reason, String)? = { _, _ in nil }) {
        self.refuse = refuse
    }

    /// Applies a batch, each change at the next version, and answers it; a retried batch gets the
    /// stored answer.
    public mutating func push(_ batch: Batch, strategy batchStrategy: ConflictStrategy) -> [ChangeResult] {
        if let (sequence, answer) = answered[batch.clientID], sequence == batch.sequence { return answer }
        var answer: [ChangeResult] = []
        // As the real server: a later change of a document in the batch is rebased past the
        // versions the earlier ones wrote it at (they are the client's own writes).
        var ownWrites: [DocumentKey: OwnWrites] = [:]
        // As the real server: an atomic group is saved only when every change of it applies.
        for unit in batch.units {
            let before = (documents, ownWrites, answer.count)
            for change in batch.changes[unit] {
                push(change, strategy: change.strategy ?? batchStrategy, ownWrites: &ownWrites, answer: &answer)
            }
            if let refused = GroupVerdict.refusal(of: batch.changes[unit], results: Array(answer[before.2...])) {
                documents = before.0
                ownWrites = before.1
                answer.replaceSubrange(before.2..., with: refused)
            }
        }
        answered[batch.clientID] = (batch.sequence, answer)
        return answer
    }

    /// Joins one change, answering it in `answer`.
    private mutating func push(
        _ change: BatchChange, strategy: ConflictStrategy, ownWrites: inout [DocumentKey: OwnWrites], answer: inout [ChangeResult]
    ) {
        if let (reason, message) = refuse(change.key, change.delta) {
            answer.append(.rejected(reason: reason, message: message))
            return
        }
        var state = documents[change.key] ?? DocumentState()
        let delta = ownWrites[change.key].map { change.delta.rebased(onto: state, past: $0) } ?? change.delta
        let isUncontested = state.isUncontested(by: delta)
        let next = version.next
        version = next // every change takes a version, applied or not
        do {
            let report = try strategy.apply(delta, to: &state, version: next)
            if strategy == .manual && !report.conflicts.isEmpty {
                // As the real server: the change's increments count even so.
                if report.isApplied { documents[change.key] = state }
                answer.append(.unresolved(state: state, conflicts: report.conflicts))
                return
            }
            documents[change.key] = state
            // As the real server: an uncontested change's state is left for the client to compute.
            let result = ChangeResult.applied(version: next, state: isUncontested ? nil : state, conflicts: report.conflicts)
            ownWrites[change.key, default: OwnWrites()].note(result, of: change.delta)
            answer.append(result)
        } catch {
            answer.append(.rejected(reason: error.reason, message: error.description))
        }
    }

    /// Documents changed after `cursor` (a version number as text), and the new cursor.
    public func pull(after cursor: String?) -> (documents: [(key: DocumentKey, state: DocumentState)], cursor: String) {
        let after = Version(UInt64(cursor ?? "0") ?? 0)
        let changed = documents.filter { $0.value.version > after }.sorted { $0.key < $1.key }.map { (key: $0.key, state: $0.value) }
        return (changed, String(version.rawValue))
    }

    /// Writes a document directly, as another client would.
    public mutating func write(_ delta: DocumentDelta, to key: DocumentKey) throws(ValueError) {
        var state = documents[key] ?? DocumentState()
        version = version.next
        _ = try ConflictStrategy.serverWins.apply(delta, to: &state, version: version)
        documents[key] = state
    }
}
