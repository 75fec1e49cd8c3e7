import AbrovaCore
import AbrovaSQLite
import Foundation

/// The server's store on SQLite, the embedded default: one file, no set-up.
///
/// One connection writes (behind a lock, so versions follow commit order); readers take
/// connections from a pool and read their own WAL snapshot, so pulls and reads never wait for a
/// push. The `Database` objects are never shared: each is used by one thread at a time, under the
/// lock or while taken out of the pool.
public final class SQLiteServerStore: ServerStore, @unchecked Sendable {
    // @unchecked: `writer` is only used while `writerLock` is held, `idleReaders` only while
    // `readersLock` is held, and a reader taken from it is used by one thread until it is put back.
    private let path: String
    private let writer: Database
    private let writerLock = NSLock()
    private var idleReaders: [Database] = []
    private let readersLock = NSLock()
    private let durability: Database.Durability

    /// The schema version this code writes, kept in `PRAGMA user_version`: 2 keys client records
    /// by user and client id (1 by client id alone); 3 indexes documents by collection and version.
    static let schemaVersion = 3

    /// A pull of some collections reads each one's changes in version order from this index.
    private static let collectionIndex = "CREATE INDEX IF NOT EXISTS documents_by_collection ON documents (collection, version);"

    /// Opens (or creates) the store at `path`.
    ///
    /// - Parameter durability: `.full` syncs every commit to disk (an acknowledged push survives
    ///   power loss); `.normal` survives a crash of the process only.
    /// - Throws: `SQLiteError`, or `ServerStoreError` for a file of a newer schema or not a server store.
    public init(path: String, durability: Database.Durability = .full) throws {
        self.path = path
        self.durability = durability
        let database = try Database(path: path, durability: durability)
        try Self.migrate(database)
        writer = database
    }

    private static func migrate(_ database: Database) throws {
        let version = Int(try database.queryFirst("PRAGMA user_version") { $0.integer(0) } ?? 0)
        if version > schemaVersion {
            throw ServerStoreError("the server database has schema version \(version); this server reads up to \(schemaVersion)")
        }
        if version == 1 || version == 2 {
            try database.write { database in
                if version == 1 {
                    try database.execute(
                        """
                        CREATE TABLE clients_of_users (\(clientsColumns));
                        INSERT INTO clients_of_users (user_id, client_id, sequence, digest, answer)
                            SELECT user_id, client_id, sequence, digest, answer FROM clients;
                        DROP TABLE clients;
                        ALTER TABLE clients_of_users RENAME TO clients;
                        """)
                }
                try database.execute(collectionIndex + "PRAGMA user_version = \(schemaVersion);")
            }
            return
        }
        guard version == 0 else { return }
        if try database.queryFirst("SELECT count(*) FROM sqlite_master", [], { $0.integer(0) }) ?? 0 > 0 {
            throw ServerStoreError("the file is an SQLite database but not an AbrovaSync server store")
        }
        try database.write { database in
            try database.execute(
                """
                CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value BLOB NOT NULL);
                CREATE TABLE documents (
                    collection TEXT NOT NULL,
                    id TEXT NOT NULL,
                    owner TEXT NOT NULL,
                    version INTEGER NOT NULL,
                    deleted_at REAL,
                    state BLOB NOT NULL,
                    UNIQUE (collection, id)
                );
                CREATE UNIQUE INDEX documents_by_version ON documents (version);
                \(collectionIndex)
                CREATE INDEX tombstones_by_time ON documents (deleted_at) WHERE deleted_at IS NOT NULL;
                CREATE TABLE clients (\(clientsColumns));
                """)
            let key = CursorCodec.makeKey()
            try database.run("INSERT INTO meta (key, value) VALUES ('version', 0), ('horizon', 0), ('cursor_key', ?)", [.blob(key)])
            try database.execute("PRAGMA user_version = \(schemaVersion)")
        }
    }

    /// A client id is one user's own: another user's client of the same id is another client.
    private static let clientsColumns = """
        user_id TEXT NOT NULL, client_id TEXT NOT NULL, sequence INTEGER NOT NULL, digest BLOB NOT NULL, answer BLOB NOT NULL,
        PRIMARY KEY (user_id, client_id)
        """

    public func write<Result>(_ body: (any ServerTransaction) throws -> Result) throws -> Result {
        try writerLock.withLock {
            try writer.write { database in
                let transaction = SQLiteServerTransaction(database: database)
                let result = try body(transaction)
                try transaction.flush()
                return result
            }
        }
    }

