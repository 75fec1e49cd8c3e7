import AbrovaCore
import AbrovaPostgres
import Foundation

/// The server's store on PostgreSQL, for several server processes on one database.
///
/// Semantics are the SQLite store's (Spec/storage.md): a batch in one transaction with its dedupe
/// record, versions from one counter, tombstones with a horizon, pulls in version order. Write
/// transactions hold one transaction-scoped advisory lock from their first statement to their
/// commit, across every process on the database (one lock per schema), so versions are taken and
/// become visible in commit order: a puller that has seen version `v` has seen every version below
/// it. Reads take no lock. Connections come from a pool; one lost to a restart is replaced, and the
/// call is retried once on a new connection (a write may be retried because its dedupe record
/// commits with it).
public final class PostgresServerStore: ServerStore, Sendable {
    private let pool: PostgresPool
    private let url: String
    /// The schema that holds the tables: the payload of the notifications of its commits.
    private let schema: String
    /// The advisory lock every write transaction holds: one per schema, so servers on different
    /// schemas of one database (several apps, parallel tests) never wait for each other.
    private let writeLock: Int64

    /// The schema version this code writes, kept in `abrova_meta`: 2 keys client records by user
    /// and client id (1 by client id alone).
    static let schemaVersion: Int64 = 2
    /// The advisory lock taken while the schema is checked or created, so processes starting together agree.
    static let schemaLock: Int64 = 0x4162_726F_7661_0002

    /// Connects to the database `url` names and creates or checks the schema.
    ///
    /// - Parameter maximumConnections: how many connections this process opens at most.
    /// - Throws: `ServerStoreError` for a database of a newer schema or one that cannot be reached.
    public init(url: String, maximumConnections: Int = 8) throws {
        let pool = PostgresPool(url: url, maximumConnections: maximumConnections)
        let schema = try Self.retryingOnce { try pool.withConnection(Self.migrate) }
        self.pool = pool
        self.url = url
        self.schema = schema
        writeLock = Self.writeLock(forSchema: schema)
    }

