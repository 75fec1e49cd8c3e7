import AbrovaCore
import AbrovaPostgres
import Foundation

/// The server's store on PostgreSQL, for several server processes on one database.
///
/// Semantics are the SQLite store's (Spec/storage.md): a batch in one transaction with its dedupe
/// record, versions from one counter, tombstones with a horizon, pulls in version order. Write
/// transactions run in parallel, in this process and others, holding only their client's and
/// their documents' rows; each registers a ticket first, and pulls read only below the smallest
/// ticket, so a puller never passes a version that commits later (Spec/storage.md, "No skipped
/// changes"). Connections come from a pool; one lost to a restart is replaced, and the call is
/// retried once on a new connection (a write may be retried because its dedupe record commits
/// with it).
public final class PostgresServerStore: ServerStore, Sendable {
    private let pool: PostgresPool
    private let url: String
    /// The schema that holds the tables: the payload of the notifications of its commits.
    private let schema: String
    /// How long a write's ticket holds back pulls at most: a write that takes longer fails (and
    /// is tried again), and the ticket of a writer that vanished is removed after it.
    private let writerLease: Duration

    /// The schema version this code writes, kept in `abrova_meta`: 2 keys client records by user
    /// and client id (1 by client id alone); 3 adds the tickets of writes in progress
    /// (`abrova_writing`).
    static let schemaVersion: Int64 = 3
    /// The advisory lock taken while the schema is checked or created, so processes starting together agree.
    static let schemaLock: Int64 = 0x4162_726F_7661_0002

    /// Connects to the database `url` names and creates or checks the schema.
    ///
    /// - Parameters:
    ///   - maximumConnections: how many connections this process opens at most.
    ///   - writerLease: how long a write may take before it fails (Spec/storage.md, "No skipped
    ///     changes"); a writer that vanished holds pulls back this long at most.
    /// - Throws: `ServerStoreError` for a database of a newer schema or one that cannot be reached.
    public init(url: String, maximumConnections: Int = 8, writerLease: Duration = .seconds(15)) throws {
        let pool = PostgresPool(url: url, maximumConnections: maximumConnections)
        let schema = try Self.retryingOnce { try pool.withConnection(Self.migrate) }
        self.pool = pool
        self.url = url
        self.schema = schema
        self.writerLease = writerLease
    }

    /// Checks the schema, or creates it in the first schema of the search path when there is none;
    /// returns the name of the schema that holds the tables.
    ///
    /// An existing schema is only read: DDL on it would wait for the writes in progress
    /// (`CREATE INDEX IF NOT EXISTS` locks its table before it finds the index exists).
    private static func migrate(_ connection: PostgresConnection) throws -> String {
        try connection.transaction { connection in
            try connection.run(Statements.lock, [.integer(schemaLock)])
            if let schema = try tablesSchema(on: connection) {
                let found = try connection.run(Statements.schemaVersion)
                guard found.count > 0 else {
                    throw ServerStoreError("the database has a table abrova_meta in schema \(schema) but is not an AbrovaSync server store")
                }
                let version = found.integer(0, 0)
                if version > schemaVersion {
                    throw ServerStoreError("the server database has schema version \(version); this server reads up to \(schemaVersion)")
                }
                // Once per database: the schema lock keeps a second process out meanwhile.
                if version == 1 {
                    try connection.execute(
                        "ALTER TABLE abrova_clients DROP CONSTRAINT abrova_clients_pkey, ADD PRIMARY KEY (user_id, client_id);")
                }
                if version < 3 {
                    try connection.execute(writingTable + "UPDATE abrova_meta SET number = \(schemaVersion) WHERE key = 'schema';")
                }
                try checkSequence(on: connection)
                return schema
            }
            try connection.execute(
                """
                CREATE TABLE abrova_meta (key text PRIMARY KEY, number bigint, bytes bytea);
                CREATE SEQUENCE abrova_versions CACHE 1;
                CREATE TABLE abrova_documents (
                    collection text NOT NULL,
                    id text NOT NULL,
                    owner text NOT NULL,
                    version bigint NOT NULL UNIQUE,
                    deleted_at double precision,
                    state bytea NOT NULL,
                    PRIMARY KEY (collection, id)
                );
                CREATE INDEX abrova_tombstones_by_time ON abrova_documents (deleted_at) WHERE deleted_at IS NOT NULL;
                CREATE TABLE abrova_clients (
                    user_id text NOT NULL,
                    client_id text NOT NULL,
                    sequence bigint NOT NULL,
                    digest bytea NOT NULL,
                    answer bytea NOT NULL,
                    PRIMARY KEY (user_id, client_id)
                );
                """ + writingTable)
            let key = CursorCodec.makeKey()
            try connection.run(Statements.createMeta, [.integer(schemaVersion), .bytes(key)])
            // Created in the first schema of the search path, which finds it.
            return try tablesSchema(on: connection) ?? ""
        }
    }

