import AbrovaServer
import AbrovaTestSupport
import Testing

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
final class TestStore: Sendable {
    let kind: StoreKind
    let store: any ServerStore
    /// The PostgreSQL schema's URL (for server processes of the same database).
    let postgresURL: String?
    private let folder: TemporaryFolder
    private let database: PostgresTestDatabase?

    init(_ kind: StoreKind, connections: Int = 8) throws {
        self.kind = kind
        folder = TemporaryFolder()
        switch kind {
        case .sqlite:
            database = nil
            postgresURL = nil
            store = try SQLiteServerStore(path: folder.path("server.sqlite"), durability: .normal)
        case .postgres:
            let database = try PostgresTestDatabase()
            self.database = database
            postgresURL = database.url
            store = try PostgresServerStore(url: database.url, maximumConnections: connections)
        }
    }

    /// Another store on the same database (another server process would open its own).
    func reopened() throws -> any ServerStore {
        switch kind {
        case .sqlite: try SQLiteServerStore(path: folder.path("server.sqlite"), durability: .normal)
        case .postgres: try PostgresServerStore(url: postgresURL!)
        }
    }
}

@Suite struct StoreAvailabilityTests {
    @Test(.enabled(if: PostgresTestDatabase.isAvailable, Comment(rawValue: PostgresTestDatabase.skipReason)))
    func postgresIsSkippedWithAReason() throws {
        _ = try TestStore(.postgres)
    }
}
