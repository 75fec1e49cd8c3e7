/// What becomes of an atomic group (`BatchChange.group`) once each of its changes was judged: it
/// stands when every one was applied; otherwise nothing of it is saved, the first change that was
/// not applied keeps its refusal, and the others are refused with it (424). A change the manual
/// strategy would leave to the resolver refuses the group too, itself included (424): its answer
/// would describe a document the group's earlier changes had changed, which was never saved.
/// Decided without the store.
public enum GroupVerdict {
    /// The answers for a group that does not stand, or `nil` when every change was applied (or
    /// when `changes` are not a group: one change outside any group answers for itself).
    public static func refusal(of changes: ArraySlice<BatchChange>, results: [ChangeResult]) -> [ChangeResult]? {
        guard let group = changes.first?.group,
            let culprit = results.firstIndex(where: { if case .applied = $0 { false } else { true } })
        else { return nil }
        let culpritKey = changes[changes.startIndex + culprit].key
        let why: String =
            switch results[culprit] {
            case .rejected(_, let message): message
            case .unresolved: "\(culpritKey) has a conflict left to the resolver"
            case .applied: ""
            }
        return results.indices.map { index in
            if index == culprit {
                if case .rejected = results[index] { return results[index] }
                return .rejected(reason: .groupFailed, message: "not applied, nor group \(group): \(why)")
            }
            return .rejected(
                reason: .groupFailed, message: "not applied: \(culpritKey), another change of group \(group), was not (\(why))")
        }
    }
}