    /// The tickets of the writes in progress: a pull reads only below the smallest.
    private static let writingTable = """
        CREATE TABLE abrova_writing (id bigint PRIMARY KEY, ticket bigint NOT NULL, expires_at timestamptz NOT NULL);
        CREATE INDEX abrova_writing_by_expiry ON abrova_writing (expires_at);
        """

    /// Refuses a version sequence that hands out values from a per-session cache: tickets read the
    /// sequence's last value, which must be the largest value handed out (Spec/storage.md).
    private static func checkSequence(on connection: PostgresConnection) throws {
        let rows = try connection.run(Statements.sequenceCache)
        guard rows.count > 0, rows.integer(0, 0) == 1 else {
            throw ServerStoreError(
                "the sequence abrova_versions caches values (CACHE \(rows.count > 0 ? rows.integer(0, 0) : 0)); it must be CACHE 1 "
                    + "(ALTER SEQUENCE abrova_versions CACHE 1)")
        }
    }

    /// The schema whose `abrova_meta` the search path finds, if any.
    private static func tablesSchema(on connection: PostgresConnection) throws -> String? {
        let rows = try connection.run(Statements.tablesSchema)
        return rows.count > 0 ? rows.text(0, 0) : nil
    }

    /// Runs `body` in a transaction that takes no lock but its documents' rows, so writes to
    /// other documents commit at the same time, in this process or another. Before it takes any
    /// version it registers a ticket, committed at once, that holds pulls below it until the
    /// transaction ends (Spec/storage.md, "No skipped changes"). A transaction that meets another
    /// on the same new document, or a deadlock, is rolled back and run again (up to 8 times).
    public func write<Result>(_ body: (any ServerTransaction) throws -> Result) throws -> Result {
        var attempt = 0
        while true {
            do {
                return try retryingOnce { try writeReleasingLostTicket(body) }
            } catch let error where Self.isWriteConflict(error) && attempt < 8 {
                attempt += 1
                usleep(UInt32.random(in: 500...(2_000 * UInt32(attempt))))
            }
        }
    }

    /// `writeOnce` on a connection of the pool. A write whose connection was lost after its ticket
    /// was registered has its ticket removed on another connection, when the database answers:
    /// otherwise it would hold pulls back for its whole lease. The lost transaction cannot commit
    /// after that (its ticket's removal would fail), and the caller runs the write again.
    private func writeReleasingLostTicket<Result>(_ body: (any ServerTransaction) throws -> Result) throws -> Result {
        var lostTicket: Int64?
        do {
            return try pool.withConnection { connection in try writeOnce(on: connection, losingTicket: &lostTicket, body) }
        } catch let error as PostgresError where error.isConnectionLost {
            if let lostTicket {
                try? pool.withConnection { connection in
                    try connection.execute("DELETE FROM abrova_writing WHERE id = \(lostTicket); \(wakeWatches)")
                }
            }
            throw error
        }
    }

    /// Wakes every process's watches: sent at every ticket's end, whatever its write saved, since
    /// changes of others above the ticket became readable. (The schema's name quoted as a literal.)
    private var wakeWatches: String { "SELECT pg_notify('\(PostgresCommitListener.channel)', \(Self.literal(schema)))" }

