import AbrovaSync
import AbrovaTestSupport
import Foundation
import Testing

/// `abrova serve` as an app meets it: the built executable on a loopback port, with a database and
/// an auth file (API key `k`; token `t` is user `ana`, `t2` is `ben`) in a temporary folder.
final class ServedForApps: Sendable {
    /// The server's database: the embedded SQLite file, or a fresh PostgreSQL schema.
    enum Store: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case sqlite, postgres

        /// The stores that can run here: PostgreSQL when `ABROVA_POSTGRES_URL` names a server
        /// (always in CI).
        static var available: [Store] { PostgresTestDatabase.isAvailable ? allCases : [.sqlite] }

        var testDescription: String { rawValue }
    }

    let folder = TemporaryFolder()
    let port: UInt16
    private let process: SpawnedProcess
    private let postgres: PostgresTestDatabase?

    var url: URL { URL(string: "http://127.0.0.1:\(port)")! }
    /// The arguments that name the server's database to `abrova`.
    let databaseArguments: [String]

    init(store: Store = .sqlite) async throws {
        postgres = store == .postgres ? try PostgresTestDatabase() : nil
        let database = postgres.map { ["--postgres", $0.url] } ?? ["--database", folder.path("serve.sqlite")]
        databaseArguments = database
        guard let executable = BuiltExecutable.url(named: "abrova") else { throw ServeFailure("abrova is not built") }
        let auth = folder.path("auth.json")
        try Data(#"{"apiKeys":["k"],"tokens":{"t":"ana","t2":"ben"}}"#.utf8).write(to: URL(fileURLWithPath: auth))
        let log = folder.path("serve.log")
        guard FileManager.default.createFile(atPath: log, contents: nil) else { throw ServeFailure("cannot write \(log)") }
        process = try SpawnedProcess(
            executable.path, ["serve", "--port", "0"] + database + ["--auth", auth],
            standardInput: .null, standardOutput: .append(toFile: log), standardError: .append(toFile: log))
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline && process.isRunning {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            if let range = text.range(of: #"on port \d+"#, options: .regularExpression),
                let port = UInt16(text[range].split(separator: " ").last ?? "")
            {
                self.port = port
                return
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        process.kill()
        throw ServeFailure("abrova serve did not start: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
    }

    deinit { process.kill() }

    /// A device of the user whose token is `token`, with its own store.
    func device(_ name: String, token: String = "t") throws -> AbrovaSync {
        try AbrovaSync(
            config: try AbrovaSyncConfigBuilder(apiKey: "k")
                .serverURL(url)
                .authToken(token)
                .storePath(folder.path("\(name).sqlite"))
                .build())
    }
}

struct ServeFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
