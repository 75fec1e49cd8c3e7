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

    /// Runs `command` with `/bin/sh` and waits for it. On Linux not with `Process`: a restart
    /// leaves a new server daemon behind, which would inherit the descriptor by which `Process`
    /// learns that its child ended, and the wait would never end. Here a bash closes every
    /// descriptor beyond the standard three before the command runs (the daemon holds none of this
    /// process's), and the child gets a signal mask and handlers of its own (the calling thread's
    /// may block SIGCHLD, with which shells wait for their children).
    private static func run(_ command: String) throws -> Duration {
        let start = ContinuousClock.now
        #if canImport(Glibc)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let closing = #"for fd in /proc/$$/fd/*; do fd=${fd##*/}; if [ "$fd" -gt 2 ] && [ -e "/proc/$$/fd/$fd" ]; then eval "exec $fd>&-"; fi; done; exec /bin/sh -c "$1""#
        let words: [String] = ["/bin/bash", "-c", closing, "abrova-restart", command]
        let arguments: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
        let environment: [UnsafeMutablePointer<CChar>?] = ProcessInfo.processInfo.environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for pointer in arguments + environment { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, "/bin/bash", &actions, &attributes, arguments, environment)
        guard spawned == 0 else { throw RestartFailed(command: command, status: -spawned) }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        // Exited with status 0: the low 7 bits (the signal) and the exit status are all zero.
        guard status == 0 else { throw RestartFailed(command: command, status: status) }
        #else
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command]
        try process.run()
        process.waitUntilExit()
        guard process.terminationReason == .exit, process.terminationStatus == 0 else {
            throw RestartFailed(command: command, status: process.terminationStatus)
        }
        #endif
        return ContinuousClock.now - start
    }

    /// The restart command failed.
    public struct RestartFailed: Error, CustomStringConvertible {
        public let command: String
        /// The wait status (`waitpid`; elsewhere the exit status), or minus the error of `posix_spawn`.
        public let status: Int32
        public var description: String { "`\(command)` failed (wait status \(status))" }
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