    /// Runs `body` in one write transaction on `connection`; `lostTicket` is set to the write's id
    /// when the connection is lost once its ticket may be registered.
    private func writeOnce<Result>(
        on connection: PostgresConnection, losingTicket lostTicket: inout Int64?, _ body: (any ServerTransaction) throws -> Result
    ) throws -> Result {
        let writer = Int64.random(in: 1...Int64.max)
        let transaction = PostgresServerTransaction(
            connection: connection, writer: writer, lease: Int64(writerLease / .milliseconds(1)), schema: schema)
        do {
            let result = try body(transaction)
            try transaction.commit()
            return result
        } catch {
            if transaction.isOpen && connection.isBroken {
                lostTicket = writer
            } else if transaction.isOpen {
                // One string, so one round trip: the ROLLBACK ends the failed transaction, and the
                // ticket's removal and the wake-up run in one of their own.
                try? connection.execute("ROLLBACK; DELETE FROM abrova_writing WHERE id = \(writer); \(wakeWatches)")
            }
            throw error
        }
    }

    /// `text` as an SQL string literal.
    static func literal(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
    }

    /// Whether a write failed only because another met it: run again.
    private static func isWriteConflict(_ error: any Error) -> Bool {
        if error is WriteConflict { return true }
        guard let error = error as? PostgresError else { return false }
        // unique_violation (two writers created one document), deadlock_detected, serialization_failure
        return ["23505", "40P01", "40001"].contains(error.sqlState)
    }

    public func document(_ key: DocumentKey) throws -> StoredDocument? {
        try retryingOnce { try pool.withConnection { try Self.document(key, on: $0) } }
    }

    public func changes(after version: Version, limit: Int, collections: [String]?, maximumBytes: Int) throws -> [StoredDocument] {
        try encodedChanges(after: version, limit: limit, collections: collections, maximumBytes: maximumBytes).map { try $0.decoded() }
    }

    public func encodedChanges(
        after version: Version, limit: Int, collections: [String]?, maximumBytes: Int
    ) throws -> [EncodedDocument] {
        try retryingOnce {
            try pool.withConnection { connection in
                let after = PostgresValue.integer(Int64(bitPattern: version.rawValue))
                let budget = PostgresValue.integer(Int64(min(maximumBytes, Int(Int64.max))))
                let rows =
                    if let collections {
                        try connection.run(Statements.changesIn, [after, .integer(Int64(limit)), .texts(collections), budget])
                    } else {
                        try connection.run(Statements.changes, [after, .integer(Int64(limit)), budget])
                    }
                return (0..<rows.count).map { row in
                    EncodedDocument(
                        key: DocumentKey(collection: rows.text(row, 0), id: rows.text(row, 1)), owner: rows.text(row, 2),
                        version: Version(UInt64(bitPattern: rows.integer(row, 3))), encodedState: rows.bytes(row, 4))
                }
            }
        }
    }

    public func purgeTombstones(deletedBefore time: Date) throws -> Version {
        try retryingOnce {
            try pool.withConnection { connection in
                try connection.transaction { connection in
                    // One purge at a time: the horizon only rises.
                    try connection.run(Statements.lockHorizon)
                    let cutoff = PostgresValue.real(time.timeIntervalSince1970)
                    // One statement: the horizon covers exactly the tombstones it removed.
                    let purged = try connection.run(Statements.deleteTombstonesBefore, [cutoff])
                    if purged.count > 0 && !purged.isNull(0, 0) {
                        try connection.run(Statements.raiseHorizon, [.integer(purged.integer(0, 0))])
                    }
                    return try Self.horizon(on: connection)
                }
            }
        }
    }

    public func tombstoneHorizon() throws -> Version {
        try retryingOnce { try pool.withConnection(Self.horizon) }
    }

    public var connectionStatistics: ConnectionStatistics? {
        let (open, idle, maximum) = pool.statistics
        return ConnectionStatistics(open: open, idle: idle, maximum: maximum)
    }

    public func latestVersion() throws -> Version {
        try retryingOnce {
            try pool.withConnection { connection in
                let rows = try connection.run(Statements.latestVersion)
                return Version(UInt64(bitPattern: rows.count > 0 ? rows.integer(0, 0) : 0))
            }
        }
    }

