import AbrovaLocking
import AbrovaTestSupport
import Foundation
import Testing

@testable import AbrovaHTTP

/// Deferred answers (long polls): a request waits with its connection suspended, holding no
/// thread and no slot, until its responder sends, from any thread.
@Suite struct DeferredResponseTests {
    /// A server whose `/wait` requests are deferred, their responders kept in `responders` in the
    /// order they came; any other path is answered at once with its path.
    static func server(
        _ responders: Responders,
        configuration: HTTPServerConfiguration = HTTPServerConfiguration(loopbackOnly: true)
    ) throws -> HTTPServer {
        try HTTPServer(configuration: configuration) { request in
            guard request.path == "/wait" else { return HTTPResponse(status: 200, body: Array(request.path.utf8)) }
            return .deferred { responders.add($0) }
        }
    }

    /// `count` connections, each with a request for `/wait` sent.
    static func waiting(_ count: Int, on port: UInt16) throws -> [RawHTTPConnection] {
        try (0..<count).map { _ in
            let connection = try RawHTTPConnection(port: port)
            try connection.send("GET /wait HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            return connection
        }
    }

    @Test func anAnswerSentLaterFromAnotherThreadArrivesAndTheConnectionIsKeptAlive() async throws {
        let responders = Responders()
        let server = try Self.server(responders)
        let port = server.port
        let (inFlight, answer, next) = try await onNewThread {
            () -> (Int, RawHTTPConnection.Response, RawHTTPConnection.Response) in
            let connection = try Self.waiting(1, on: port)[0]
            try waitBlocking { server.deferredRequests == 1 }
            let inFlight = server.requestsInFlight
            Thread {
                Thread.sleep(forTimeInterval: 0.2)
                responders.all[0].send(.json(status: 200, Array(#"{"changed":true}"#.utf8)))
            }.start()
            let answer = try connection.readResponse()
            try connection.send("GET /next HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            return (inFlight, answer, try connection.readResponse())
        }
        #expect(inFlight == 0)
        #expect(answer.status == 200)
        #expect(answer.headers["content-type"] == "application/json")
        #expect(answer.body == Array(#"{"changed":true}"#.utf8))
        #expect(answer.headers["connection"]?.lowercased() != "close")
        #expect(next.status == 200)
        #expect(next.body == Array("/next".utf8))
        #expect(server.deferredRequests == 0)
        try await waitUntil { server.liveRequestStates == 0 }
    }

    @Test func waitingRequestsHoldNeitherTheThreadNorASlot() async throws {
        let responders = Responders()
        let server = try Self.server(
            responders, configuration: HTTPServerConfiguration(threadCount: 1, maximumConcurrentRequests: 2, loopbackOnly: true))
        let port = server.port
        let (inFlight, statuses, answers) = try await onNewThread { () -> (Int, [Int], [RawHTTPConnection.Response]) in
            let waiting = try Self.waiting(50, on: port)
            try waitBlocking { server.deferredRequests == 50 }
            let inFlight = server.requestsInFlight
            // Held threads would leave these unanswered past the short receive timeout; held slots, 429.
            let statuses = try (0..<5).map { index in
                let connection = try RawHTTPConnection(port: port, receiveTimeoutSeconds: 5)
                try connection.send("GET /now\(index) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                return try connection.readResponse().status
            }
            for (index, responder) in responders.all.enumerated() {
                responder.send(HTTPResponse(status: 200, body: Array("answer \(index)".utf8)))
            }
            return (inFlight, statuses, try waiting.map { try $0.readResponse() })
        }
        #expect(inFlight == 0)
        #expect(statuses == [Int](repeating: 200, count: 5))
        #expect(answers.allSatisfy { $0.status == 200 })
        #expect(Set(answers.map { String(decoding: $0.body, as: UTF8.self) }) == Set((0..<50).map { "answer \($0)" }))
        try await waitUntil { server.liveRequestStates == 0 }
        #expect(server.deferredRequests == 0)
        #expect(server.requestsInFlight == 0)
    }

    @Test func anAnswerSentInsideStartIsSent() async throws {
        let server = try HTTPServer(configuration: HTTPServerConfiguration(loopbackOnly: true)) { request in
            guard request.path == "/wait" else { return HTTPResponse(status: 200, body: Array(request.path.utf8)) }
            return .deferred { responder in responder.send(HTTPResponse(status: 201, body: Array("at once".utf8))) }
        }
        let port = server.port
        let (first, second) = try await onNewThread { () -> (RawHTTPConnection.Response, RawHTTPConnection.Response) in
            let connection = try RawHTTPConnection(port: port)
            try connection.send("GET /wait HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            let first = try connection.readResponse()
            try connection.send("GET /wait HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            return (first, try connection.readResponse())
        }
        #expect(first.status == 201)
        #expect(first.body == Array("at once".utf8))
        #expect(second.status == 201)
        try await waitUntil { server.liveRequestStates == 0 }
        #expect(server.deferredRequests == 0)
    }

    @Test func onlyTheFirstSendCounts() async throws {
        let responders = Responders()
        let server = try Self.server(responders)
        let port = server.port
        let (answer, next) = try await onNewThread { () -> (RawHTTPConnection.Response, RawHTTPConnection.Response) in
            let connection = try Self.waiting(1, on: port)[0]
            try waitBlocking { server.deferredRequests == 1 }
            let responder = responders.all[0]
            responder.send(HTTPResponse(status: 200, body: Array("first".utf8)))
            // Racing sends after the first, then one after the request is over: none reaches the wire.
            DispatchQueue.concurrentPerform(iterations: 8) { index in
                responder.send(HTTPResponse(status: 500, body: Array("again \(index)".utf8)))
            }
            let answer = try connection.readResponse()
            responder.send(HTTPResponse(status: 500, body: Array("late".utf8)))
            try connection.send("GET /next HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            return (answer, try connection.readResponse())
        }
        #expect(answer.status == 200)
        #expect(answer.body == Array("first".utf8))
        #expect(next.status == 200)
        #expect(next.body == Array("/next".utf8))
        try await waitUntil { server.liveRequestStates == 0 }
    }

    @Test func aResponderReleasedWithoutSendingAnswers500() async throws {
        let server = try HTTPServer(configuration: HTTPServerConfiguration(loopbackOnly: true)) { _ in
            .deferred { _ in }
        }
        let port = server.port
        let answer = try await onNewThread {
            let connection = try RawHTTPConnection(port: port)
            try connection.send("GET /wait HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            return try connection.readResponse()
        }
        #expect(answer.status == 500)
        #expect(String(decoding: answer.body, as: UTF8.self).contains("never answered"))
        try await waitUntil { server.liveRequestStates == 0 }
    }

    @Test func shutdownAnswersWaitingRequests503AtOnce() async throws {
        let responders = Responders()
        let server = try Self.server(responders)
        let port = server.port
        let (took, answers) = try await onNewThread { () -> (Duration, [RawHTTPConnection.Response]) in
            let waiting = try Self.waiting(3, on: port)
            try waitBlocking { server.deferredRequests == 3 }
            let started = ContinuousClock.now
            server.shutdown(timeout: .seconds(30))
            return (ContinuousClock.now - started, try waiting.map { try $0.readResponse() })
        }
        // Waiting for them as for requests in flight would take the whole timeout.
        #expect(took < .seconds(15), "shutdown took \(took)")
        #expect(answers.map(\.status) == [503, 503, 503])
        #expect(
            answers.allSatisfy {
                String(decoding: $0.body, as: UTF8.self) == #"{"message":"the server is shutting down","statusCode":503}"#
            })
        for responder in responders.all { responder.send(HTTPResponse(status: 200)) } // after shutdown: nothing
        #expect(server.liveRequestStates == 0)
        #expect(server.deferredRequests == 0)
        #expect(server.requestsInFlight == 0)
    }

    /// A server whose `/wait` requests are deferred, each responder kept in `responders` and its
    /// client's hang-up counted in `gone`.
    static func watchingServer(
        _ responders: Responders, _ gone: Tally, minimumBytesPerSecond: Int = 1_024
    ) throws -> HTTPServer {
        try HTTPServer(configuration: HTTPServerConfiguration(loopbackOnly: true, minimumBytesPerSecond: minimumBytesPerSecond)) {
            request in
            guard request.path == "/wait" else { return HTTPResponse(status: 200, body: Array(request.path.utf8)) }
            return .deferred { responder in
                responders.add(responder)
                responder.onClientGone { gone.add() }
            }
        }
    }

    /// How a waiting client leaves.
    enum HangUp: CaseIterable, Sendable {
        case close, reset, halfClose

        func perform(on connection: RawHTTPConnection) {
            switch self {
            case .close: connection.close()
            case .reset: connection.reset()
            case .halfClose: connection.finishSending()
            }
        }
    }

    // Pacing on and off: the watch for hang-ups does not depend on it.
    @Test(arguments: HangUp.allCases, [0, 1_024])
    func aClientThatHangsUpWhileWaitingIsNoticedAndLeavesNothingBehind(hangUp: HangUp, minimumBytesPerSecond: Int) async throws {
        let responders = Responders()
        let gone = Tally()
        let server = try Self.watchingServer(responders, gone, minimumBytesPerSecond: minimumBytesPerSecond)
        let port = server.port
        let (noticedAfter, closedByTheServer) = try await onNewThread { () -> (Duration, Bool) in
            let connections = try Self.waiting(3, on: port)
            try waitBlocking { server.deferredRequests == 3 }
            let left = ContinuousClock.now
            for connection in connections { hangUp.perform(on: connection) }
            try waitBlocking { gone.count == 3 }
            let noticedAfter = ContinuousClock.now - left
            // A half-closed client still reads: it sees the server close, with nothing sent.
            guard hangUp == .halfClose else { return (noticedAfter, true) }
            return (noticedAfter, try connections.allSatisfy { try $0.readUntilClosed().isEmpty })
        }
        #expect(noticedAfter < .seconds(2), "noticed after \(noticedAfter)")
        #expect(closedByTheServer)
        #expect(server.deferredRequests == 0)
        try await waitUntil(timeout: .seconds(5)) { server.liveRequestStates == 0 }
        // Too late: nothing is sent, nothing is left, and the server goes on.
        for responder in responders.all { responder.send(HTTPResponse(status: 200, body: Array("late".utf8))) }
        #expect(gone.count == 3)
        #expect(server.liveRequestStates == 0 && server.requestsInFlight == 0)
        let after = try await onNewThread {
            let connection = try RawHTTPConnection(port: port)
            try connection.send("GET /after HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            return try connection.readResponse().status
        }
        #expect(after == 200)
    }

    @Test func aGoneHandlerGivenAfterTheClientLeftRunsAtOnceAndOnlyOnce() async throws {
        let responders = Responders()
        let server = try Self.server(responders)
        let port = server.port
        try await onNewThread { _ = try Self.waiting(1, on: port) } // closed when released
        try await waitUntil(timeout: .seconds(5)) { responders.all.count == 1 && server.deferredRequests == 0 }
        let calls = Tally()
        responders.all[0].onClientGone { calls.add() }
        #expect(calls.count == 1)
        responders.all[0].onClientGone { calls.add() }
        #expect(calls.count == 1)
        try await waitUntil(timeout: .seconds(5)) { server.liveRequestStates == 0 }
    }

    @Test func aClientThatKeepsWaitingOrLeavesAfterItsAnswerIsNotReported() async throws {
        let responders = Responders()
        let gone = Tally()
        let server = try Self.watchingServer(responders, gone)
        let port = server.port
        let (waiting, answer, next) = try await onNewThread { () -> (Int, RawHTTPConnection.Response, RawHTTPConnection.Response) in
            let connection = try Self.waiting(1, on: port)[0]
            try waitBlocking { server.deferredRequests == 1 }
            Thread.sleep(forTimeInterval: 1.5) // six looks of the pacer
            let waiting = server.deferredRequests
            responders.all[0].send(HTTPResponse(status: 200, body: Array("waited".utf8)))
            let answer = try connection.readResponse()
            try connection.send("GET /next HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            let next = try connection.readResponse()
            connection.close() // answered: an ordinary close of a kept-alive connection
            Thread.sleep(forTimeInterval: 1)
            return (waiting, answer, next)
        }
        #expect(waiting == 1)
        #expect(answer.body == Array("waited".utf8))
        #expect(next.body == Array("/next".utf8))
        #expect(gone.count == 0)
        try await waitUntil { server.liveRequestStates == 0 }
    }

    @Test func shutdownWithClientsGoneOrLeavingIsClean() async throws {
        let responders = Responders()
        let gone = Tally()
        let server = try Self.watchingServer(responders, gone)
        let port = server.port
        // Gone and noticed before the shutdown.
        try await onNewThread { _ = try Self.waiting(3, on: port) } // each closed when released
        try await waitUntil(timeout: .seconds(5)) { gone.count == 3 }
        // Gone just before it, noticed or not: the shutdown and the pacer race.
        let answers = try await onNewThread { () -> [Int] in
            _ = try Self.waiting(3, on: port)
            let kept = try Self.waiting(2, on: port)
            try waitBlocking { responders.all.count == 8 }
            server.shutdown()
            return try kept.map { try $0.readResponse().status }
        }
        #expect(answers == [503, 503])
        #expect(server.liveRequestStates == 0)
        #expect(server.deferredRequests == 0)
        let goneAtShutdown = gone.count
        for responder in responders.all { responder.send(HTTPResponse(status: 200)) } // after shutdown: nothing
        #expect((3...6).contains(goneAtShutdown))
        #expect(gone.count == goneAtShutdown)
    }

    @Test func neitherTheIdleTimeoutNorTheMinimumRateClosesAWaitingRequest() async throws {
        let responders = Responders()
        let server = try Self.server(
            responders,
            configuration: HTTPServerConfiguration(
                threadCount: 2, connectionTimeoutSeconds: 1, loopbackOnly: true, minimumBytesPerSecond: 100_000, slowClientGraceSeconds: 1))
        let port = server.port
        let (openWhileWaiting, answer, next, closedWhenIdle) = try await onNewThread {
            () -> (Bool, RawHTTPConnection.Response, RawHTTPConnection.Response, Bool) in
            let connection = try Self.waiting(1, on: port)[0]
            try waitBlocking { server.deferredRequests == 1 }
            // Three seconds: past the timeout, and past the grace at a rate nothing meets.
            Thread.sleep(forTimeInterval: 3)
            let openWhileWaiting = !connection.isClosedByThePeer
            responders.all[0].send(HTTPResponse(status: 200, body: Array("waited".utf8)))
            let answer = try connection.readResponse()
            try connection.send("GET /next HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            let next = try connection.readResponse()
            // After the answer the idle timeout applies again.
            Thread.sleep(forTimeInterval: 2.5)
            return (openWhileWaiting, answer, next, connection.isClosedByThePeer)
        }
        #expect(openWhileWaiting)
        #expect(answer.status == 200)
        #expect(answer.body == Array("waited".utf8))
        #expect(next.body == Array("/next".utf8))
        #expect(server.slowConnectionsClosed == 0)
        #expect(closedWhenIdle)
    }
}

/// Polls `condition` on the calling thread (one of the test's own, see `onNewThread`) until it
/// holds, failing after 30 seconds.
func waitBlocking(_ condition: () -> Bool) throws {
    let deadline = ContinuousClock.now.advanced(by: .seconds(30))
    while !condition() {
        guard ContinuousClock.now < deadline else { throw TestFailure(description: "condition not met within 30 seconds") }
        Thread.sleep(forTimeInterval: 0.005)
    }
}

/// The responders of deferred requests, in the order their requests came.
final class Responders: Sendable {
    private let kept = Protected<[HTTPResponder]>([])
    func add(_ responder: HTTPResponder) { kept.withLock { $0.append(responder) } }
    var all: [HTTPResponder] { kept.withLock { $0 } }
}

/// A count that any thread adds to.
final class Tally: Sendable {
    private let value = Protected<Int>(0)
    func add() { value.withLock { $0 += 1 } }
    var count: Int { value.value }
}