    /// Runs `body` on a reader connection from the pool (a new one when all are busy).
    private func read<Result>(_ body: (Database) throws -> Result) throws -> Result {
        let database = try readersLock.withLock { idleReaders.popLast() } ?? Database(path: path, durability: durability)
        defer { readersLock.withLock { idleReaders.append(database) } }
        return try body(database)
    }

    public func document(_ key: DocumentKey) throws -> StoredDocument? {
        try read { database in try Self.document(key, in: database) }
    }

    public func changes(after version: Version, limit: Int, collections: [String]?, maximumBytes: Int) throws -> [StoredDocument] {
        try encodedChanges(after: version, limit: limit, collections: collections, maximumBytes: maximumBytes).map { try $0.decoded() }
    }

    public func encodedChanges(
        after version: Version, limit: Int, collections: [String]?, maximumBytes: Int
    ) throws -> [EncodedDocument] {
        try read { database in
            // One pass in version order: a row is read while the states before it are within the
            // budget (so at most one state is read past it).
            let after = SQLiteValue.integer(Int64(bitPattern: version.rawValue))
            var sql: String
            var bindings: [SQLiteValue]
            if collections?.isEmpty == true { return [] }
            if let collections {
                // Each collection's first changes after the version, from its index (one
                // `collection IN` over the whole table would sort everything after the version at
                // every page); their first `limit` together, each state read only as its row is.
                let arms = collections.indices.map { index in
                    "SELECT version FROM (SELECT version FROM documents WHERE collection = ?\(index + 3) AND version > ?1 ORDER BY version LIMIT ?2)"
                }
                sql = """
                    SELECT collection, id, owner, version, length(state), state FROM documents WHERE version IN (
                        \(arms.joined(separator: " UNION ALL ")) ORDER BY version LIMIT ?2
                    ) ORDER BY version
                    """
                bindings = [after, .integer(Int64(limit))] + collections.map { .text($0) }
            } else {
                sql =
                    "SELECT collection, id, owner, version, length(state), state FROM documents WHERE version > ?1 ORDER BY version LIMIT ?2"
                bindings = [after, .integer(Int64(limit))]
            }
            var bytesBefore = 0
            return try database.query(
                sql, bindings,
                whileMapping: { row -> EncodedDocument? in
                    guard bytesBefore < maximumBytes else { return nil }
                    bytesBefore += Int(row.integer(4))
                    return EncodedDocument(
                        key: DocumentKey(collection: row.text(0) ?? "", id: row.text(1) ?? ""), owner: row.text(2) ?? "",
                        version: Version(UInt64(bitPattern: row.integer(3))), encodedState: row.blob(5) ?? [])
                })
        }
    }

    public func purgeTombstones(deletedBefore time: Date) throws -> Version {
        try writerLock.withLock {
            try writer.write { database in
                let purged =
                    try database.queryFirst(
                        "SELECT max(version) FROM documents WHERE deleted_at < ?",
                        [.real(time.timeIntervalSince1970)]
                    ) { $0.isNull(0) ? nil : $0.integer(0) } ?? nil
                if let purged {
                    try database.run("DELETE FROM documents WHERE deleted_at < ?", [.real(time.timeIntervalSince1970)])
                    try database.run("UPDATE meta SET value = max(value, ?) WHERE key = 'horizon'", [.integer(purged)])
                }
                return try Self.horizon(in: database)
            }
        }
    }

    public func latestVersion() throws -> Version {
        try read { database in
            Version(UInt64(bitPattern: try database.queryFirst("SELECT coalesce(max(version), 0) FROM documents") { $0.integer(0) } ?? 0))
        }
    }

    public func tombstoneHorizon() throws -> Version {
        try read { database in try Self.horizon(in: database) }
    }

    public func cursorKey() throws -> [UInt8] {
        try read { database in try database.queryFirst("SELECT value FROM meta WHERE key = 'cursor_key'") { $0.blob(0) ?? [] } ?? [] }
    }

    private static func horizon(in database: Database) throws -> Version {
        Version(UInt64(bitPattern: try database.queryFirst("SELECT value FROM meta WHERE key = 'horizon'") { $0.integer(0) } ?? 0))
    }

    static func document(_ key: DocumentKey, in database: Database) throws -> StoredDocument? {
        try database.queryFirst(
            "SELECT collection, id, owner, version, state FROM documents WHERE collection = ? AND id = ?",
            [.text(key.collection), .text(key.id)], storedDocument)
    }