    public func observeCommits(_ committed: @escaping @Sendable () -> Void) -> (any CommitObservation)? {
        PostgresCommitListener(url: url, schema: schema, committed: committed)
    }

    public func cursorKey() throws -> [UInt8] {
        try retryingOnce {
            try pool.withConnection { connection in
                let rows = try connection.run(Statements.cursorKey)
                return rows.count > 0 ? rows.bytes(0, 0) : []
            }
        }
    }

    /// Runs `body`, and once more when the connection was lost (the pool has dropped it, so the
    /// second try opens a new one). Either try that cannot reach the database fails as
    /// unavailable, which the service answers with 503.
    private func retryingOnce<Result>(_ body: () throws -> Result) throws -> Result {
        try Self.retryingOnce(body)
    }

    private static func retryingOnce<Result>(_ body: () throws -> Result) throws -> Result {
        do {
            return try body()
        } catch let error as PostgresError where error.isConnectionLost {
            do {
                return try body()
            } catch let error as PostgresError where error.isConnectionLost {
                throw ServerStoreError(unavailable: "the database cannot be reached: \(error)")
            }
        }
    }

    private static func horizon(on connection: PostgresConnection) throws -> Version {
        let rows = try connection.run(Statements.horizon)
        return Version(UInt64(bitPattern: rows.count > 0 ? rows.integer(0, 0) : 0))
    }

    static func document(_ key: DocumentKey, on connection: PostgresConnection) throws -> StoredDocument? {
        let rows = try connection.run(Statements.document, [.text(key.collection), .text(key.id)])
        return rows.count == 0 ? nil : try storedDocument(rows, 0)
    }

    static func storedDocument(_ rows: PostgresRows, _ row: Int) throws -> StoredDocument {
        let state = try DocumentState(encodedJSON: rows.bytes(row, 4))
        return StoredDocument(
            key: DocumentKey(collection: rows.text(row, 0), id: rows.text(row, 1)), owner: rows.text(row, 2),
            version: Version(UInt64(bitPattern: rows.integer(row, 3))), state: state)
    }
}

