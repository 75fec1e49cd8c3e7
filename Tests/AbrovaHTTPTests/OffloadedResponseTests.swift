import AbrovaLocking
import AbrovaTestSupport
import Dispatch
import Foundation
import Testing

@testable import AbrovaHTTP

/// Offloaded answers: work that waits runs on a worker thread, so the thread that read the
/// request serves its other connections meanwhile; the request keeps its slot until the work ends.
@Suite struct OffloadedResponseTests {
    /// A server of one connection thread whose `/slow` requests are offloaded to work that counts
    /// itself in `started` and waits for `gate`; any other path is answered at once with its path.
    static func server(
        started: Tally, gate: DispatchSemaphore, threadCount: Int = 1, workerCount: Int = 4, maximumConcurrentRequests: Int = 64
    ) throws -> HTTPServer {
        let configuration = HTTPServerConfiguration(
            threadCount: threadCount, workerCount: workerCount, maximumConcurrentRequests: maximumConcurrentRequests,
            loopbackOnly: true)
        return try HTTPServer(configuration: configuration) { request in
            guard request.path.hasPrefix("/slow") else { return HTTPResponse(status: 200, body: Array(request.path.utf8)) }
            return .offloaded {
                started.add()
                gate.wait()
                return HTTPResponse(status: 200, body: Array("done \(request.path)".utf8))
            }
        }
    }