    /// The write lock of the tables in `schema`: a 64-bit FNV-1a hash of its name, the same in
    /// every process.
    static func writeLock(forSchema schema: String) -> Int64 {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in "abrova write lock: \(schema)".utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3
        }
        return Int64(bitPattern: hash)
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
                if version == 1 {
                    // Once per database: the schema lock keeps a second process out meanwhile.
                    try connection.execute(
                        """
                        ALTER TABLE abrova_clients DROP CONSTRAINT abrova_clients_pkey, ADD PRIMARY KEY (user_id, client_id);
                        UPDATE abrova_meta SET number = \(schemaVersion) WHERE key = 'schema';
                        """)
                }
                return schema
            }
            try connection.execute(
                """
                CREATE TABLE abrova_meta (key text PRIMARY KEY, number bigint, bytes bytea);
                CREATE SEQUENCE abrova_versions;
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
                """)
            let key = CursorCodec.makeKey()
            try connection.run(Statements.createMeta, [.integer(schemaVersion), .bytes(key)])
            // Created in the first schema of the search path, which finds it.
            return try tablesSchema(on: connection) ?? ""
        }
    }

    /// The schema whose `abrova_meta` the search path finds, if any.
    private static func tablesSchema(on connection: PostgresConnection) throws -> String? {
        let rows = try connection.run(Statements.tablesSchema)
        return rows.count > 0 ? rows.text(0, 0) : nil
    }

    public func write<Result>(_ body: (any ServerTransaction) throws -> Result) throws -> Result {
        try retryingOnce {
            try pool.withConnection { connection in
                try connection.transaction { connection in
                    try connection.run(Statements.lock, [.integer(writeLock)])
                    let transaction = PostgresServerTransaction(connection: connection)
                    let result = try body(transaction)
                    if try transaction.flush() {
                        // Delivered to every listening process when (and only if) this commits.
                        try connection.run(Statements.notify, [.text(schema)])
                    }
                    return result
                }
            }
        }
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
                    try connection.run(Statements.lock, [.integer(writeLock)])
                    let cutoff = PostgresValue.real(time.timeIntervalSince1970)
                    let purged = try connection.run(Statements.newestTombstoneBefore, [cutoff])
                    if purged.count > 0 && !purged.isNull(0, 0) {
                        try connection.run(Statements.deleteTombstonesBefore, [cutoff])
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

/// The store's statements, prepared on each connection on first use.
private enum Statements {
    /// Takes a transaction-scoped advisory lock: the write lock, or the schema lock.
    static let lock = PostgresStatement("lock", "SELECT pg_advisory_xact_lock($1)", parameters: [.integer])
    /// Tells the other processes' watches that documents of this schema changed.
    static let notify = PostgresStatement("notify", "SELECT pg_notify('\(PostgresCommitListener.channel)', $1)", parameters: [.text])
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
    static let changes = PostgresStatement(
        "changes",
        """
        SELECT d.collection, d.id, d.owner, d.version, d.state
        FROM (SELECT version, sum(octet_length(state)) OVER (ORDER BY version) - octet_length(state) AS before
              FROM abrova_documents WHERE version > $1 ORDER BY version LIMIT $2) w
        JOIN abrova_documents d ON d.version = w.version WHERE w.before < $3 ORDER BY d.version
        """, parameters: [.integer, .integer, .integer])
    static let changesIn = PostgresStatement(
        "changes_in",
        """
        SELECT d.collection, d.id, d.owner, d.version, d.state
        FROM (SELECT version, sum(octet_length(state)) OVER (ORDER BY version) - octet_length(state) AS before
              FROM abrova_documents WHERE version > $1 AND collection = ANY($3) ORDER BY version LIMIT $2) w
        JOIN abrova_documents d ON d.version = w.version WHERE w.before < $4 ORDER BY d.version
        """, parameters: [.integer, .integer, .texts, .integer])
    static let nextVersion = PostgresStatement("next_version", "SELECT nextval('abrova_versions')")
    static let documents = PostgresStatement(
        "documents",
        """
        SELECT d.collection, d.id, d.owner, d.version, d.state
        FROM abrova_documents d JOIN unnest($1, $2) AS k (collection, id) ON d.collection = k.collection AND d.id = k.id
        """, parameters: [.texts, .texts])
    static let isUnchanged = PostgresStatement(
        "is_unchanged",
        """
        SELECT (EXISTS (SELECT 1 FROM abrova_documents WHERE version > $1 AND version < $2)
            OR (SELECT number FROM abrova_meta WHERE key = 'horizon') > $1)::int::bigint
        """, parameters: [.integer, .integer])
    static let nextVersions = PostgresStatement(
        "next_versions", "SELECT nextval('abrova_versions') FROM generate_series(1, $1)",
        parameters: [.integer])
    static let saveDocuments = PostgresStatement(
        "save_documents",
        """
        INSERT INTO abrova_documents (collection, id, owner, version, deleted_at, state)
        SELECT * FROM unnest($1, $2, $3, $4, $5, $6)
        ON CONFLICT (collection, id) DO UPDATE
        SET owner = excluded.owner, version = excluded.version, deleted_at = excluded.deleted_at, state = excluded.state
        """, parameters: [.texts, .texts, .texts, .integers, .reals, .byteses])
    static let client = PostgresStatement(
        "client",
        """
        SELECT sequence, digest, answer FROM abrova_clients WHERE user_id = $1 AND client_id = $2
        """, parameters: [.text, .text])
    static let saveClient = PostgresStatement(
        "save_client",
        """
        INSERT INTO abrova_clients (client_id, user_id, sequence, digest, answer) VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT (user_id, client_id) DO UPDATE SET sequence = $3, digest = $4, answer = $5
        """, parameters: [.text, .text, .integer, .bytes, .bytes])
    static let newestTombstoneBefore = PostgresStatement(
        "newest_tombstone_before",
        """
        SELECT max(version) FROM abrova_documents WHERE deleted_at < $1
        """, parameters: [.real])
    static let deleteTombstonesBefore = PostgresStatement(
        "delete_tombstones_before",
        """
        DELETE FROM abrova_documents WHERE deleted_at < $1
        """, parameters: [.real])
    static let raiseHorizon = PostgresStatement(
        "raise_horizon",
        """
        UPDATE abrova_meta SET number = greatest(number, $1) WHERE key = 'horizon'
        """, parameters: [.integer])
    static let horizon = PostgresStatement("horizon", "SELECT number FROM abrova_meta WHERE key = 'horizon'")
    static let latestVersion = PostgresStatement("latest_version", "SELECT coalesce(max(version), 0) FROM abrova_documents")
    static let cursorKey = PostgresStatement("cursor_key", "SELECT bytes FROM abrova_meta WHERE key = 'cursor_key'")
}

/// A write transaction on one connection, under the write lock.
///
/// Round trips are what a write transaction costs here, and other processes wait for the lock
/// meanwhile; so a batch reads its documents and takes its versions in one statement each
/// (`prepare(for:)`), and its writes wait in memory and go in one statement before the commit.
private final class PostgresServerTransaction: ServerTransaction {
    let connection: PostgresConnection
    /// Documents read or written in this transaction (`nil`: known not to exist).
    private var documents: [DocumentKey: StoredDocument?] = [:]
    /// Writes not yet sent, by document (a document written twice is sent once, as last written).
    private var unsaved: [DocumentKey: (document: StoredDocument, deletedAt: Date?)] = [:]
    /// Versions taken from the sequence and not yet handed out, smallest last.
    private var versions: [Version] = []

    init(connection: PostgresConnection) {
        self.connection = connection
    }

    func client(_ clientID: String, of userID: String) throws -> ClientRecord? {
        let rows = try connection.run(Statements.client, [.text(userID), .text(clientID)])
        guard rows.count > 0 else { return nil }
        return ClientRecord(
            clientID: clientID, userID: userID, sequence: rows.integer(0, 0), digest: rows.bytes(0, 1),
            answer: rows.bytes(0, 2))
    }

    func saveClient(_ record: ClientRecord) throws {
        try connection.run(
            Statements.saveClient,
            [
                .text(record.clientID), .text(record.userID), .integer(record.sequence),
                .bytes(record.digest), .bytes(record.answer),
            ])
    }

    func prepare(for keys: [DocumentKey]) throws {
        let unknown = Array(Set(keys.filter { documents[$0] == nil }))
        if !unknown.isEmpty {
            let rows = try connection.run(
                Statements.documents,
                [
                    .array(.text, unknown.map { .text($0.collection) }),
                    .array(.text, unknown.map { .text($0.id) }),
                ])
            for key in unknown { documents[key] = .some(nil) }
            for row in 0..<rows.count {
                let document = try PostgresServerStore.storedDocument(rows, row)
                documents[document.key] = document
            }
        }
        let needed = keys.count - versions.count
        if needed > 0 {
            let rows = try connection.run(Statements.nextVersions, [.integer(Int64(needed))])
            let taken = (0..<rows.count).map { Version(UInt64(bitPattern: rows.integer($0, 0))) }
            versions = (versions + taken).sorted(by: >)
        }
    }

    func isUnchanged(after: Version, before: Version) throws -> Bool {
        let rows = try connection.run(
            Statements.isUnchanged, [.integer(Int64(bitPattern: after.rawValue)), .integer(Int64(bitPattern: before.rawValue))])
        return rows.integer(0, 0) == 0
    }

    func document(_ key: DocumentKey) throws -> StoredDocument? {
        if let known = documents[key] { return known }
        let document = try PostgresServerStore.document(key, on: connection)
        documents[key] = document
        return document
    }

    func nextVersion() throws -> Version {
        if let version = versions.popLast() { return version }
        return Version(UInt64(bitPattern: try connection.run(Statements.nextVersion).integer(0, 0)))
    }

    func saveDocument(_ document: StoredDocument, at time: Date) throws {
        documents[document.key] = document
        unsaved[document.key] = (document, document.state.exists ? nil : time)
    }

    /// Sends the writes, in one statement; whether there were any.
    @discardableResult
    func flush() throws -> Bool {
        guard !unsaved.isEmpty else { return false }
        let rows = Array(unsaved.values)
        unsaved = [:]
        try connection.run(
            Statements.saveDocuments,
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
            ])
        return true
    }
}
