import AbrovaTestSupport
import Foundation
import Testing

#if os(Linux)
    /// `abrova serve --auth FILE` reads the file again when it changes and on SIGHUP, and refuses a
    /// token past its `expires`: a token taken away or run out stops working without a restart.
    @Suite(.timeLimit(.minutes(2))) struct ServeAuthFileTests {
        static let both = #"{"apiKeys":["k"],"tokens":{"token-ana":"ana","token-ben":"ben"}}"#

        /// The status and user `GET /v1/session` answers for a token.
        static func session(_ server: ServedCLI, token: String) async throws -> (status: Int, body: String) {
            let port = server.port
            let answer = try await onNewThread {
                let connection = try RawHTTPConnection(port: port)
                defer { connection.close() }
                try connection.send(
                    "GET /v1/session HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: k\r\nAuthorization: Bearer \(token)\r\n"
                        + "Connection: close\r\n\r\n")
                return try connection.readResponse()
            }
            return (answer.status, String(decoding: answer.body, as: UTF8.self))
        }

        /// Asks until the answer's status is `status` (the file is looked at once a second), for at most 10 s.
        static func eventually(_ status: Int, _ server: ServedCLI, token: String) async throws -> (status: Int, body: String) {
            let deadline = ContinuousClock.now + .seconds(10)
            var answer = try await session(server, token: token)
            while answer.status != status && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
                answer = try await session(server, token: token)
            }
            return answer
        }

        @Test func aTokenTakenOutOfTheFileStopsWorkingWithoutARestart() async throws {
            let folder = TemporaryFolder()
            let server = try await ServedCLI.start([], authJSON: Self.both, in: folder)
            #expect(try await Self.session(server, token: "token-ben") == (200, #"{"user":"ben"}"#))
            try ServedCLI.writeAuthFile(in: folder, json: #"{"apiKeys":["k"],"tokens":{"token-ana":"ana"}}"#)
            #expect(
                try await Self.eventually(401, server, token: "token-ben") == (
                    401,
                    #"{"message":"the bearer token is not known","statusCode":401}"#
                ))
            #expect(try await Self.session(server, token: "token-ana").status == 200)
            // A malformed save keeps what is in force, and says so.
            try ServedCLI.writeAuthFile(in: folder, json: #"{"apiKeys":["k"],"tokens":{"token-ana":"#)
            server.child.signal(SIGHUP)
            let deadline = ContinuousClock.now + .seconds(10)
            while !server.log.contains("not read again") && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            #expect(server.log.contains("the credentials before stay in force"))
            #expect(try await Self.session(server, token: "token-ana").status == 200)
            #expect(try await Self.session(server, token: "token-ben").status == 401)
            #expect(server.child.isRunning)
            await server.stop()
        }

        @Test func sighupReadsTheFileAtOnce() async throws {
            let folder = TemporaryFolder()
            let server = try await ServedCLI.start([], authJSON: #"{"apiKeys":["k"],"tokens":{"token-ana":"ana"}}"#, in: folder)
            #expect(try await Self.session(server, token: "token-ben").status == 401)
            try ServedCLI.writeAuthFile(in: folder, json: Self.both)
            server.child.signal(SIGHUP)
            #expect(try await Self.eventually(200, server, token: "token-ben") == (200, #"{"user":"ben"}"#))
            #expect(server.log.contains("auth: read"))
            await server.stop()
        }

        @Test func aTokenPastItsExpiryIsRefused() async throws {
            let past = Date.now.addingTimeInterval(-60).formatted(.iso8601)
            let future = Date.now.addingTimeInterval(3_600).formatted(.iso8601)
            let server = try await ServedCLI.start(
                [],
                authJSON: """
                    {"apiKeys":["k"],"tokens":{"old":{"user":"ana","expires":"\(past)"},"new":{"user":"ana","expires":"\(future)"}}}
                    """)
            #expect(try await Self.session(server, token: "old") == (401, #"{"message":"the bearer token has expired","statusCode":401}"#))
            #expect(try await Self.session(server, token: "new") == (200, #"{"user":"ana"}"#))
            await server.stop()
        }

        @Test func aMalformedFileAtStartIsRefusedInWords() async throws {
            let folder = TemporaryFolder()
            let path = try ServedCLI.writeAuthFile(in: folder, json: #"{"apiKeys":["k"],"tokens":{"t":{"user":"ana","expires":"soon"}}}"#)
            let child = try ChildProcess(
                "abrova", ["serve", "--port", "0", "--database", folder.path("x.sqlite"), "--auth", path],
                logPath: folder.path("serve.log"))
            #expect(await child.waitUntilExit(limit: .seconds(30)) != 0)
            #expect(child.log.contains("ISO 8601"), "\(child.log)")
        }
    }
#endif
