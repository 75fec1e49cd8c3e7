/// Identifies a document: its collection and its id.
public struct DocumentKey: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let collection: String
    public let id: String

    public init(collection: String, id: String) {
        self.collection = collection
        self.id = id
    }

    public static func < (left: DocumentKey, right: DocumentKey) -> Bool {
        (left.collection, left.id) < (right.collection, right.id)
    }

    public var description: String { "\(collection)/\(id)" }
}

/// One document's change in a batch.
public struct BatchChange: Hashable, Sendable {
    public var key: DocumentKey
    public var delta: DocumentDelta
    /// How many app writes the change holds.
    public var writes: Int

    public init(key: DocumentKey, delta: DocumentDelta, writes: Int) {
        self.key = key
        self.delta = delta
        self.writes = writes
    }
}

/// A client's batch of changes: the unit of idempotency, identified by (client id, sequence).
/// Changes keep the order in which the app made them.
public struct Batch: Hashable, Sendable {
    public var clientID: String
    public var sequence: Int64
    public var changes: [BatchChange]

    public init(clientID: String, sequence: Int64, changes: [BatchChange]) {
        self.clientID = clientID
        self.sequence = sequence
        self.changes = changes
    }
}

/// The server's answer for one change of a batch.
public enum ChangeResult: Hashable, Sendable {
    /// Applied, possibly after settling conflicts by the strategy. `state` is the document's whole
    /// state after the change, written at `version`.
    case applied(version: Version, state: DocumentState, conflicts: [Conflict])
    /// Under the manual strategy: nothing applied; `state` is the server's document.
    case unresolved(state: DocumentState, conflicts: [Conflict])
    /// Refused (rules, invalid data): nothing applied.
    case rejected(statusCode: Int, message: String)
}
