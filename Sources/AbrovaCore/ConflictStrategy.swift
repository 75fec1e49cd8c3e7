/// Which version wins when a document changed both on a device and on the server.
///
/// Each strategy is a policy the server applies when it joins a client's change into its state;
/// Spec/conflicts.md has the full table.
public enum ConflictStrategy: String, Hashable, Sendable, Codable, CaseIterable {
    /// The server's version wins. Best for shared data where the server is the source of truth.
    case serverWins
    /// The client's version wins. Best for personal data, or when offline edits should persist.
    case clientWins
    /// Non-conflicting changes are combined; sets merge element by element (a concurrent add wins
    /// over a remove); for the same field changed on both sides the server's value wins; an edit
    /// wins over a delete that did not see it.
    case merge
    /// The server applies nothing of a conflicting document's change and reports the conflict; the
    /// app's resolver decides.
    case manual
}

/// A field (or the document) changed on both sides, and how it was settled.
public struct Conflict: Hashable, Sendable {
    /// How a conflict ended.
    public enum Outcome: String, Hashable, Sendable, Codable {
        /// The server's value stands.
        case serverWon
        /// The client's value was applied.
        case clientWon
        /// Both sides were combined (sets, element by element).
        case merged
        /// Nothing was applied; the app's resolver decides (manual strategy).
        case unresolved
    }

    /// The field; the root path stands for the document itself.
    public var path: FieldPath
    /// The server's value before the change (`nil`: absent, removed or deleted).
    public var serverValue: Value?
    /// The value the client's change would have given it (`nil`: removed or deleted).
    public var clientValue: Value?
    /// How it was settled.
    public var outcome: Outcome

    /// A settled conflict.
    public init(path: FieldPath, serverValue: Value?, clientValue: Value?, outcome: Outcome) {
        self.path = path
        self.serverValue = serverValue
        self.clientValue = clientValue
        self.outcome = outcome
    }
}

/// What the server's join of a change did to the state it changed in place.
public struct JoinReport: Hashable, Sendable {
    /// What was applied, as a delta-state: every field (and the existence register) written at the
    /// new version. Empty when nothing was applied.
    public var changes: DocumentState
    /// The conflicts settled, ordered by path.
    public var conflicts: [Conflict]

    /// A report of what a join applied and settled.
    public init(changes: DocumentState = DocumentState(), conflicts: [Conflict] = []) {
        self.changes = changes
        self.conflicts = conflicts
    }

    /// Whether anything was applied.
    public var isApplied: Bool { changes.version != .zero }
}

/// What the server's join of a change produced.
public struct ApplyResult: Hashable, Sendable {
    /// The document's new state (the old one when nothing was applied).
    public var state: DocumentState
    /// What was applied, as a delta-state: every field (and the existence register) written at the
    /// new version. Empty when nothing was applied.
    public var changes: DocumentState
    /// The conflicts settled, ordered by path.
    public var conflicts: [Conflict]

    /// Whether anything was applied.
    public var isApplied: Bool { changes.version != .zero }
}
