import AbrovaCore
import AbrovaTestSupport
import Foundation
import Testing

#if os(Linux)
    /// Where `abrova serve` listens. Development mode (no `--auth`) lets anyone act as any user, so it
    /// binds 127.0.0.1 unless `--dev-on-all-interfaces` says otherwise, and then it warns.
    @Suite(.timeLimit(.minutes(2))) struct ServeBindingTests {
        static let loopback = "0100007F"
        static let everyInterface = "00000000"

        @Test func developmentModeListensOnLoopbackOnly() async throws {
            let server = try await ServedCLI.start([])
            #expect(Set(try listeningAddresses(port: server.port)) == [Self.loopback])
            #expect(server.log.contains("(127.0.0.1 only) on port"))
            await server.stop()
        }

        @Test func devOnAllInterfacesListensEverywhereAndWarns() async throws {
            let server = try await ServedCLI.start(["--dev-on-all-interfaces"])
            #expect(Set(try listeningAddresses(port: server.port)) == [Self.everyInterface])
            #expect(server.log.contains("WARNING: --dev-on-all-interfaces"))
            await server.stop()
        }

        @Test func withAuthEveryInterfaceUnlessLoopback() async throws {
            let everywhere = try await ServedCLI.start([], withAuth: true)
            #expect(Set(try listeningAddresses(port: everywhere.port)) == [Self.everyInterface])
            #expect(!everywhere.log.contains("development mode"))
            await everywhere.stop()
            let loopback = try await ServedCLI.start(["--loopback"], withAuth: true)
            #expect(Set(try listeningAddresses(port: loopback.port)) == [Self.loopback])
            await loopback.stop()
        }

        @Test func theDevelopmentWarningFollowsASuccessfulStart() async throws {
            let server = try await ServedCLI.start([])
            let lines = server.log.split(separator: "\n")
            let started = try #require(lines.firstIndex { $0.hasPrefix("abrova serving ") })
            let warned = try #require(lines.firstIndex { $0.hasPrefix("warning: no --auth file") })
            #expect(warned > started)
            await server.stop()
        }

        @Test func aDatabaseThatCannotBeOpenedIsNamedInWordsAndNothingIsWarned() async throws {
            let folder = TemporaryFolder()
            let path = folder.path("missing-folder/x.sqlite")
            let child = try ChildProcess("abrova", ["serve", "--port", "0", "--database", path], logPath: folder.path("serve.log"))
            #expect(await child.waitUntilExit(limit: .seconds(30)) == 2)
            #expect(child.log.contains("abrova: cannot open the database \(path): unable to open database file"), "\(child.log)")
            #expect(!child.log.contains("warning"))
            #expect(!child.log.contains("SQLite error"))
        }

        @Test func metricsListenOnLoopbackAndJSONLogsNameEachRequestsId() async throws {
            let server = try await ServedCLI.start(["--log-format", "json", "--metrics-port", "0"])
            let metricsPort = try #require(
                server.log.firstMatch(of: /metrics on port (\d+)/).flatMap { UInt16($0.1) }, "\(server.log)")
            #expect(Set(try listeningAddresses(port: metricsPort)) == [Self.loopback])
            let health = try RawHTTPConnection.get(port: server.port, "/v1/health", headers: ["X-Request-Id": "probe-1"])
            #expect(health.headers["x-request-id"] == "probe-1")
            let metrics = try RawHTTPConnection.get(port: metricsPort, "/metrics")
            #expect(metrics.status == 200)
            #expect(String(decoding: metrics.body, as: UTF8.self).contains(#"abrova_http_requests_total{route="health",status="200"} 1"#))
            #expect(await eventually { server.log.contains(#""id":"probe-1""#) })
            for line in server.log.split(separator: "\n") {
                let object = try? Value(json: Array(line.utf8))
                #expect(object?.mapValue?["msg"] != nil, "not a JSON log line: \(line)")
            }
            await server.stop()
        }

        @Test func metricsWithATokenListenWhereTheServerDoesAndWantIt() async throws {
            let server = try await ServedCLI.start(["--metrics-port", "0", "--metrics-token", "s3cret"], withAuth: true)
            let metricsPort = try #require(server.log.firstMatch(of: /metrics on port (\d+)/).flatMap { UInt16($0.1) })
            #expect(Set(try listeningAddresses(port: metricsPort)) == [Self.everyInterface])
            #expect(try RawHTTPConnection.get(port: metricsPort, "/metrics").status == 401)
            #expect(try RawHTTPConnection.get(port: metricsPort, "/metrics", headers: ["Authorization": "Bearer s3cret"]).status == 200)
            await server.stop()
        }

        @Test func versionSaysTheRelease() async throws {
            let folder = TemporaryFolder()
            let child = try ChildProcess("abrova", ["--version"], logPath: folder.path("version.log"))
            #expect(await child.waitUntilExit(limit: .seconds(30)) == 0)
            #expect(child.log.hasPrefix("abrova 0."), "\(child.log)")
        }

        @Test func devOnAllInterfacesWithAuthIsRefused() async throws {
            let folder = TemporaryFolder()
            let child = try ChildProcess(
                "abrova",
                [
                    "serve", "--port", "0", "--database", folder.path("x.sqlite"),
                    "--auth", try ServedCLI.writeAuthFile(in: folder), "--dev-on-all-interfaces",
                ],
                logPath: folder.path("serve.log"))
            #expect(await child.waitUntilExit(limit: .seconds(30)) == 2)
            #expect(child.log.contains("--dev-on-all-interfaces is for development mode"))
        }
    }

    /// `abrova serve --port 0` on a database in a temporary folder, started once it says its port.
    struct ServedCLI {
        let folder: TemporaryFolder
        let child: ChildProcess
        let port: UInt16
        var log: String { child.log }

        static func start(
            _ arguments: [String], withAuth: Bool = false, authJSON: String? = nil,
            in folder: TemporaryFolder = TemporaryFolder()
        ) async throws -> ServedCLI {
            var all = ["serve", "--port", "0", "--database", folder.path("serve.sqlite")] + arguments
            if withAuth || authJSON != nil { all += ["--auth", try writeAuthFile(in: folder, json: authJSON)] }
            let child = try ChildProcess("abrova", all, logPath: folder.path("serve.log"))
            let deadline = ContinuousClock.now + .seconds(30)
            while ContinuousClock.now < deadline && child.isRunning {
                if let range = child.log.range(of: #"on port \d+"#, options: .regularExpression),
                    let port = UInt16(child.log[range].split(separator: " ").last ?? "")
                {
                    return ServedCLI(folder: folder, child: child, port: port)
                }
                try await Task.sleep(for: .milliseconds(20))
            }
            child.kill()
            throw Failure("abrova serve did not start: \(child.log)")
        }

        @discardableResult
        static func writeAuthFile(in folder: TemporaryFolder, json: String? = nil) throws -> String {
            let path = folder.path("auth.json")
            try Data((json ?? #"{"apiKeys":["k"],"tokens":{"t":"ana"}}"#).utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
            return path
        }

        func stop() async { await child.stop() }
    }
#endif

extension RawHTTPConnection {
    /// One GET on a new connection, and its answer.
    static func get(port: UInt16, _ target: String, headers: [String: String] = [:]) throws -> Response {
        let connection = try RawHTTPConnection(port: port)
        var head = "GET \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        try connection.send(head + "\r\n")
        return try connection.readResponse()
    }
}
