import AbrovaCore
import Foundation

/// The last batch a client sent: its number, a digest of its body and the answer it got. One row
/// per client, replaced by each new batch: the whole of the server's dedupe state. A client is a
/// user's: two users' clients of the same id are two clients, neither of which learns of the other.
public struct ClientRecord: Hashable, Sendable {
    /// The client's id.
    public var clientID: String
    /// The user whose client it is.
    public var userID: String
    /// The number of the last batch applied.
    public var sequence: Int64
    /// SHA-256 of the canonical body of that batch.
    public var digest: [UInt8]
    /// The answer given to it, byte for byte.
    public var answer: [UInt8]

    /// A client's record.
    public init(clientID: String, userID: String, sequence: Int64, digest: [UInt8], answer: [UInt8]) {
        self.clientID = clientID
        self.userID = userID
        self.sequence = sequence
        self.digest = digest
        self.answer = answer
    }
}

/// The work of one write transaction: what a push reads and writes. Everything done through it
/// commits together or not at all.
public protocol ServerTransaction {
    /// The record of the user's client, if it has sent a batch before.
    func client(_ clientID: String, of userID: String) throws -> ClientRecord?
    /// Records a client's last batch and its answer.
    func saveClient(_ record: ClientRecord) throws
    /// A document as this transaction sees it (its own writes included).
    func document(_ key: DocumentKey) throws -> StoredDocument?
    /// Takes the next version from the database's one counter.
    func nextVersion() throws -> Version
    /// Writes a document; `time` is the server's clock, kept for a deleted document so that its
    /// tombstone can expire.
    func saveDocument(_ document: StoredDocument, at time: Date) throws
    /// Whether no other write's document has its last change after `after` and up to `last`, none
    /// can still commit there, and no tombstone after `after` was removed: a pull from `after`
    /// made after a batch that took versions up to `last` would bring only the batch's own
    /// documents. Documents this transaction wrote count as they were (its writes are saved at
    /// its end).
    func isUnchanged(after: Version, through last: Version) throws -> Bool
    /// The record of the user's client, as `client(_:of:)`, before its batch `sequence` starts,
    /// with the batch's documents `keys` read and as many versions taken as there are keys (one a
    /// change; none when the record shows the batch applied already): a store across a network
    /// does it all in one round trip.
    func client(_ clientID: String, of userID: String, preparing keys: [DocumentKey], forBatch sequence: Int64) throws -> ClientRecord?
}

extension ServerTransaction {
    /// `client(_:of:)`: an embedded store reads a document as cheaply alone as in a batch.
    public func client(_ clientID: String, of userID: String, preparing keys: [DocumentKey], forBatch sequence: Int64) throws
        -> ClientRecord?
    {
        try client(clientID, of: userID)
    }
}

/// Where the server keeps documents, client records and the version counter.
///
/// Implementations are safe to call from any thread; a call blocks until the database answers
/// (the HTTP layer gives each request its own thread, and the databases are blocking C libraries).
/// A pull (`changes`) never returns a version while a lower one may still commit: on SQLite writes
/// are serialised; on PostgreSQL they run in parallel and pulls read below every write in progress.
public protocol ServerStore: Sendable {
    /// Runs `body` in one write transaction; it commits when `body` returns and rolls back when it throws.
    func write<Result>(_ body: (any ServerTransaction) throws -> Result) throws -> Result
    /// A committed document.
    func document(_ key: DocumentKey) throws -> StoredDocument?
    /// Committed documents whose last change is after `version`, in version order, at most `limit`,
    /// only of `collections` when given, and no more than start within `maximumBytes` of stored
    /// state (always one, when there is one): a pull of large documents reads only what a page
    /// can hold.
    func changes(after version: Version, limit: Int, collections: [String]?, maximumBytes: Int) throws -> [StoredDocument]
    /// `changes(after:limit:collections:maximumBytes:)` with each state as the store holds it, not
    /// read: a pull sends those bytes as they are when the rules need nothing of what a document
    /// holds.
    func encodedChanges(after version: Version, limit: Int, collections: [String]?, maximumBytes: Int) throws -> [EncodedDocument]
    /// Removes tombstones of documents deleted before `time`; returns the tombstone horizon.
    func purgeTombstones(deletedBefore time: Date) throws -> Version
    /// The highest version of a removed tombstone: a pull from a cursor below it may miss a delete.
    func tombstoneHorizon() throws -> Version
    /// The highest version a pull may return now: every document of a version at or below it
    /// has committed, and no write in progress can commit one there.
    func latestVersion() throws -> Version
    /// The store's connections to its database, when it keeps a pool (`nil`: it does not).
    var connectionStatistics: ConnectionStatistics? { get }
    /// A random key made once per database, which signs cursors (every server process on the
    /// database accepts the others' cursors).
    func cursorKey() throws -> [UInt8]
    /// Calls `committed`, on a thread of the store's, whenever another process may have committed
    /// changes to this database, until the observation is cancelled; `nil` when no other process
    /// writes to it (the service's own pushes tell its watches). Calls may come in bursts or
    /// without a change (after a lost connection): each is only a reason to look.
    func observeCommits(_ committed: @escaping @Sendable () -> Void) -> (any CommitObservation)?
}

