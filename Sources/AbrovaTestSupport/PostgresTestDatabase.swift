import AbrovaPostgres
import Foundation

/// A fresh PostgreSQL schema for one test, dropped when the value is released.
///
/// The server is the one `ABROVA_POSTGRES_URL` names (`.ci/run` starts one and sets it; locally,
/// `.ci/postgres` does). Each test gets its own schema on that database, so tests run in parallel
/// without seeing each other's tables; the store finds its tables through the URL's
/// `search_path`.
public final class PostgresTestDatabase: Sendable {
    /// The environment variable naming the test server.
    public static let environmentVariable = "ABROVA_POSTGRES_URL"

    /// The test server's URL, or `nil` when none is configured.
    public static var serverURL: String? {
        guard let url = ProcessInfo.processInfo.environment[environmentVariable], !url.isEmpty else { return nil }
        return url
    }

    /// Whether PostgreSQL tests can run here.
    public static var isAvailable: Bool { serverURL != nil }

    /// Why PostgreSQL tests are skipped when they are.
    public static let skipReason = "PostgreSQL tests need ABROVA_POSTGRES_URL (run `.ci/postgres` as root to start one; .ci/run does)"

    /// The URL of this test's schema: give it to `PostgresServerStore` or `abrova serve --postgres`.
    public let url: String
    private let serverURL: String
    private let schema: String

    /// Makes a new, empty schema.
    ///
    /// - Throws: `NotConfigured` when no server is configured; `PostgresError` when it cannot
    ///   be reached.
    public init() throws {
        guard let serverURL = Self.serverURL else { throw NotConfigured() }
        self.serverURL = serverURL
        schema = "test_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        try PostgresConnection(url: serverURL).execute("CREATE SCHEMA \(schema)")
        let separator = serverURL.contains("?") ? "&" : "?"
        url = serverURL + separator + "options=-csearch_path%3D\(schema)"
    }

    deinit { try? PostgresConnection(url: serverURL).execute("DROP SCHEMA \(schema) CASCADE") }

    /// No test server is configured.
    public struct NotConfigured: Error, CustomStringConvertible {
        public var description: String { PostgresTestDatabase.skipReason }
    }
}
