import AbrovaCore
import AbrovaSQLite

/// Where a snapshot came from.
public struct SnapshotMetadata: Hashable, Sendable {
    /// Whether the document holds local writes the server has not confirmed yet.
    public var hasPendingWrites: Bool
    /// Whether the snapshot was read from the device's store rather than from the server.
    public var isFromCache: Bool
    /// Whether the snapshot shows a refused write rolled back to the server's version, as opposed
    /// to an ordinary change.
    public var isRollback: Bool
    /// On the snapshot a write returns once the server saved it: the conflicts the server settled
    /// for the change that carried the write, field by field, each with both values and its
    /// outcome (`clientWon`: this write replaced another device's change the device had not
    /// seen). Empty everywhere else.
    public var conflicts: [Conflict]

    /// Metadata for a snapshot.
    public init(hasPendingWrites: Bool, isFromCache: Bool, isRollback: Bool = false, conflicts: [Conflict] = []) {
        self.hasPendingWrites = hasPendingWrites
        self.isFromCache = isFromCache
        self.isRollback = isRollback
        self.conflicts = conflicts
    }
}

/// A document as the app sees it at one moment.
public struct DocumentSnapshot: Hashable, Sendable {
    /// Where the data comes from: a value read back, or a state whose document is built when asked
    /// for (a write returns a snapshot without paying for a document nobody may read).
    private enum Source: Hashable, Sendable {
        case value(Value?)
        case state(DocumentState)
    }

    /// Which document.
    public let key: DocumentKey
    private let source: Source
    /// Where the snapshot came from.
    public let metadata: SnapshotMetadata

    /// A snapshot of a document's data (`nil`: it does not exist).
    public init(key: DocumentKey, data: Value?, metadata: SnapshotMetadata) {
        self.key = key
        source = .value(data)
        self.metadata = metadata
    }

    init(key: DocumentKey, state: DocumentState, metadata: SnapshotMetadata) {
        self.key = key
        source = .state(state)
        self.metadata = metadata
    }

    /// The document, or `nil` when it does not exist.
    public var data: Value? {
        switch source {
        case .value(let value): value
        case .state(let state): state.document
        }
    }

    /// Whether the document exists.
    public var exists: Bool {
        switch source {
        case .value(let value): value != nil
        case .state(let state): state.exists
        }
    }

    /// The same snapshot with other metadata.
    package func withMetadata(_ metadata: SnapshotMetadata) -> DocumentSnapshot {
        switch source {
        case .value(let value): DocumentSnapshot(key: key, data: value, metadata: metadata)
        case .state(let state): DocumentSnapshot(key: key, state: state, metadata: metadata)
        }
    }

    public static func == (left: DocumentSnapshot, right: DocumentSnapshot) -> Bool {
        left.key == right.key && left.metadata == right.metadata && left.data == right.data
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(key)
        hasher.combine(metadata)
        hasher.combine(data)
    }
}

/// A query over one collection: equality filters on fields, an order by a field, a limit. It is
/// evaluated in SQLite over the documents as the app sees them.
public struct DocumentQuery: Hashable, Sendable {
    /// How a filter compares the field with its value.
    public enum Relation: Hashable, Sendable {
        /// The field equals the value.
        case equal
        /// The field exists, is not `null`, and does not equal the value.
        case notEqual
        /// The field is below the value (numbers with numbers, strings with strings, booleans with
        /// booleans; a field of another kind never matches).
        case less
        /// The field is below or equal to the value (kinds as `less`).
        case lessOrEqual
        /// The field is above the value (kinds as `less`).
        case greater
        /// The field is above or equal to the value (kinds as `less`).
        case greaterOrEqual
        /// The field equals one of the values (the filter's value is their array; 1 to 30 of them).
        case isIn
        /// The field is an array holding the value.
        case arrayContains
    }

    /// A filter: the field at `path` stands in `relation` to `value`.
    public struct Filter: Hashable, Sendable {
        /// The field compared.
        public var path: FieldPath
        /// What it is compared with.
        public var value: Value
        /// How.
        public var relation: Relation

        public init(path: FieldPath, relation: Relation = .equal, value: Value) {
            self.path = path
            self.relation = relation
            self.value = value
        }

