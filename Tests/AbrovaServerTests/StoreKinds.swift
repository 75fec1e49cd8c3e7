import AbrovaCore
import AbrovaPostgres
import AbrovaSQLite
import AbrovaServer
import AbrovaTestSupport
import Foundation
import Testing

/// The suites that block their thread on a database (SQLite, PostgreSQL) and on sockets, run one
/// test at a time. Swift Testing runs synchronous tests on the two threads of Swift concurrency's
/// pool; two of these at once would hold both, and the SDK tests running beside them, which need
/// those threads to make progress, would stall for seconds.
@Suite(.serialized) enum ServerSuites {}

/// The server stores that one suite runs against.
enum StoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite
    case postgres

    /// The kinds that can run here: PostgreSQL when `ABROVA_POSTGRES_URL` names a server (CI
    /// always; `postgresIsSkippedWithAReason` reports it when not).
    static var available: [StoreKind] { PostgresTestDatabase.isAvailable ? allCases : [.sqlite] }

    var testDescription: String { rawValue }
}

/// A fresh, empty store of one kind, with what keeps its database alive until it is released.
///
/// Its stores keep the database too (the folder of the SQLite file, the PostgreSQL schema): a
/// test may hold on to a store alone, and the database outlives its last use.
final class TestStore: Sendable {
    let kind: StoreKind
    let store: any ServerStore
    /// The PostgreSQL schema's URL (for server processes of the same database).
    let postgresURL: String?
    /// The SQLite file's path.
    let sqlitePath: String?
    private let database: TestDatabase

    init(_ kind: StoreKind, connections: Int = 8) throws {
        self.kind = kind
        switch kind {
        case .sqlite:
            let folder = TemporaryFolder()
            database = TestDatabase(folder: folder)
            postgresURL = nil
            sqlitePath = folder.path("server.sqlite")
        case .postgres:
            let schema = try PostgresTestDatabase()
            database = TestDatabase(schema: schema)
            postgresURL = schema.url
            sqlitePath = nil
        }
        store = try database.open(connections: connections)
    }

    /// Another store on the same database (another server process would open its own).
    func reopened() throws -> any ServerStore {
        try database.open(connections: 8)
    }
}

/// The file's folder or the schema of a test's store, removed when the last store of it is released.
private final class TestDatabase: Sendable {
    private let folder: TemporaryFolder?
    private let schema: PostgresTestDatabase?

    init(folder: TemporaryFolder) {
        self.folder = folder
        schema = nil
    }

    init(schema: PostgresTestDatabase) {
        folder = nil
        self.schema = schema
    }

    func open(connections: Int) throws -> any ServerStore {
        let store: any ServerStore =
            if let schema {
                try PostgresServerStore(url: schema.url, maximumConnections: connections)
            } else {
                try SQLiteServerStore(path: folder!.path("server.sqlite"), durability: .normal)
            }
        return KeepingStore(store: store, database: self)
    }
}

/// A store that keeps its test database alive.
private struct KeepingStore: ServerStore {
    let store: any ServerStore
    let database: TestDatabase

    func write<Result>(_ body: (any ServerTransaction) throws -> Result) throws -> Result { try store.write(body) }
    func document(_ key: DocumentKey) throws -> StoredDocument? { try store.document(key) }
    func changes(after version: Version, limit: Int, collections: [String]?, maximumBytes: Int) throws -> [StoredDocument] {
        try store.changes(after: version, limit: limit, collections: collections, maximumBytes: maximumBytes)
    }
    func purgeTombstones(deletedBefore time: Date) throws -> Version { try store.purgeTombstones(deletedBefore: time) }
    func tombstoneHorizon() throws -> Version { try store.tombstoneHorizon() }
    func latestVersion() throws -> Version { try store.latestVersion() }
    var connectionStatistics: ConnectionStatistics? { store.connectionStatistics }
    func cursorKey() throws -> [UInt8] { try store.cursorKey() }
}

@Suite struct StoreAvailabilityTests {
    @Test(.enabled(if: PostgresTestDatabase.isAvailable, Comment(rawValue: PostgresTestDatabase.skipReason)))
    func postgresIsSkippedWithAReason() throws {
        _ = try TestStore(.postgres)
    }
}

/// Turns a test's store back into schema 1, whose client records were keyed by client id alone.
enum SchemaOne {
    static func downgrade(_ test: TestStore) throws {
        switch test.kind {
        case .sqlite:
            let database = try Database(path: try #require(test.sqlitePath), durability: .normal)
            try database.execute(
                """
                BEGIN;
                CREATE TABLE old_clients (client_id TEXT PRIMARY KEY NOT NULL, user_id TEXT NOT NULL, sequence INTEGER NOT NULL,
                                          digest BLOB NOT NULL, answer BLOB NOT NULL);
                INSERT INTO old_clients SELECT client_id, user_id, sequence, digest, answer FROM clients;
                DROP TABLE clients;
                ALTER TABLE old_clients RENAME TO clients;
                PRAGMA user_version = 1;
                COMMIT;
                """)
        case .postgres:
            try PostgresConnection(url: try #require(test.postgresURL)).execute(
                """
                ALTER TABLE abrova_clients DROP CONSTRAINT abrova_clients_pkey, ADD PRIMARY KEY (client_id);
                DROP TABLE abrova_writing;
                UPDATE abrova_meta SET number = 1 WHERE key = 'schema';
                """)
        }
    }
}
