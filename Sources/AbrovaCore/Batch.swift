/// Identifies a document: its collection and its id.
public struct DocumentKey: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The collection's name.
    public let collection: String
    /// The document's id within its collection.
    public let id: String

    /// Names a document.
    public init(collection: String, id: String) {
        self.collection = collection
        self.id = id
    }

    /// Checks that the collection and the id are usable: a collection is 1 to 100 ASCII letters,
    /// digits, `_` or `-`; an id is 1 to 256 ASCII letters, digits or `- _ . ~ : @ + =`, and not
    /// `.` or `..`. Both are safe in URLs, file names, logs and SQL text without escaping.
    ///
    /// - Throws: `ValueError` with code `invalidFieldName` naming `collection` or `id`.
    public func validate() throws(ValueError) {
        func check(_ part: String, name: String, maximum: Int, extra: [UInt8]) throws(ValueError) {
            let bytes = part.utf8
            let isAllowed = bytes.allSatisfy { byte in
                (byte >= 0x30 && byte <= 0x39) || (byte | 0x20 >= 0x61 && byte | 0x20 <= 0x7A) || extra.contains(byte)
            }
            guard isAllowed, !bytes.isEmpty, bytes.count <= maximum, part != ".", part != ".." else {
                let allowed = String(decoding: extra, as: UTF8.self).map(String.init).joined(separator: " ")
                throw ValueError(
                    .invalidFieldName, field: name,
                    detail: "a \(name) must be 1 to \(maximum) ASCII letters, digits or \(allowed), not \"\(part.prefix(40))\"")
            }
        }
        try check(collection, name: "collection", maximum: 100, extra: Self.collectionPunctuation)
        try check(id, name: "id", maximum: 256, extra: Self.idPunctuation)
    }

    // Short arrays: a linear scan beats hashing each byte.
    private static let collectionPunctuation: [UInt8] = Array("-_".utf8)
    private static let idPunctuation: [UInt8] = Array("+-.:=@_~".utf8)

    public static func < (left: DocumentKey, right: DocumentKey) -> Bool {
        (left.collection, left.id) < (right.collection, right.id)
    }

    public var description: String { "\(collection)/\(id)" }
}

/// One document's change in a batch.
public struct BatchChange: Hashable, Sendable {
    /// The document changed.
    public var key: DocumentKey
    /// The change.
    public var delta: DocumentDelta
    /// How many app writes the change holds.
    public var writes: Int
    /// The strategy that settles this change's conflicts; `nil`: the batch's. (An app may choose
    /// a strategy per collection, while a batch keeps the order of writes across collections.)
    public var strategy: ConflictStrategy?
    /// The atomic group the change belongs to (`WriteBatch`), `nil` for none: the server applies
    /// a group's changes, which come together in a batch, all or none.
    public var group: Int64?

    /// A document's change with the number of writes it holds.
    public init(key: DocumentKey, delta: DocumentDelta, writes: Int, strategy: ConflictStrategy? = nil, group: Int64? = nil) {
        self.key = key
        self.delta = delta
        self.writes = writes
        self.strategy = strategy
        self.group = group
    }
}

extension Batch {
    /// The changes' positions, one range per change outside any group and one per group (its
    /// changes come together), in order.
    public var units: [Range<Int>] {
        var result: [Range<Int>] = []
        var start = 0
        while start < changes.count {
            var end = start + 1
            if let group = changes[start].group {
                while end < changes.count, changes[end].group == group { end += 1 }
            }
            result.append(start..<end)
            start = end
        }
        return result
    }
}

/// A client's batch of changes: the unit of idempotency, identified by (client id, sequence).
/// Changes keep the order in which the app made them.
public struct Batch: Hashable, Sendable {
    /// The client that sent it, an id made once per device store.
    public var clientID: String
    /// The client's batch number: each batch has the next one, and a retry has the same one.
    public var sequence: Int64
    /// The changes, in the order the app made them.
    public var changes: [BatchChange]

    /// A batch of changes.
    public init(clientID: String, sequence: Int64, changes: [BatchChange]) {
        self.clientID = clientID
        self.sequence = sequence
        self.changes = changes
    }
}

/// The server's answer for one change of a batch.
public enum ChangeResult: Hashable, Sendable {
    /// Applied, possibly after settling conflicts by the strategy. `state` is the document's whole
    /// state after the change, written at `version`; `nil` when the change was uncontested
    /// (`DocumentState.isUncontested(by:)`): the state is then the client's confirmed state with
    /// the change joined at `version`, which the client computes itself.
    case applied(version: Version, state: DocumentState?, conflicts: [Conflict])
    /// Under the manual strategy: nothing applied; `state` is the server's document.
    case unresolved(state: DocumentState, conflicts: [Conflict])
    /// Refused (rules, invalid data): nothing applied.
    case rejected(reason: Refusal.Reason, message: String)
}