        /// Refuses a filter that no query can run: an `isIn` of no or more than
        /// `maximumInValues` values, a range over an array or a map.
        ///
        /// - Throws: `StoreError` `.invalidQuery` naming the field.
        package func checkRunnable() throws(StoreError) {
            switch (relation, value) {
            case (.isIn, .array(let values)) where (1...DocumentQuery.maximumInValues).contains(values.count):
                return
            case (.isIn, _):
                throw StoreError(
                    .invalidQuery, "an \"in\" filter compares with 1 to \(DocumentQuery.maximumInValues) values", field: path.dotted)
            case (.less, .array), (.less, .map), (.less, .bytes), (.lessOrEqual, .array), (.lessOrEqual, .map), (.lessOrEqual, .bytes),
                (.greater, .array), (.greater, .map), (.greater, .bytes), (.greaterOrEqual, .array), (.greaterOrEqual, .map),
                (.greaterOrEqual, .bytes):
                throw StoreError(
                    .invalidQuery, "a range filter compares with a number, a string, a Boolean or a timestamp", field: path.dotted)
            default:
                return
            }
        }
    }

    /// The most values an `isIn` filter compares with (Firestore's limit).
    public static let maximumInValues = 30

    /// The collection queried.
    public var collection: String
    /// Filters, all of which must hold.
    public var filters: [Filter] = []
    /// The field to order by, if any.
    public var orderPath: FieldPath?
    /// Whether the order is descending.
    public var isDescending = false
    /// The most documents to return.
    public var limit: Int?

    /// Every document of a collection, ordered by id.
    public init(collection: String) { self.collection = collection }

    /// Only documents whose field at `path` equals `value` (integers and doubles compare as numbers).
    public func whereField(_ path: FieldPath, isEqualTo value: Value) -> DocumentQuery {
        filtered(Filter(path: path, value: value))
    }

    /// Only documents whose field at `path` stands in `relation` to `value`.
    public func filtered(_ filter: Filter) -> DocumentQuery {
        var query = self
        query.filters.append(filter)
        return query
    }

    /// Ordered by the field at `path` (documents without it, or with `null`, first when ascending,
    /// last when descending), then by id.
    public func order(by path: FieldPath, descending: Bool = false) -> DocumentQuery {
        var query = self
        query.orderPath = path
        query.isDescending = descending
        return query
    }

    /// At most `count` documents.
    public func limit(_ count: Int) -> DocumentQuery {
        var query = self
        query.limit = count
        return query
    }
}

/// What the app did to a document, as reported with a refused write.
public enum OperationType: String, Hashable, Sendable {
    case create, update, delete

    /// What a change does, as the app would name it: a delete, a create (`setData`, `add`) or an
    /// update.
    package init(_ delta: DocumentDelta) {
        self = delta.delete != nil ? .delete : delta.create != nil || delta.createIfMissing != nil ? .create : .update
    }
}

/// A queued write the server refused when it was finally sent; it was dropped and the document
/// rolled back to the server's version.
package struct Rejection: Hashable, Sendable {
    /// The document whose write was refused.
    package let key: DocumentKey
    /// What the write did: create, update or delete.
    package let operation: OperationType
    /// Why the server refused it (`forbidden` when the rules refused, `invalid` for invalid data).
    package let reason: Refusal.Reason
    /// The server's message.
    package let message: String
}

/// What settling a batch did.
package struct SettleReport: Hashable, Sendable {
    /// Writes the server refused.
    package var rejections: [Rejection] = []
    /// Conflicts the server settled by the strategy.
    package var conflicts: [DocumentKey: [Conflict]] = [:]
    /// Under the manual strategy: conflicts the app's resolver must decide. The client's change
    /// was dropped; the resolver's answer is written as a new change. The store keeps them
    /// (`unresolvedConflicts()`) until `resolveConflict(_:with:seenVersion:)` or `forgetUnresolvedConflict(_:)`.
    package var unresolved: [DocumentKey: [Conflict]] = [:]
    /// Documents whose change of several writes the server refused: the change went back to the
    /// queue write by write, to be sent again (nothing of it rolled back yet).
    package var resent: Set<DocumentKey> = []
    /// For each change sent again write by write: its id, and the ids of the changes its writes
    /// went back to the queue as, in order.
    package var resentRows: [Int64: [Int64]] = [:]
    /// Whether the device's pull cursor moved to the server's cursor after the batch: a pull
    /// made now would bring only what arrived after the batch was answered.
    package var tookCursor = false
}