/// A committed document as a store holds it: its state in the compact form, canonical JSON as
/// the wire carries it (`DocumentState.encodedBytes`), not read.
public struct EncodedDocument: Hashable, Sendable {
    /// Which document.
    public var key: DocumentKey
    /// The user who created it.
    public var owner: String
    /// The version of its last change.
    public var version: Version
    /// The state's compact form.
    public var encodedState: [UInt8]

    /// A document as stored.
    public init(key: DocumentKey, owner: String, version: Version, encodedState: [UInt8]) {
        self.key = key
        self.owner = owner
        self.version = version
        self.encodedState = encodedState
    }

    /// Whether the document exists, as the compact form begins (`{"e":[1,` or `{"e":[0,`); `nil`
    /// when it begins otherwise.
    public var exists: Bool? {
        let prefix = #"{"e":["#.utf8
        guard encodedState.count > prefix.count + 1, encodedState.starts(with: prefix),
            encodedState[prefix.count + 1] == UInt8(ascii: ",")
        else { return nil }
        switch encodedState[prefix.count] {
        case UInt8(ascii: "1"): return true
        case UInt8(ascii: "0"): return false
        default: return nil
        }
    }

    /// The document with its state read.
    ///
    /// - Throws: `ValueError` when the bytes are not a state.
    public func decoded() throws -> StoredDocument {
        StoredDocument(key: key, owner: owner, version: version, state: try DocumentState(encodedJSON: encodedState))
    }
}

/// Commits being observed (`ServerStore.observeCommits`).
public protocol CommitObservation: Sendable {
    /// Stops the calls; one already running may still finish.
    func cancel()
}

/// How many connections a store's pool holds.
public struct ConnectionStatistics: Hashable, Sendable {
    /// Open now, lent or idle.
    public var open: Int
    /// Open and waiting to be lent.
    public var idle: Int
    /// The most the pool opens.
    public var maximum: Int

    public init(open: Int, idle: Int, maximum: Int) {
        self.open = open
        self.idle = idle
        self.maximum = maximum
    }
}

extension ServerStore {
    /// A store without a pool says nothing of connections.
    public var connectionStatistics: ConnectionStatistics? { nil }

    /// One process writes to the database: its own pushes are all the commits there are.
    public func observeCommits(_ committed: @escaping @Sendable () -> Void) -> (any CommitObservation)? { nil }

    /// The changes, each state encoded again (a store that keeps states in another form).
    public func encodedChanges(
        after version: Version, limit: Int, collections: [String]?, maximumBytes: Int
    ) throws -> [EncodedDocument] {
        try changes(after: version, limit: limit, collections: collections, maximumBytes: maximumBytes).map {
            EncodedDocument(key: $0.key, owner: $0.owner, version: $0.version, encodedState: $0.state.encodedBytes)
        }
    }

    /// `changes(after:limit:collections:maximumBytes:)` without a byte budget.
    public func changes(after version: Version, limit: Int, collections: [String]?) throws -> [StoredDocument] {
        try changes(after: version, limit: limit, collections: collections, maximumBytes: .max)
    }
}

/// A server store that cannot be used: a file of a newer schema, not a server store, or a
/// database that cannot be reached.
public struct ServerStoreError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What is wrong.
    public let message: String
    /// Whether the database could not be reached: nothing was done, or the outcome is unknown, and
    /// the same request may succeed later (answered `unavailable`, not `failed`).
    public let isUnavailable: Bool
    init(_ message: String) {
        self.message = message
        isUnavailable = false
    }
    init(unavailable message: String) {
        self.message = message
        isUnavailable = true
    }
    public var description: String { message }
}