    static func send(_ path: String, on connection: RawHTTPConnection) throws {
        try connection.send("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    }

    @Test func workThatWaitsLeavesTheConnectionThreadToOtherConnections() async throws {
        let started = Tally()
        let gate = DispatchSemaphore(value: 0)
        let server = try Self.server(started: started, gate: gate)
        let port = server.port
        let (quick, slow, next) = try await onNewThread {
            () -> (RawHTTPConnection.Response, RawHTTPConnection.Response, RawHTTPConnection.Response) in
            let waiting = try RawHTTPConnection(port: port)
            try Self.send("/slow", on: waiting)
            try waitBlocking { started.count == 1 }
            // The only connection thread is free: answered while the work waits.
            let other = try RawHTTPConnection(port: port, receiveTimeoutSeconds: 5)
            try Self.send("/now", on: other)
            let quick = try other.readResponse()
            gate.signal()
            let slow = try waiting.readResponse()
            try Self.send("/next", on: waiting) // kept alive after the offloaded answer
            return (quick, slow, try waiting.readResponse())
        }
        #expect(quick.status == 200 && quick.body == Array("/now".utf8))
        #expect(slow.status == 200 && slow.body == Array("done /slow".utf8))
        #expect(next.status == 200 && next.body == Array("/next".utf8))
        try await waitUntil { server.liveRequestStates == 0 }
        #expect(server.requestsInFlight == 0)
        #expect(server.deferredRequests == 0)
    }

    @Test func anOffloadedRequestKeepsItsSlotUntilItsWorkEnds() async throws {
        let started = Tally()
        let gate = DispatchSemaphore(value: 0)
        let server = try Self.server(started: started, gate: gate, maximumConcurrentRequests: 1)
        let port = server.port
        let (inFlight, refused, slow, after) = try await onNewThread {
            () -> (Int, RawHTTPConnection.Response, RawHTTPConnection.Response, RawHTTPConnection.Response) in
            let waiting = try RawHTTPConnection(port: port)
            try Self.send("/slow", on: waiting)
            try waitBlocking { started.count == 1 }
            let inFlight = server.requestsInFlight
            let other = try RawHTTPConnection(port: port, receiveTimeoutSeconds: 5)
            try Self.send("/now", on: other)
            let refused = try other.readResponse()
            gate.signal()
            let slow = try waiting.readResponse()
            try waitBlocking { server.requestsInFlight == 0 }
            try Self.send("/now", on: waiting)
            return (inFlight, refused, slow, try waiting.readResponse())
        }
        #expect(inFlight == 1)
        #expect(refused.status == 429)
        #expect(slow.status == 200)
        #expect(after.status == 200)
    }

    @Test func shutdownWaitsForWorkRunningAndSendsItsAnswer() async throws {
        let started = Tally()
        let gate = DispatchSemaphore(value: 0)
        let server = try Self.server(started: started, gate: gate)
        let port = server.port
        let (answer, took) = try await onNewThread { () -> (RawHTTPConnection.Response, Duration) in
            let waiting = try RawHTTPConnection(port: port)
            try Self.send("/slow", on: waiting)
            try waitBlocking { started.count == 1 }
            let begun = ContinuousClock.now
            let stopped = DispatchSemaphore(value: 0)
            Thread {
                server.shutdown(timeout: .seconds(30))
                stopped.signal()
            }.start()
            Thread.sleep(forTimeInterval: 0.3)
            gate.signal()
            let answer = try waiting.readResponse()
            stopped.wait()
            return (answer, ContinuousClock.now - begun)
        }
        // Answered by its work, not 503: a push that commits is answered as committed.
        #expect(answer.status == 200 && answer.body == Array("done /slow".utf8))
        #expect(took < .seconds(15), "shutdown took \(took)")
        #expect(server.liveRequestStates == 0)
        #expect(server.requestsInFlight == 0)
    }

    @Test func workPastTheShutdownTimeoutIsAnswered503() async throws {
        let started = Tally()
        let gate = DispatchSemaphore(value: 0)
        let server = try Self.server(started: started, gate: gate)
        let port = server.port
        let answer = try await onNewThread { () -> RawHTTPConnection.Response in
            let waiting = try RawHTTPConnection(port: port)
            try Self.send("/slow", on: waiting)
            try waitBlocking { started.count == 1 }
            server.shutdown(timeout: .milliseconds(200))
            return try waiting.readResponse()
        }
        gate.signal() // the work ends after the server: its answer goes nowhere
        #expect(answer.status == 503)
    }

    #if os(Linux)
        /// A client may end its side of the connection once its request is sent (the server sees
        /// the same sign as a client gone): it still gets its answer.
        @Test func aClientThatEndsItsSideAfterItsRequestGetsItsAnswer() async throws {
            let started = Tally()
            let gate = DispatchSemaphore(value: 0)
            let server = try Self.server(started: started, gate: gate, workerCount: 1)
            let port = server.port
            let answer = try await onNewThread { () -> RawHTTPConnection.Response in
                let connection = try RawHTTPConnection(port: port, receiveTimeoutSeconds: 10)
                try connection.send("GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                connection.finishSending()
                try waitBlocking { started.count == 1 }
                Thread.sleep(forTimeInterval: 0.6) // the server looks at waiting connections four times a second
                gate.signal()
                return try connection.readResponse()
            }
            #expect(answer.status == 200 && answer.body == Array("done /slow".utf8))
            try await waitUntil { server.liveRequestStates == 0 }
        }

        /// Clients that send and leave cannot pile up work: each request keeps its slot until its
        /// work ends, so no more wait than `maximumConcurrentRequests`, and the rest are refused.
        @Test func clientsThatSendAndLeaveCannotPileUpWork() async throws {
            let started = Tally()
            let gate = DispatchSemaphore(value: 0)
            let server = try Self.server(started: started, gate: gate, workerCount: 1, maximumConcurrentRequests: 3)
            let port = server.port
            let (most, answer) = try await onNewThread { () -> (Int, RawHTTPConnection.Response) in
                let first = try RawHTTPConnection(port: port)
                try Self.send("/slow-first", on: first)
                try waitBlocking { started.count == 1 }
                var most = 0
                for _ in 0..<20 {
                    let leaving = try RawHTTPConnection(port: port)
                    try Self.send("/slow-leaving", on: leaving)
                    Thread.sleep(forTimeInterval: 0.01)
                    leaving.reset()
                    most = max(most, server.requestsInFlight)
                }
                Thread.sleep(forTimeInterval: 0.5)
                most = max(most, server.requestsInFlight)
                for _ in 0..<3 { gate.signal() }
                return (most, try first.readResponse())
            }
            #expect(most <= 3)
            #expect(answer.status == 200)
            try await waitUntil { server.requestsInFlight == 0 }
            #expect(started.count <= 3)
            try await waitUntil { server.liveRequestStates == 0 }
        }
    #endif

    @Test func workThatMakesADeferredResponseIsAnswered500() async throws {
        let server = try HTTPServer(configuration: HTTPServerConfiguration(loopbackOnly: true)) { _ in
            .offloaded { .deferred { $0.send(HTTPResponse(status: 200)) } }
        }
        let port = server.port
        let answer = try await onNewThread {
            let connection = try RawHTTPConnection(port: port)
            try connection.send("GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            return try connection.readResponse()
        }
        #expect(answer.status == 500)
        try await waitUntil { server.liveRequestStates == 0 }
        #expect(server.requestsInFlight == 0)
    }

    @Test func aWorkerCountOutOfRangeIsRefused() {
        #expect(throws: HTTPServerError.self) {
            try HTTPServer(configuration: HTTPServerConfiguration(workerCount: 0, loopbackOnly: true)) { _ in HTTPResponse(status: 200) }
        }
    }
}
