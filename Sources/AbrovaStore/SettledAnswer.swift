import AbrovaCore

/// The server's answer read against the batch in flight, with no I/O: each document's new
/// confirmed state, what the report tells the app, and which changes go back to the queue.
/// The first half of a settle; `SettlePlan` takes it on to the pending changes.
struct SettledAnswer {
    /// What an `inflight` row keeps beside its change. Read only when a change of several writes
    /// was refused: only then are a change's writes sent again one by one.
    struct InflightExtras: Equatable {
        var parts: [UInt8]?
        var isAsWritten: Bool
    }

    /// A change going back to the head of the queue write by write (`parts`, in order): a refused
    /// change of several writes, or a later change of its document in the batch.
    struct ResentChange: Equatable {
        var key: DocumentKey
        var parts: [DocumentDelta]
        var isAsWritten: Bool
        /// The change's id, when the batch knows it (`FrozenBatch.rows`).
        var row: Int64?
    }

    /// A conflict left to the resolver, kept with the document as the device had it (canonical
    /// JSON; `nil` when deleted on the device) until the resolution is written.
    struct KeptConflict: Equatable {
        var local: String?
        var conflicts: [Conflict]
    }

    /// What the settle reports (`resentRows` is filled in by `SettlePlan`).
    var report = SettleReport()
    /// The new confirmed state of each document of the batch.
    var confirmed: [DocumentKey: DocumentState] = [:]
    /// What this client's own changes of the batch did, by document: pending changes are rebased
    /// past them.
    var ownWrites: [DocumentKey: OwnWrites] = [:]
    /// The app writes the answer settles, by document (a resent change's writes stay unsent).
    var settledWrites: [DocumentKey: Int] = [:]
    /// Documents rolled back by a refusal: listeners see them marked so.
    var rollbacks: Set<DocumentKey> = []
    var keptConflicts: [DocumentKey: KeptConflict] = [:]
    /// Documents whose view the answer may change: any result but an uncontested change this
    /// device joined itself. For the others the confirmed state now holds the changes the view
    /// already showed, so the view (the confirmed state plus every unsent change) is the same,
    /// and it is kept rather than rebuilt from the pending changes.
    var reshown: Set<DocumentKey> = []
    /// Refused changes of several writes, sent again write by write, so that the refusal lands on
    /// the write at fault and the others reach the server; with them the document's later changes
    /// of the batch, whatever their answer (they were judged without the refused one; sent again
    /// after its writes, they end on top, and what they wrote bears being written twice).
    var resent: [ResentChange] = []

    /// Whether reading the answer needs the batch's `InflightExtras`: some change of several
    /// writes was refused.
    static func needsInflightExtras(_ changes: [BatchChange], _ results: [ChangeResult]) -> Bool {
        zip(changes, results).contains { change, result in
            if case .rejected = result { change.writes > 1 } else { false }
        }
    }

    /// The documents the manual strategy left to the resolver, whose view as the device has it
    /// the answer keeps.
    static func documentsLeftToResolver(_ changes: [BatchChange], _ results: [ChangeResult]) -> Set<DocumentKey> {
        Set(
            zip(changes, results).compactMap { change, result in
                if case .unresolved = result { change.key } else { nil }
            })
    }

