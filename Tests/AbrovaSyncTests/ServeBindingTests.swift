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
