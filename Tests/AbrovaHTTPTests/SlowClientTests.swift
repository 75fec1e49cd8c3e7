import AbrovaHTTP
import AbrovaTestSupport
import Foundation
import Testing

/// Slow and silent clients (a slowloris attack) must not hold the server: they cost a connection
/// each, not a thread, and are closed once idle past the timeout.
@Suite struct SlowClientTests {
    @Test func clientsThatSendHalfARequestAndStallDoNotStopOthersAndAreClosed() async throws {
        let server = try HTTPServer(configuration: HTTPServerConfiguration(
            threadCount: 2, connectionTimeoutSeconds: 1, loopbackOnly: true)) { _ in
            HTTPResponse(status: 200, body: Array("ok".utf8))
        }
        let port = server.port
        let (status, waited, closed) = try await onNewThread { () -> (Int, Duration, Int) in
            // Forty connections, each with half a request head and then nothing.
            let stalled = try (0..<40).map { _ in
                let connection = try RawHTTPConnection(port: port)
                try connection.send("POST /v1/push HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n")
                return connection
            }
            let started = ContinuousClock.now
            let connection = try RawHTTPConnection(port: port)
            try connection.send("GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            let response = try connection.readResponse()
            let waited = ContinuousClock.now - started
            // Past the idle timeout, the server has closed every stalled connection.
            Thread.sleep(forTimeInterval: 2.5)
            return (response.status, waited, stalled.filter(isClosedByTheServer).count)
        }
        #expect(status == 200)
        #expect(waited < .milliseconds(900), "a normal request waited \(waited) behind stalled ones")
        #expect(closed == 40)
        server.shutdown()
    }

    @Test func aClientThatTricklesItsBodyIsClosedWhenItStallsPastTheTimeout() async throws {
        let server = try HTTPServer(configuration: HTTPServerConfiguration(
            threadCount: 2, connectionTimeoutSeconds: 1, loopbackOnly: true)) { _ in
            HTTPResponse(status: 200, body: Array("ok".utf8))
        }
        let port = server.port
        let outcome = try await onNewThread { () -> String in
            let connection = try RawHTTPConnection(port: port)
            try connection.send("POST /v1/push HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n")
            // A byte every half second keeps it alive; then it stalls.
            for _ in 0..<4 {
                try connection.send("x")
                Thread.sleep(forTimeInterval: 0.5)
            }
            Thread.sleep(forTimeInterval: 2)
            return isClosedByTheServer(connection) ? "closed" : "still open"
        }
        #expect(outcome == "closed")
        server.shutdown()
    }
}

/// Whether the server has ended the connection (an end or a reset), as opposed to answering or
/// keeping it open past the client's 20-second receive timeout.
private func isClosedByTheServer(_ connection: RawHTTPConnection) -> Bool {
    do {
        _ = try connection.readResponse()
        return false
    } catch let failure as RawHTTPConnection.Failure {
        return failure.description == "connection closed by the server" || failure.description == "recv: errno \(ECONNRESET)"
    } catch {
        return false
    }
}