    /// Reads `results` (one per change of `batch`, checked) against the confirmed states of the
    /// batch's documents (`confirmedBefore`). `extras` holds the in-flight rows' extras by position
    /// when `needsInflightExtras`; `localViews` the app's view of each of `documentsLeftToResolver`.
    ///
    /// - Throws: `StoreError` `.corrupt` when a change's stored writes cannot be read.
    init(
        batch: FrozenBatch, results: [ChangeResult], confirmedBefore: [DocumentKey: DocumentState],
        extras: [Int64: InflightExtras] = [:], localViews: [DocumentKey: String?] = [:]
    ) throws {
        var before = confirmedBefore
        let changes = batch.batch.changes
        let rows = batch.rows.count == changes.count ? batch.rows : nil
        func writes(at position: Int) throws -> [DocumentDelta]? {
            try extras[Int64(position)]?.parts.map(LocalStore.decodeParts)
        }
        func resend(_ change: BatchChange, at position: Int, as parts: [DocumentDelta], writes: Int? = nil) {
            resent.append(
                ResentChange(
                    key: change.key, parts: parts, isAsWritten: extras[Int64(position)]?.isAsWritten ?? false,
                    row: rows?[position]))
            settledWrites[change.key, default: 0] -= writes ?? change.writes
        }
        // The groups with a change refused for its own sake, which reports the group.
        let groupsWithCulprit = Set(
            zip(changes, results).compactMap { change, result -> Int64? in
                guard case .rejected(let reason, _) = result, reason != .groupFailed else { return nil }
                return change.group
            })
        var reportedGroups: Set<Int64> = []
        for (position, (change, result)) in zip(changes, results).enumerated() {
            // Taken out while it changes, so that the join is made in place, not on a copy of the
            // document's fields.
            var state = confirmed.removeValue(forKey: change.key) ?? before.removeValue(forKey: change.key) ?? DocumentState()
            settledWrites[change.key, default: 0] += change.writes
            // A change of an atomic group is never sent again alone: it stands or falls with its group.
            if report.resent.contains(change.key), change.group == nil {
                let parts = try writes(at: position) ?? [change.delta]
                if case .applied = result, !change.delta.increments.isEmpty {
                    // Its increments were counted: sent again, they would count twice.
                    let rest = parts.map(\.withoutIncrements).filter { !$0.isEmpty }
                    if !rest.isEmpty { resend(change, at: position, as: rest, writes: rest.count) }
                } else {
                    resend(change, at: position, as: parts)
                }
                if case .applied(_, let server, _) = result, let server { state.merge(server) }
                ownWrites[change.key, default: OwnWrites()].note(result, of: change.delta)
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
                    let delta = ownWrites[change.key].map { change.delta.rebased(onto: state, past: $0) } ?? change.delta
                    if (try? ConflictStrategy.merge.apply(delta, to: &state, version: version)) == nil { reshown.insert(change.key) }
                } else {
                    reshown.insert(change.key)
                }
                ownWrites[change.key, default: OwnWrites()].note(result, of: change.delta)
                if !conflicts.isEmpty {
                    report.conflicts[change.key, default: []] += conflicts
                    reshown.insert(change.key)
                }
            case .unresolved(let server, let conflicts):
                state.merge(server)
                reshown.insert(change.key)
                report.unresolved[change.key, default: []] += conflicts
                // Kept with the document as the app had it when the first of them came.
                let kept = keptConflicts[change.key]
                let local: String? =
                    if let kept {
                        kept.local
                    } else if change.delta.createIfMissing != nil || (!change.delta.increments.isEmpty && state.exists) {
                        // A merging set from a device that never saw the document: its fields over
                        // the server's, which the merge keeps (and `useLocal` must not remove).
                        // Increments: the server counted them (where the document exists), so its
                        // counters stand as they are.
                        state.applyingLocally(change.delta, at: LocalStore.localVersion, includingIncrements: false).documentJSON
                    } else {
                        localViews[change.key] ?? nil
                    }
                keptConflicts[change.key] = KeptConflict(local: local, conflicts: (kept?.conflicts ?? []) + conflicts)
            case .rejected(let reason, let message):
                reshown.insert(change.key)
                if change.writes > 1, let parts = try writes(at: position) {
                    resend(change, at: position, as: parts)
                    report.resent.insert(change.key)
                    confirmed[change.key] = state
                    continue
                }
                rollbacks.insert(change.key)
                // A group refused whole is reported once, by the change at fault (or, where all
                // are refused with the group, by its first); the others go with it unreported.
                if let group = change.group, reason == .groupFailed {
                    guard !groupsWithCulprit.contains(group), reportedGroups.insert(group).inserted else { break }
                }
                report.rejections.append(
                    Rejection(
                        key: change.key, operation: OperationType(change.delta),
                        reason: reason, message: message))
            }
            confirmed[change.key] = state
        }
    }
}