/// A conflict the manual strategy left to the app's resolver, which the store keeps until the
/// resolution is written: an app ended before then is asked again at its next start.
package struct UnresolvedConflict: Hashable, Sendable {
    /// The document.
    package let key: DocumentKey
    /// The document as the device had it when the server answered (`nil`: deleted on the device).
    package let local: Value?
    /// The fields in conflict, each `unresolved`.
    package let conflicts: [Conflict]

    /// A conflict left to the resolver.
    package init(key: DocumentKey, local: Value?, conflicts: [Conflict]) {
        self.key = key
        self.local = local
        self.conflicts = conflicts
    }

    /// The conflicts as the store keeps them: canonical JSON of `[{path, outcome, server?, client?}]`.
    static func encode(_ conflicts: [Conflict]) -> String {
        Value.array(
            conflicts.map { conflict in
                var fields: [String: Value] = ["path": .string(conflict.path.dotted), "outcome": .string(conflict.outcome.rawValue)]
                fields["server"] = conflict.serverValue
                fields["client"] = conflict.clientValue
                return .map(fields)
            }
        ).canonicalJSON
    }

    static func decodeConflicts(_ json: String) throws -> [Conflict] {
        guard case .array(let entries) = try Value(json: json) else {
            throw StoreError(.corrupt, "unresolved conflicts that are not an array")
        }
        return try entries.map { entry in
            guard let fields = entry.mapValue, let dotted = fields["path"]?.stringValue,
                let outcome = fields["outcome"]?.stringValue.flatMap(Conflict.Outcome.init(rawValue:))
            else {
                throw StoreError(.corrupt, "an unresolved conflict the store cannot read")
            }
            return Conflict(
                path: dotted.isEmpty ? .root : try FieldPath(dotted), serverValue: fields["server"],
                clientValue: fields["client"], outcome: outcome)
        }
    }
}

/// A batch frozen for sending: the same bytes go out on every retry.
package struct FrozenBatch: Hashable, Sendable {
    /// The batch.
    package let batch: Batch
    /// The encoded body, kept so that a retry is byte-identical.
    package let body: [UInt8]
    /// The id (`origin`) of each change, in the batch's order (a `WriteReceipt` names its
    /// write's); 0 for a change stored before schema 5.
    package var rows: [Int64] = []

    /// A frozen batch.
    package init(batch: Batch, body: [UInt8], rows: [Int64] = []) {
        self.batch = batch
        self.body = body
        self.rows = rows
    }
}

/// Why the store refused or failed.
package struct StoreError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What kind of failure it is.
    package struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// The file is not an AbrovaSync store (another database, or not a database at all).
        package static let notAStore = Code(name: "notAStore")
        /// The store was written by a newer version of AbrovaSync.
        package static let newerSchema = Code(name: "newerSchema")
        /// The file is damaged.
        package static let corrupt = Code(name: "corrupt")
        /// The document does not exist.
        package static let documentNotFound = Code(name: "documentNotFound")
        /// A value, path or document was refused.
        package static let invalidValue = Code(name: "invalidValue")
        /// A query cannot be evaluated.
        package static let invalidQuery = Code(name: "invalidQuery")
        /// A server answer does not match the batch in flight.
        package static let unexpectedAnswer = Code(name: "unexpectedAnswer")
        /// SQLite failed.
        package static let database = Code(name: "database")
        package var description: String { name }
    }

    /// What kind of failure it is.
    package let code: Code
    /// A sentence for people.
    package let message: String
    /// The field concerned, for refused values.
    package let field: String?
    /// The SQLite error underneath, if any.
    package let underlying: SQLiteError?
    /// Why the server would refuse the same call, when the store refused what the server would
    /// refuse too (an invalid value, a missing document); `nil` for a failure of the device.
    package let reason: Refusal.Reason?

    /// A store error; its reason follows from the code.
    package init(_ code: Code, _ message: String, field: String? = nil, underlying: SQLiteError? = nil) {
        self.code = code
        self.message = message
        self.field = field
        self.underlying = underlying
        reason =
            switch code {
            case .documentNotFound: .notFound
            case .invalidValue, .invalidQuery: .invalid
            default: nil
            }
    }

    /// A refused value, path or document, keeping its reason (invalid, not found or too large).
    init(_ error: ValueError) {
        code = error.code == .documentNotFound ? .documentNotFound : .invalidValue
        message = error.description
        field = error.field
        underlying = nil
        reason = error.reason
    }

    package var description: String {
        "\(code): \(message)" + (underlying.map { " (\($0))" } ?? "")
    }
}

