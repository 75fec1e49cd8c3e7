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

    /// The environment variable holding a shell command that restarts the test server
    /// (`.ci/run` sets it to `.ci/postgres restart`).
    public static let restartVariable = "ABROVA_POSTGRES_RESTART"

    /// The command that restarts the test server, or `nil` when none is configured.
    public static var restartCommand: String? {
        guard let command = ProcessInfo.processInfo.environment[restartVariable], !command.isEmpty else { return nil }
        return command
    }

    /// The databases of this process's tests, counted so that a restart waits for the others.
    private static let users = Users()

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
        Self.users.enter()
        do {
            try PostgresConnection(url: serverURL).execute("CREATE SCHEMA \(schema)")
        } catch {
            Self.users.leave()
            throw error
        }
        let separator = serverURL.contains("?") ? "&" : "?"
        url = serverURL + separator + "options=-csearch_path%3D\(schema)"
    }

    deinit {
        try? PostgresConnection(url: serverURL).execute("DROP SCHEMA \(schema) CASCADE")
        Self.users.leave()
    }

    /// Restarts the test server with `restartCommand`, which cuts every connection to it.
    ///
    /// Other tests of this process would fail on their cut connections, so the restart waits
    /// (at most `patience`) until this database is the only one held, and databases made while
    /// the command runs wait for it to end. Blocking work runs on a thread of its own.
    ///
    /// - Returns: how long the command took.
    /// - Throws: `NotConfigured` without a command; `RestartFailed` when it fails.
    @discardableResult
    public func restartServer(patience: Duration = .seconds(60)) async throws -> Duration {
        guard let command = Self.restartCommand else { throw NotConfigured() }
        let users = Self.users
        return try await onNewThread { try users.restarting(patience: patience) { try Self.run(command) } }
    }

    /// Runs `command` with `/bin/sh` and waits for it. A restart leaves a new server daemon
    /// behind, which must hold none of this process's descriptors (a pipe a test reads to its end
    /// would never end): `SpawnedProcess` closes them in the child.
    private static func run(_ command: String) throws -> Duration {
        let start = ContinuousClock.now
        let termination = try SpawnedProcess("/bin/sh", ["-c", command], standardInput: .null).waitUntilExit()
        guard termination == .exited(0) else { throw RestartFailed(command: command, termination: termination) }
        return ContinuousClock.now - start
    }

    /// The restart command failed.
    public struct RestartFailed: Error, CustomStringConvertible {
        public let command: String
        public let termination: SpawnedProcess.Termination
        public var description: String { "`\(command)` failed (\(termination))" }
    }

    /// No test server is configured.
    public struct NotConfigured: Error, CustomStringConvertible {
        public var description: String { PostgresTestDatabase.skipReason }
    }
}

/// How many test databases are held, and whether the server is being restarted. Unchecked: both
/// counts are read and written only while `condition` is locked.
private final class Users: @unchecked Sendable {
    private let condition = NSCondition()
    private var held = 0
    private var isRestarting = false

    /// A database is made: waits while the server restarts (the wait is as long as the command).
    func enter() {
        condition.withLock {
            while isRestarting { condition.wait() }
            held += 1
        }
    }

    func leave() {
        condition.withLock { held -= 1 }
        condition.broadcast()
    }

    /// Runs `body` once the caller's database is the only one held (or after `patience`), with
    /// new databases waiting until it returns.
    func restarting<Result>(patience: Duration, _ body: () throws -> Result) throws -> Result {
        let deadline = Date().addingTimeInterval(Double(patience.components.seconds))
        condition.withLock {
            while held > 1 && condition.wait(until: deadline) {}
            isRestarting = true
        }
        defer {
            condition.withLock { isRestarting = false }
            condition.broadcast()
        }
        return try body()
    }
}