    static func storedDocument(_ row: Row) throws -> StoredDocument {
        let state = try DocumentState(encodedJSON: row.blob(4) ?? [])
        return StoredDocument(
            key: DocumentKey(collection: row.text(0) ?? "", id: row.text(1) ?? ""), owner: row.text(2) ?? "",
            version: Version(UInt64(bitPattern: row.integer(3))), state: state)
    }
}

/// A write transaction on the SQLite store's writer connection.
///
/// A document read or written stays in memory until the commit, and is written once, as last
/// written: a batch that changes one document many times (an app writing a cart among other
/// documents) decodes and encodes its state once, not once a change.
private final class SQLiteServerTransaction: ServerTransaction {
    let database: Database
    /// Documents read or written in this transaction (`nil`: known not to exist).
    private var documents: [DocumentKey: StoredDocument?] = [:]
    /// Writes not yet made, by document, with the time a deleted one was deleted.
    private var unsaved: [DocumentKey: (document: StoredDocument, time: Date)] = [:]

    init(database: Database) {
        self.database = database
    }

    func client(_ clientID: String, of userID: String) throws -> ClientRecord? {
        try database.queryFirst(
            "SELECT sequence, digest, answer FROM clients WHERE user_id = ? AND client_id = ?",
            [.text(userID), .text(clientID)]
        ) { row in
            ClientRecord(clientID: clientID, userID: userID, sequence: row.integer(0), digest: row.blob(1) ?? [], answer: row.blob(2) ?? [])
        }
    }

    func saveClient(_ record: ClientRecord) throws {
        try database.run(
            """
            INSERT INTO clients (client_id, user_id, sequence, digest, answer) VALUES (?1, ?2, ?3, ?4, ?5)
            ON CONFLICT (user_id, client_id) DO UPDATE SET sequence = ?3, digest = ?4, answer = ?5
            """, [.text(record.clientID), .text(record.userID), .integer(record.sequence), .blob(record.digest), .blob(record.answer)])
    }

    func isUnchanged(after: Version, through last: Version) throws -> Bool {
        let changed = try database.queryFirst(
            """
            SELECT EXISTS (SELECT 1 FROM documents WHERE version > ?1 AND version <= ?2)
                OR (SELECT value FROM meta WHERE key = 'horizon') > ?1
            """, [.integer(Int64(bitPattern: after.rawValue)), .integer(Int64(bitPattern: last.rawValue))]
        ) { $0.integer(0) }
        return changed == 0
    }

    func document(_ key: DocumentKey) throws -> StoredDocument? {
        if let known = documents[key] { return known }
        let document = try SQLiteServerStore.document(key, in: database)
        documents[key] = document
        return document
    }

    /// The counter as this transaction has advanced it, read at its first version and written back
    /// once, at the flush (one statement a batch instead of one a change). The writer's lock and the
    /// SQLite transaction keep every other writer out until the commit.
    private var lastVersion: Int64?
    private var isVersionAdvanced = false

    func nextVersion() throws -> Version {
        let last = try lastVersion ?? database.queryFirst("SELECT value FROM meta WHERE key = 'version'") { $0.integer(0) } ?? 0
        lastVersion = last + 1
        isVersionAdvanced = true
        return Version(UInt64(bitPattern: last + 1))
    }

    func saveDocument(_ document: StoredDocument, at time: Date) throws {
        documents[document.key] = document
        unsaved[document.key] = (document, time)
    }

    /// Makes the writes, each document once.
    func flush() throws {
        for (document, time) in unsaved.values { try write(document, at: time) }
        unsaved = [:]
        if isVersionAdvanced, let lastVersion {
            try database.run("UPDATE meta SET value = ? WHERE key = 'version'", [.integer(lastVersion)])
            isVersionAdvanced = false
        }
    }

    private func write(_ document: StoredDocument, at time: Date) throws {
        var state: [UInt8] = []
        document.state.writeEncoded(to: &state)
        try database.run(
            """
            INSERT INTO documents (collection, id, owner, version, deleted_at, state) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
            ON CONFLICT (collection, id) DO UPDATE SET owner = ?3, version = ?4, deleted_at = ?5, state = ?6
            """,
            [
                .text(document.key.collection), .text(document.key.id), .text(document.owner),
                .integer(Int64(bitPattern: document.version.rawValue)),
                document.state.exists ? .null : .real(time.timeIntervalSince1970), .blob(state),
            ])
    }
}