/// A write that met another (the same new document) or outlived its lease: run it again.
struct WriteConflict: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The store's statements, prepared on each connection on first use.
private enum Statements {
    /// Takes a transaction-scoped advisory lock: the schema lock.
    static let lock = PostgresStatement("lock", "SELECT pg_advisory_xact_lock($1)", parameters: [.integer])
    /// Registers a write's ticket: the version the sequence will hand out next, read, not taken
    /// (so versions stay as dense as without tickets), leased for $2 milliseconds. Expired
    /// tickets go first: their writers vanished.
    static let registerTicket = PostgresStatement(
        "register_ticket",
        """
        WITH expired AS (DELETE FROM abrova_writing WHERE expires_at < clock_timestamp())
        INSERT INTO abrova_writing (id, ticket, expires_at)
        SELECT $1, CASE WHEN is_called THEN last_value + 1 ELSE last_value END, clock_timestamp() + $2 * interval '1 millisecond'
        FROM abrova_versions
        """, parameters: [.integer, .integer])
    /// Removes a write's ticket, in its transaction; fails (1 / 0) when the ticket was gone
    /// already: its lease expired and a puller may have read past it.
    static let releaseTicket = PostgresStatement(
        "release_ticket",
        """
        WITH gone AS (DELETE FROM abrova_writing WHERE id = $1 RETURNING id) SELECT 1 / count(*) FROM gone
        """, parameters: [.integer])
    /// Wakes the watches of every process following the schema $2 on channel $1.
    static let wakeWatches = PostgresStatement("wake_watches", "SELECT pg_notify($1, $2)", parameters: [.text, .text])
    static let lockHorizon = PostgresStatement("lock_horizon", "SELECT number FROM abrova_meta WHERE key = 'horizon' FOR UPDATE")
    static let tablesSchema = PostgresStatement(
        "tables_schema",
        """
        SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass('abrova_meta')
        """)
    static let schemaVersion = PostgresStatement("schema_version", "SELECT number FROM abrova_meta WHERE key = 'schema'")
    static let createMeta = PostgresStatement(
        "create_meta",
        """
        INSERT INTO abrova_meta (key, number, bytes) VALUES ('schema', $1, NULL), ('horizon', 0, NULL), ('cursor_key', NULL, $2)
        """, parameters: [.integer, .bytes])
    static let document = PostgresStatement(
        "document",
        """
        SELECT collection, id, owner, version, state FROM abrova_documents WHERE collection = $1 AND id = $2
        """, parameters: [.text, .text])
    // The byte budget ($3 or $4) is counted on octet_length, which PostgreSQL answers from a
    // value's header without reading it; only the states within it are read.
    // A pull reads, in one snapshot, only versions below the smallest ticket of a write in
    // progress (`visible`): a write that commits later holds versions at or above its ticket only.
    static let changes = PostgresStatement(
        "changes",
        """
        WITH expired AS (DELETE FROM abrova_writing WHERE expires_at < clock_timestamp()),
        visible AS (SELECT coalesce(min(ticket), 9223372036854775807) AS below FROM abrova_writing)
        SELECT d.collection, d.id, d.owner, d.version, d.state
        FROM (SELECT version, sum(octet_length(state)) OVER (ORDER BY version) - octet_length(state) AS before
              FROM abrova_documents WHERE version > $1 AND version < (SELECT below FROM visible) ORDER BY version LIMIT $2) w
        JOIN abrova_documents d ON d.version = w.version WHERE w.before < $3 ORDER BY d.version
        """, parameters: [.integer, .integer, .integer])
    static let changesIn = PostgresStatement(
        "changes_in",
        """
        WITH expired AS (DELETE FROM abrova_writing WHERE expires_at < clock_timestamp()),
        visible AS (SELECT coalesce(min(ticket), 9223372036854775807) AS below FROM abrova_writing)
        SELECT d.collection, d.id, d.owner, d.version, d.state
        FROM (SELECT version, sum(octet_length(state)) OVER (ORDER BY version) - octet_length(state) AS before
              FROM abrova_documents WHERE version > $1 AND version < (SELECT below FROM visible) AND collection = ANY($3)
              ORDER BY version LIMIT $2) w
        JOIN abrova_documents d ON d.version = w.version WHERE w.before < $4 ORDER BY d.version
        """, parameters: [.integer, .integer, .texts, .integer])
    static let nextVersion = PostgresStatement("next_version", "SELECT nextval('abrova_versions')")
    /// A write's documents, their rows locked until it ends (in key order, so that two writes
    /// lock shared documents in one order).
    static let documentsForUpdate = PostgresStatement(
        "documents_for_update",
        """
        SELECT d.collection, d.id, d.owner, d.version, d.state
        FROM abrova_documents d JOIN unnest($1, $2) AS k (collection, id) ON d.collection = k.collection AND d.id = k.id
        ORDER BY d.collection, d.id FOR UPDATE OF d
        """, parameters: [.texts, .texts])
    static let documentForUpdate = PostgresStatement(
        "document_for_update",
        """
        SELECT collection, id, owner, version, state FROM abrova_documents WHERE collection = $1 AND id = $2 FOR UPDATE
        """, parameters: [.text, .text])
    static let isUnchanged = PostgresStatement(
        "is_unchanged",
        """
        SELECT (EXISTS (SELECT 1 FROM abrova_documents WHERE version > $1 AND version <= $2)
            OR EXISTS (SELECT 1 FROM abrova_writing WHERE ticket <= $2 AND id <> $3)
            OR (SELECT number FROM abrova_meta WHERE key = 'horizon') > $1)::int::bigint
        """, parameters: [.integer, .integer, .integer])
    /// $1 versions for batch $4 of user $2's client $3, none for a batch the client's record
    /// (locked) shows applied already: a retry takes no versions it would not use.
    static let nextVersionsForBatch = PostgresStatement(
        "next_versions_for_batch",
        """
        SELECT nextval('abrova_versions') FROM generate_series(1, $1)
        WHERE NOT EXISTS (SELECT 1 FROM abrova_clients WHERE user_id = $2 AND client_id = $3 AND sequence >= $4)
        """, parameters: [.integer, .text, .text, .integer])
    /// Documents this write found missing, $7 of them: when another write created one
    /// meanwhile, fewer are inserted and the statement fails (1 / 0), and this write runs again.
    static let createDocuments = PostgresStatement(
        "create_documents",
        """
        WITH created AS (
            INSERT INTO abrova_documents (collection, id, owner, version, deleted_at, state)
            SELECT * FROM unnest($1, $2, $3, $4, $5, $6)
            ON CONFLICT (collection, id) DO NOTHING RETURNING 1)
        SELECT 1 / (count(*) = $7)::int FROM created
        """, parameters: [.texts, .texts, .texts, .integers, .reals, .byteses, .integer])
    static let saveDocuments = PostgresStatement(
        "save_documents",
        """
        INSERT INTO abrova_documents (collection, id, owner, version, deleted_at, state)
        SELECT * FROM unnest($1, $2, $3, $4, $5, $6)
        ON CONFLICT (collection, id) DO UPDATE
        SET owner = excluded.owner, version = excluded.version, deleted_at = excluded.deleted_at, state = excluded.state
        """, parameters: [.texts, .texts, .texts, .integers, .reals, .byteses])
    /// A client's record, its row locked until the write ends (made empty, sequence 0, when
    /// there is none): two pushes of one client, on any processes, take turns.
    static let lockClient = PostgresStatement(
        "lock_client",
        """
        INSERT INTO abrova_clients (user_id, client_id, sequence, digest, answer) VALUES ($1, $2, 0, '', '')
        ON CONFLICT (user_id, client_id) DO UPDATE SET sequence = abrova_clients.sequence
        RETURNING sequence, digest, answer
        """, parameters: [.text, .text])
    static let saveClient = PostgresStatement(
        "save_client",
        """
        INSERT INTO abrova_clients (client_id, user_id, sequence, digest, answer) VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT (user_id, client_id) DO UPDATE SET sequence = $3, digest = $4, answer = $5
        """, parameters: [.text, .text, .integer, .bytes, .bytes])
    /// Removes the tombstones deleted before a time; the highest version removed.
    static let deleteTombstonesBefore = PostgresStatement(
        "delete_tombstones_before",
        """
        WITH removed AS (DELETE FROM abrova_documents WHERE deleted_at < $1 RETURNING version) SELECT max(version) FROM removed
        """, parameters: [.real])
    /// How many values the version sequence caches per session (1: none).
    static let sequenceCache = PostgresStatement(
        "sequence_cache",
        """
        SELECT s.seqcache FROM pg_sequence s WHERE s.seqrelid = to_regclass('abrova_versions')
        """)
    static let raiseHorizon = PostgresStatement(
        "raise_horizon",
        """
        UPDATE abrova_meta SET number = greatest(number, $1) WHERE key = 'horizon'
        """, parameters: [.integer])
    static let horizon = PostgresStatement("horizon", "SELECT number FROM abrova_meta WHERE key = 'horizon'")
    /// The latest version a pull may read: below the smallest ticket of a write in progress.
    static let latestVersion = PostgresStatement(
        "latest_version",
        """
        SELECT least((SELECT coalesce(max(version), 0) FROM abrova_documents),
                     (SELECT coalesce(min(ticket) - 1, 9223372036854775807) FROM abrova_writing))
        """)
    static let cursorKey = PostgresStatement("cursor_key", "SELECT bytes FROM abrova_meta WHERE key = 'cursor_key'")
}

