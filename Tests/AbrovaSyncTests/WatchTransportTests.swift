import AbrovaCore
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

@testable import AbrovaSync

/// `GET /v1/watch` through the HTTP transport, on both HTTP clients, against a scripted server
/// that holds the watch open: its answers, its own timeout, and a cancelled watch closing its
/// connection.
@Suite struct WatchTransportTests {
    /// A health answer announcing a watch idle time of `idle` seconds.
    static func health(watchIdleSeconds idle: Int?) -> LongPollServer.Reply {
        let limits = ServerLimits(
            maximumChanges: 1_000, maximumPushBytes: 16 << 20, maximumPageSize: 1_000, maximumPageBytes: 8 << 20, watchIdleSeconds: idle)
        return .answer(status: 200, headers: ["Content-Type": "application/json"], body: HealthResponse(limits: limits).body)
    }

    static func transport(to server: LongPollServer, _ exchange: HTTPExchangeKind, timeout: Duration = .seconds(10)) -> HTTPTransport {
        HTTPTransport(serverURL: server.url, apiKey: "key", token: { "token" }, timeout: timeout, exchange: exchange)
    }

    @Test(arguments: HTTPExchangeKind.available)
    func aWatchSaysWhetherSomethingChangedAfterTheCursor(_ exchange: HTTPExchangeKind) async throws {
        let server = try LongPollServer { request in
            switch (request.path, request.query["cursor"]) {
            case ("/v1/health", _): Self.health(watchIdleSeconds: 1)
            case ("/v1/watch", "c 1+"?): .json(200, #"{"changed":true}"#)
            case ("/v1/watch", nil): .json(200, #"{"changed":false}"#)
            default: .json(400, #"{"message":"unexpected","statusCode":400}"#)
            }
        }
        defer { server.stop() }
        let transport = Self.transport(to: server, exchange)
        #expect(try await transport.watch(cursor: "c 1+"))
        #expect(try await transport.watch(cursor: nil) == false)
        let watches = server.requests.filter { $0.path == "/v1/watch" }
        #expect(
            watches.count == 2 && watches.allSatisfy { $0.headers["x-api-key"] == "key" && $0.headers["authorization"] == "Bearer token" })
        #expect(server.requests.filter { $0.path == "/v1/health" }.count == 1, "the idle time is asked once")
    }

    @Test(arguments: HTTPExchangeKind.available)
    func onlyTheServersOwn404SaysItHasNoWatchRoute(_ exchange: HTTPExchangeKind) async throws {
        let server = try LongPollServer { request in
            request.path == "/v1/health"
                ? Self.health(watchIdleSeconds: nil) : .json(404, #"{"message":"no route GET /v1/watch","statusCode":404}"#)
        }
        defer { server.stop() }
        let transport = Self.transport(to: server, exchange)
        await #expect(throws: TransportFailure.refused(reason: .notFound, message: "no route GET /v1/watch")) {
            try await transport.watch(cursor: nil)
        }
        server.answer { _ in .answer(status: 404, headers: ["Content-Type": "text/html"], body: Array("<h1>Not here</h1>".utf8)) }
        do {
            _ = try await transport.watch(cursor: nil)
            Issue.record("a proxy's 404 page was taken for an answer")
        } catch {
            guard case .unreachable = error else { return #expect(Bool(false), "a proxy's 404 page read as \(error)") }
        }
        server.answer { _ in .json(200, #"{"changed":true,"more":1}"#) }
        await #expect(throws: TransportFailure.self, "an answer that is not the protocol's") { try await transport.watch(cursor: nil) }
    }

    @Test(arguments: HTTPExchangeKind.available)
    func aWatchMayTakeTheServersIdleTimeWhateverTheRequestTimeout(_ exchange: HTTPExchangeKind) async throws {
        let server = try LongPollServer { request in request.path == "/v1/health" ? Self.health(watchIdleSeconds: 2) : .hold }
        defer { server.stop() }
        let transport = Self.transport(to: server, exchange, timeout: .seconds(1))
        let watch = Task { try await transport.watch(cursor: "c1") }
        #expect(await eventually(30) { server.held.count == 1 }) // a loaded run may start the request late
        try await Task.sleep(for: .milliseconds(2_500)) // past the request timeout, within the idle time and its margin
        let id = try #require(server.held.first?.id)
        #expect(server.release(id, with: .json(200, #"{"changed":false}"#)))
        #expect(try await watch.value == false)
    }

    @Test(arguments: HTTPExchangeKind.available)
    func cancellingAWatchClosesItsConnection(_ exchange: HTTPExchangeKind) async throws {
        let server = try LongPollServer { request in request.path == "/v1/health" ? Self.health(watchIdleSeconds: 25) : .hold }
        defer { server.stop() }
        let transport = Self.transport(to: server, exchange)
        let watch = Task { try await transport.watch(cursor: "c1") }
        #expect(await eventually(30) { server.held.count == 1 }) // a loaded run may start the request late
        let id = try #require(server.held.first?.id)
        let cancelled = ContinuousClock.now
        watch.cancel()
        await #expect(throws: TransportFailure.self) { try await watch.value }
        #expect(await eventually(15) { server.abandoned == [id] }, "the server never saw the watch's connection close")
        // Well within the watch's own timeout (35 s): the cancellation ended it, with room for a
        // loaded machine (libcurl notices at its next progress call, about once a second).
        #expect(ContinuousClock.now - cancelled < .seconds(15), "the watch ran to its timeout")
        // The transport goes on: the next request is served (on a new connection).
        server.answer { _ in .json(200, #"{"changed":true}"#) }
        #expect(try await transport.watch(cursor: "c1"))
    }
}
