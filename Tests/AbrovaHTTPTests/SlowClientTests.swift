import AbrovaHTTP
import AbrovaTestSupport
import Dispatch
import Foundation
import Testing

/// Slow and silent clients (a slowloris attack) must not hold the server: they cost a connection
/// each, not a thread, and are closed once idle past the timeout.
@Suite struct SlowClientTests {
    @Test func clientsThatSendHalfARequestAndStallDoNotStopOthersAndAreClosed() async throws {
        let server = try HTTPServer(
            configuration: HTTPServerConfiguration(
                threadCount: 2, connectionTimeoutSeconds: 1, loopbackOnly: true)
        ) { _ in
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

    @Test func stalledUploadsHoldNoRequestSlotAndHealthIsAnsweredWhateverTheLoad() async throws {
        let gate = DispatchSemaphore(value: 0)
        let entered = DispatchSemaphore(value: 0)
        // No minimum rate: the stalled uploads must outlive a full run's starved test threads.
        let server = try HTTPServer(
            configuration: HTTPServerConfiguration(
                threadCount: 4, maximumConcurrentRequests: 2, loopbackOnly: true, minimumBytesPerSecond: 0)
        ) { request in
            if request.path == "/slow" {
                entered.signal()
                _ = gate.wait(timeout: .now() + 20)
            }
            return HTTPResponse(status: 200, body: Array("ok".utf8))
        }
        let port = server.port
        let statuses = try await onNewThread { () -> [Int] in
            // Eight clients declare a body and stall in it: before, each held a slot from its headers on.
            let stalled = try (0..<8).map { _ in
                let connection = try RawHTTPConnection(port: port)
                try connection.send("POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\nabc")
                return connection
            }
            Thread.sleep(forTimeInterval: 0.2)
            func get(_ path: String) throws -> Int {
                let connection = try RawHTTPConnection(port: port)
                try connection.send("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                return try connection.readResponse().status
            }
            let despiteUploads = try get("/other")
            // Two slow requests take both slots: another request waits its turn (429), health does not.
            // One after the other: a thread blocked in a handler accepts no connection, so the
            // second lands on another thread (two sent at once may share one, and the second
            // would wait behind the first instead of taking its slot).
            let slow = (0..<2).map { _ in
                let connection = try? RawHTTPConnection(port: port)
                try? connection?.send("GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                _ = entered.wait(timeout: .now() + 20)
                return connection
            }
            let busy = try get("/other")
            let health = try get("/v1/health")
            gate.signal()
            gate.signal()
            _ = slow.map { try? $0?.readResponse() }
            _ = stalled.count
            return [despiteUploads, busy, health]
        }
        #expect(statuses == [200, 429, 200])
        server.shutdown()
    }

    @Test func oneAddressHoldsNoMoreConnectionsThanItsLimit() async throws {
        let server = try HTTPServer(
            configuration: HTTPServerConfiguration(
                threadCount: 2, loopbackOnly: true, maximumConnectionsPerAddress: 3)
        ) { _ in
            HTTPResponse(status: 200, body: Array("ok".utf8))
        }
        let port = server.port
        let (kept, refused) = try await onNewThread { () -> (Int, Bool) in
            // Three connections, each surely accepted (answered once, kept open).
            let idle = try (0..<3).map { _ in
                let connection = try RawHTTPConnection(port: port)
                try connection.send("GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                _ = try connection.readResponse()
                return connection
            }
            let extra = try RawHTTPConnection(port: port)
            let refused =
                (try? { () throws -> Int in
                    try extra.send("GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                    return try extra.readResponse().status
                }()) == nil
            // Once one closes, a new one is served.
            try idle[0].send("GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            let first = try idle[0].readResponse().status
            // The server counts the closed one out soon after; a new one is served from then on.
            var again = 0
            for _ in 0..<100 where again == 0 {
                Thread.sleep(forTimeInterval: 0.05)
                again =
                    (try? { () throws -> Int in
                        let connection = try RawHTTPConnection(port: port)
                        try connection.send("GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                        return try connection.readResponse().status
                    }()) ?? 0
            }
            return (first + again, refused)
        }
        #expect(refused, "a fourth connection of one address was served")
        #expect(kept == 400)
        server.shutdown()
    }

    @Test func theServerHoldsNoMoreConnectionsThanItsLimit() async throws {
        let server = try HTTPServer(
            configuration: HTTPServerConfiguration(threadCount: 1, loopbackOnly: true, maximumConnections: 2)
        ) { _ in
            HTTPResponse(status: 200, body: Array("ok".utf8))
        }
        let port = server.port
        let (kept, refused) = try await onNewThread { () -> ([Int], Bool) in
            let idle = try (0..<2).map { _ in try RawHTTPConnection(port: port) }
            let kept = try idle.map { connection in
                try connection.send("GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                return try connection.readResponse().status
            }
            let extra = try RawHTTPConnection(port: port, receiveTimeoutSeconds: 5)
            let refused =
                (try? { () throws -> Int in
                    try extra.send("GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                    return try extra.readResponse().status
                }()) == nil
            return (kept, refused)
        }
        #expect(kept == [200, 200])
        #expect(refused, "a third connection was served")
        server.shutdown()
    }

    @Test func aClientThatTricklesItsBodyIsClosedWhenItStallsPastTheTimeout() async throws {
        let server = try HTTPServer(
            configuration: HTTPServerConfiguration(
                threadCount: 2, connectionTimeoutSeconds: 1, loopbackOnly: true)
        ) { _ in
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

#if os(Linux)
    /// The minimum rate: a client that trickles a byte before each idle timeout, in its head, its body
    /// or taking its answer, is closed once the grace has passed; one that moves steadily above the
    /// minimum is served however long it takes. (Linux only: the pacer reads TCP_INFO.)
    @Suite struct MinimumRateTests {
        static func server(maximumConcurrentRequests: Int = 64, minimumBytesPerSecond: Int = 200) throws -> HTTPServer {
            try HTTPServer(
                configuration: HTTPServerConfiguration(
                    threadCount: 2, maximumConcurrentRequests: maximumConcurrentRequests, connectionTimeoutSeconds: 30, loopbackOnly: true,
                    minimumBytesPerSecond: minimumBytesPerSecond, slowClientGraceSeconds: 1)
            ) { request in
                HTTPResponse(status: 200, body: request.path == "/big" ? [UInt8](repeating: 0x61, count: 16 << 20) : Array("ok".utf8))
            }
        }

        /// Sends `text` a piece at a time, `every` apart, until the server closes the connection or
        /// the text is sent; returns how long that took and whether it was closed.
        static func trickle(_ text: String, piece: Int, every interval: TimeInterval, on connection: RawHTTPConnection) -> (Duration, Bool)
        {
            let started = ContinuousClock.now
            let bytes = Array(text.utf8)
            var offset = 0
            while offset < bytes.count {
                if connection.isClosedByThePeer { return (ContinuousClock.now - started, true) }
                do { try connection.send(Array(bytes[offset..<min(offset + piece, bytes.count)])) } catch {
                    return (ContinuousClock.now - started, true)
                }
                offset += piece
                Thread.sleep(forTimeInterval: interval)
            }
            return (ContinuousClock.now - started, connection.isClosedByThePeer)
        }

        @Test func aClientThatTricklesItsHeadIsClosedAfterTheGrace() async throws {
            let server = try Self.server()
            let port = server.port
            // 5 bytes a second, against a minimum of 200: before, it kept its connection for as long
            // as it went on (each byte came well within the 30-second idle timeout).
            let (took, closed) = try await onNewThread {
                let connection = try RawHTTPConnection(port: port)
                return Self.trickle(
                    "GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + String(repeating: "a", count: 100) + "\r\n\r\n",
                    piece: 1, every: 0.2, on: connection)
            }
            #expect(closed, "still open after \(took)")
            #expect(took < .seconds(10))
            #expect(server.slowConnectionsClosed == 1)
            server.shutdown()
        }

        @Test func aClientThatTricklesItsBodyIsClosedAfterTheGrace() async throws {
            let server = try Self.server()
            let port = server.port
            let (took, closed) = try await onNewThread {
                let connection = try RawHTTPConnection(port: port)
                try connection.send("POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n")
                return Self.trickle(String(repeating: "b", count: 1000), piece: 4, every: 0.2, on: connection)
            }
            #expect(closed, "still open after \(took)")
            #expect(took < .seconds(10))
            server.shutdown()
        }

        @Test func aSteadyClientAboveTheMinimumIsServedHoweverLongItTakes() async throws {
            let server = try Self.server()
            let port = server.port
            let status = try await onNewThread { () -> Int in
                let connection = try RawHTTPConnection(port: port)
                // 2,000 bytes a second for 1.5 s, ten times the minimum, well past the grace.
                let (_, closed) = Self.trickle(
                    "POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2900\r\n\r\n"
                        + String(repeating: "c", count: 2900), piece: 100, every: 0.05, on: connection)
                return closed ? 0 : try connection.readResponse().status
            }
            #expect(status == 200)
            #expect(server.slowConnectionsClosed == 0)
            server.shutdown()
        }

        /// A handler that holds the server's only thread keeps other connections' requests unread:
        /// that is the server's slowness, not theirs, and they are not cut for it.
        @Test func aClientWaitingForABusyServerIsNotCut() async throws {
            let server = try HTTPServer(
                configuration: HTTPServerConfiguration(
                    threadCount: 1, connectionTimeoutSeconds: 30, loopbackOnly: true, minimumBytesPerSecond: 200, slowClientGraceSeconds: 1)
            ) { request in
                if request.path == "/busy" { Thread.sleep(forTimeInterval: 3) }
                return HTTPResponse(status: 200, body: Array("ok".utf8))
            }
            let port = server.port
            let statuses = try await onNewThread { () -> [Int] in
                // Both accepted while the thread is free; then one holds it, and the other's request
                // waits unread in the socket.
                let waiting = try RawHTTPConnection(port: port)
                let busy = try RawHTTPConnection(port: port)
                Thread.sleep(forTimeInterval: 0.3)
                try busy.send("GET /busy HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                Thread.sleep(forTimeInterval: 0.3)
                try waiting.send("GET /other HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                return [try busy.readResponse().status, try waiting.readResponse().status]
            }
            #expect(statuses == [200, 200])
            #expect(server.slowConnectionsClosed == 0)
            server.shutdown()
        }

        @Test func aClientThatDoesNotTakeItsAnswerIsClosedAndItsSlotFreed() async throws {
            // The average counts from the answer's start: the 4 KiB the reader's kernel takes at once
            // buy it two seconds at this minimum.
            let server = try Self.server(maximumConcurrentRequests: 1, minimumBytesPerSecond: 2_000)
            let port = server.port
            let (first, later, waited) = try await onNewThread { () -> (Int, Int, Duration) in
                // 16 MiB asked for, and a few kilobytes of it read: the answer holds the only slot.
                let reader = try RawHTTPConnection(port: port, receiveBufferBytes: 4_096)
                try reader.send("GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                Thread.sleep(forTimeInterval: 0.2)
                func get() throws -> Int {
                    let connection = try RawHTTPConnection(port: port)
                    try connection.send("GET /other HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                    return try connection.readResponse().status
                }
                let first = try get()
                let started = ContinuousClock.now
                var later = try get()
                while later != 200 && ContinuousClock.now - started < .seconds(15) {
                    Thread.sleep(forTimeInterval: 0.1)
                    later = try get()
                }
                return (first, later, ContinuousClock.now - started)
            }
            #expect(first == 429, "the big answer did not hold the slot")
            #expect(later == 200, "the slot was still held after \(waited)")
            #expect(server.slowConnectionsClosed == 1)
            server.shutdown()
        }
    }
#endif

/// Whether the server has ended the connection (an end or a reset), as opposed to answering or
/// keeping it open past the client's 20-second receive timeout.
private func isClosedByTheServer(_ connection: RawHTTPConnection) -> Bool {
    do {
        _ = try connection.readResponse()
        return false
    } catch let failure as RawHTTPConnection.Failure {
        return failure.isEndedByTheServer
    } catch {
        return false
    }
}