/// A write transaction on one connection, holding the rows of its client and its documents.
///
/// Round trips are what a write costs when the database is a few milliseconds away, and writes to
/// the same documents wait meanwhile; so the statements go in pipelines. The first (with the
/// client's record, `client(_:of:preparing:)`) registers the ticket, begins the transaction,
/// locks the client and the documents and takes the versions; the writes wait in memory and go
/// with the commit (or with the check of `isUnchanged(after:through:)`). A push takes two round
/// trips, three with that check.
private final class PostgresServerTransaction: ServerTransaction {
    let connection: PostgresConnection
    /// The write's id among the writes in progress.
    let writer: Int64
    /// Whether the transaction was begun: its ticket may be registered.
    private(set) var isOpen = false
    /// The steps that register the ticket, committed at once, and begin the transaction: sent
    /// before the first statement.
    private let opening: [PostgresStep]
    /// The steps that remove the ticket, wake the watches and commit.
    private let closing: [PostgresStep]
    /// Documents read or written in this transaction (`nil`: known not to exist).
    private var documents: [DocumentKey: StoredDocument?] = [:]
    /// Documents read as missing: created with a check that no other write created them meanwhile.
    private var missing: Set<DocumentKey> = []
    /// Writes not yet sent, by document (a document written twice is sent once, as last written).
    private var unsaved: [DocumentKey: (document: StoredDocument, deletedAt: Date?)] = [:]
    /// The client's record, when saved and not yet sent.
    private var unsavedClient: ClientRecord?
    /// Versions taken from the sequence and not yet handed out, smallest last.
    private var versions: [Version] = []