/// One app write, as `LocalStore.write(_:for:)` takes it.
package enum WriteOperation: Sendable {
    /// Replace the document with exactly these fields (creating it). The top-level fields named in
    /// `serverTimestamps` hold the device's estimate of the server's time, which the server writes.
    case set([String: Value], serverTimestamps: Set<String> = [])
    /// Merge these fields into the document, leaf by leaf (a map merges into the map there), and
    /// leave its other fields; create it when there is none (`setData(_:merge: true)`). The
    /// top-level fields in `increments` are counters, incremented by the amounts there.
    case setMerging([String: Value], serverTimestamps: Set<String> = [], increments: [String: Value] = [:])
    /// Assign, remove, and change sets by path, mark paths for the server's time (each with
    /// the device's estimate), and increment counters; the document must exist.
    case update(
        set: [FieldPath: Value], remove: [FieldPath], setAdd: [FieldPath: [Value]], setRemove: [FieldPath: [Value]],
        serverTimestamps: [FieldPath: Timestamp] = [:], increments: [FieldPath: Value] = [:])
    /// Delete the document.
    case delete

    /// Whether the document must exist (an update of one the device does not show is refused).
    var requiresExistingDocument: Bool {
        if case .update = self { true } else { false }
    }

    /// Whether it merges into the document (the one write whose change depends on whether the
    /// device has unsent changes to it).
    var isMerge: Bool {
        if case .setMerging = self { true } else { false }
    }
}

/// What one write did to the queue: the pending change it left, and the change as it was before
/// when the write composed into it. `LocalStore.takeBack(_:)` undoes the write from it.
package struct WriteReceipt: Sendable {
    let change: LocalStore.PendingChange
    let before: LocalStore.PendingChange?
    /// The number the next batch takes as the write is made: the write is sent in a batch
    /// numbered this or more, and no batch numbered this or more was frozen before it.
    package let batchFrom: Int64
    /// The id of the change that holds the write, and the write's place among its writes.
    package var row: Int64 { change.origin }
    package var part: Int { change.writes - 1 }
}

/// A pull cursor a push answer gave (`to`), for the device whose cursor was `from` when it pushed
/// (`nil`: it had never pulled).
package struct CursorAdvance: Hashable, Sendable {
    package var from: String?
    package var to: String

    package init(from: String?, to: String) {
        self.from = from
        self.to = to
    }
}

extension DocumentDelta {
    /// This change with the timestamps assigned at these top-level fields marked for the server's
    /// time (`DocumentDelta.markServerTimestamps(_:)`).
    func markingServerTimestamps(_ names: Set<String>) -> DocumentDelta {
        guard !names.isEmpty else { return self }
        var result = self
        result.markServerTimestamps(names.compactMap { try? FieldPath(segments: [$0]) })
        return result
    }

    /// This change with the top-level fields `amounts` names incremented by them, after its other
    /// parts (`DocumentDelta.increment(_:base:)`).
    ///
    /// - Throws: `ValueError` naming the field when a name or an amount cannot be one.
    func incrementing(topLevel amounts: [String: Value], base: Version) throws(ValueError) -> DocumentDelta {
        guard !amounts.isEmpty else { return self }
        var paths: [FieldPath: Value] = [:]
        for (name, amount) in amounts { paths[try FieldPath(segments: [name])] = amount }
        var result = self
        try result.increment(paths, base: base)
        return result
    }
}