    /// A transaction of the write `writer`, its ticket leased for `lease` milliseconds, waking the
    /// watches of `schema` at its end.
    init(connection: PostgresConnection, writer: Int64, lease: Int64, schema: String) {
        self.connection = connection
        self.writer = writer
        opening = [
            .sql("BEGIN"), .statement(Statements.registerTicket, [.integer(writer), .integer(lease)]), .sql("COMMIT"), .sql("BEGIN"),
        ]
        closing = [
            .statement(Statements.releaseTicket, [.integer(writer)]),
            .statement(Statements.wakeWatches, [.text(PostgresCommitListener.channel), .text(schema)]),
            .sql("COMMIT"),
        ]
    }

    /// Runs `steps` in one round trip, after the opening steps if the transaction is not yet
    /// begun, with the writes waiting in memory: before `steps` (so that reads see them), or after
    /// them when not `writesFirst`. Returns the rows of `steps`.
    ///
    /// - Throws: `WriteConflict` when the ticket's removal or a creation check fails (1 / 0), so
    ///   that the write runs again; `PostgresError`.
    private func run(_ steps: [PostgresStep], writesFirst: Bool = true) throws -> [PostgresRows] {
        let unsent = takeUnsent()
        let prefix = (isOpen ? [] : opening) + (writesFirst ? unsent : [])
        isOpen = true
        let rows = try pipeline(prefix + steps + (writesFirst ? [] : unsent))
        return Array(rows[prefix.count..<(prefix.count + steps.count)])
    }

    /// `connection.pipeline(steps)`, with a failed 1 / 0 check as a `WriteConflict`.
    private func pipeline(_ steps: [PostgresStep]) throws -> [PostgresRows] {
        do {
            return try connection.pipeline(steps)
        } catch  where error.sqlState == "22012" {
            throw WriteConflict("another write created one of this write's documents meanwhile, or this write outlived its lease")
        }
    }

    func client(_ clientID: String, of userID: String) throws -> ClientRecord? {
        try client(clientID, of: userID, preparing: [], forBatch: 0)
    }

    func client(_ clientID: String, of userID: String, preparing keys: [DocumentKey], forBatch sequence: Int64) throws -> ClientRecord? {
        var steps: [PostgresStep] = [.statement(Statements.lockClient, [.text(userID), .text(clientID)])]
        let unknown = Set(keys.filter { documents[$0] == nil }).sorted { ($0.collection, $0.id) < ($1.collection, $1.id) }
        if !unknown.isEmpty {
            steps.append(
                .statement(
                    Statements.documentsForUpdate,
                    [.array(.text, unknown.map { .text($0.collection) }), .array(.text, unknown.map { .text($0.id) })]))
        }
        let needed = keys.count - versions.count
        if needed > 0 {
            steps.append(
                .statement(Statements.nextVersionsForBatch, [.integer(Int64(needed)), .text(userID), .text(clientID), .integer(sequence)]))
        }

        let rows = try run(steps)
        if !unknown.isEmpty {
            for key in unknown { documents[key] = .some(nil) }
            missing.formUnion(unknown)
            let found = rows[1]
            for row in 0..<found.count {
                let document = try PostgresServerStore.storedDocument(found, row)
                documents[document.key] = document
                missing.remove(document.key)
            }
        }
        if needed > 0, let taken = rows.last {
            versions = (versions + (0..<taken.count).map { Version(UInt64(bitPattern: taken.integer($0, 0))) }).sorted(by: >)
        }
        let record = rows[0]
        guard record.count > 0, record.integer(0, 0) > 0 else { return nil }
        return ClientRecord(
            clientID: clientID, userID: userID, sequence: record.integer(0, 0), digest: record.bytes(0, 1),
            answer: record.bytes(0, 2))
    }

    func saveClient(_ record: ClientRecord) throws {
        unsavedClient = record
    }

    func isUnchanged(after: Version, through last: Version) throws -> Bool {
        // Asked before this write's documents are sent (after it, in the same round trip): they
        // count as they were.
        let check = PostgresStep.statement(
            Statements.isUnchanged,
            [.integer(Int64(bitPattern: after.rawValue)), .integer(Int64(bitPattern: last.rawValue)), .integer(writer)])
        return try run([check], writesFirst: false)[0].integer(0, 0) == 0
    }

    func document(_ key: DocumentKey) throws -> StoredDocument? {
        if let known = documents[key] { return known }
        let rows = try run([.statement(Statements.documentForUpdate, [.text(key.collection), .text(key.id)])])[0]
        let document = rows.count == 0 ? nil : try PostgresServerStore.storedDocument(rows, 0)
        documents[key] = document
        if document == nil { missing.insert(key) }
        return document
    }

    func nextVersion() throws -> Version {
        if let version = versions.popLast() { return version }
        return Version(UInt64(bitPattern: try run([.statement(Statements.nextVersion, [])])[0].integer(0, 0)))
    }

    func saveDocument(_ document: StoredDocument, at time: Date) throws {
        documents[document.key] = document
        unsaved[document.key] = (document, document.state.exists ? nil : time)
    }

    /// Sends what waits, removes the ticket, wakes the watches and commits, in one round trip.
    /// Nothing, when the transaction neither began nor has anything to send.
    func commit() throws {
        guard isOpen || unsavedClient != nil || !unsaved.isEmpty else { return }
        _ = try run(closing)
    }

    /// The steps that send the writes waiting in memory (the client's record first, then the
    /// documents in key order, as their rows were locked), which no longer wait.
    private func takeUnsent() -> [PostgresStep] {
        var steps: [PostgresStep] = []
        if let record = unsavedClient {
            steps.append(
                .statement(
                    Statements.saveClient,
                    [.text(record.clientID), .text(record.userID), .integer(record.sequence), .bytes(record.digest), .bytes(record.answer)])
            )
            unsavedClient = nil
        }
        guard !unsaved.isEmpty else { return steps }
        let all = unsaved.values.sorted {
            ($0.document.key.collection, $0.document.key.id) < ($1.document.key.collection, $1.document.key.id)
        }
        unsaved = [:]
        let created = all.filter { missing.contains($0.document.key) }
        let updated = all.filter { !missing.contains($0.document.key) }
        if !created.isEmpty {
            steps.append(.statement(Statements.createDocuments, Self.columns(of: created) + [.integer(Int64(created.count))]))
            // Created now: a later write of them in this transaction is an update.
            missing.subtract(created.map(\.document.key))
        }
        if !updated.isEmpty { steps.append(.statement(Statements.saveDocuments, Self.columns(of: updated))) }
        return steps
    }
    /// The statement values of `rows`, a column each.
    private static func columns(of rows: [(document: StoredDocument, deletedAt: Date?)]) -> [PostgresValue] {
        [
            .array(.text, rows.map { .text($0.document.key.collection) }),
            .array(.text, rows.map { .text($0.document.key.id) }),
            .array(.text, rows.map { .text($0.document.owner) }),
            .array(.integer, rows.map { .integer(Int64(bitPattern: $0.document.version.rawValue)) }),
            .array(.real, rows.map { row in row.deletedAt.map { .real($0.timeIntervalSince1970) } ?? .null }),
            .array(
                .bytes,
                rows.map { row in
                    var state: [UInt8] = []
                    row.document.state.writeEncoded(to: &state)
                    return .bytes(state)
                }),
        ]
    }
}
