import AbrovaCore
import AbrovaHTTP
import AbrovaLocking
@_spi(Testing) import AbrovaServer
import AbrovaSync
import AbrovaTestSupport
import AbrovaWire
import Foundation

/// A value shared between test tasks and the code under test (server threads, URLSession's queue).
final class Locked<Value: Sendable>: Sendable {
    private let storage: Protected<Value>
    init(_ value: Value) { storage = Protected(value) }
    var value: Value { storage.withLock { $0 } }
    func update<Result: Sendable>(_ body: (inout Value) -> Result) -> Result { storage.withLock { body(&$0) } }
}

/// One request as it reached a test server and the answer as it left: what crossed the wire,
/// before decompression on either side.
struct RecordedExchange: Sendable {
    /// The method and the path, not percent-decoded (`/v1/docs/carts/a%2Bb`).
    var method: String
    var path: String
    /// The query, percent-decoded by the server.
    var query: [String: String]
    /// The request's headers, by lowercased name.
    var headers: [String: String]
    /// The request body's size as sent (compressed or not).
    var bodyBytes: Int
    /// The answer's status.
    var status: Int
    /// The answer's headers, by lowercased name.
    var answerHeaders: [String: String]
    /// The answer body's size as sent (compressed or not).
    var answerBytes: Int

    init(_ request: HTTPRequest, _ response: HTTPResponse) {
        method = request.method
        path = request.path
        query = request.query
        headers = request.headers
        bodyBytes = request.body.count
        status = response.status
        answerHeaders = Dictionary(response.headers.map { ($0.name.lowercased(), $0.value) }, uniquingKeysWith: { $1 })
        answerBytes = response.body.count
    }
}

/// The real sync server on loopback HTTP, for the SDK's tests: a `SyncService` over a
/// `SQLiteServerStore` in a fresh `TemporaryFolder`, its `SyncHTTPHandler`, and an `HTTPServer`
/// on a free port of 127.0.0.1.
///
/// Credentials: the API key `LiveSyncServer.apiKey`; the tokens `token-ana` and `token-ben` for
/// the users "ana" and "ben" (`token(of:)`). The service's clock stands still until `advance(by:)`
/// moves it, so tombstone expiry (a 410 on pull) is testable without waiting. Every exchange is
/// recorded as it crossed the wire (`exchanges`), so a test can see what a client really sent.
///
///     let live = try LiveSyncServer()
///     let transport = live.makeTransport(as: "ana")
///     let answer = try await transport.push(body: request.body)
///     await live.stop()
///
/// The server answers on its own threads, so tests call it with async URLSession calls and never
/// block a Swift concurrency thread; `stop()` waits for the server's threads on a thread of its
/// own. Released without `stop()`, it stops in `deinit`.
final class LiveSyncServer: Sendable {
    /// The API key the server accepts.
    static let apiKey = "test-key"
    /// The bearer tokens the server knows, and their users.
    static let tokens = ["token-ana": "ana", "token-ben": "ben"]

    /// The token of `user` ("ana" or "ben"; another name gets a token the server does not know).
    static func token(of user: String) -> String { "token-\(user)" }

    /// Where the database lives; removed with the server.
    let folder = TemporaryFolder()
    /// The service behind the routes, for looking at or changing the server's side directly.
    let service: SyncService
    /// The HTTP server.
    let server: HTTPServer
    /// `http://127.0.0.1:<port>`.
    let url: URL
    private let now: Locked<Date>
    private let recorded = Locked<[RecordedExchange]>([])

    /// Starts a server on a fresh database.
    ///
    /// - Parameters:
    ///   - rules: the collections' rules (owner-only everywhere by default).
    ///   - limits: batch and page limits.
    ///   - bodyLimits: decompression limits and answer compression (zstd level 1 from 1 KiB).
    ///   - http: where and how to listen; the default is a free port on loopback.
    ///   - tombstoneRetention: how long deletes are kept, in the service's clock.
    ///   - afterPushCommit: called after each committed push; when it throws, the push is
    ///     answered 500 although it was applied (a lost answer).
    ///   - observe: called with every request and its answer, bodies included, as they cross the
    ///     wire, before the answer leaves.
    ///   - store: the store to serve (a `PostgresServerStore` that another server shares); by
    ///     default a fresh SQLite database in `folder`.
    init(
        rules: RuleBook = RuleBook(), limits: WireLimits = WireLimits(), bodyLimits: BodyLimits = BodyLimits(),
        http: HTTPServerConfiguration = HTTPServerConfiguration(port: 0, loopbackOnly: true),
        tombstoneRetention: TimeInterval = 3_600,
        afterPushCommit: (@Sendable (PushRequest) throws -> Void)? = nil,
        observe: (@Sendable (HTTPRequest, HTTPResponse) -> Void)? = nil, store: (any ServerStore)? = nil
    ) throws {
        let now = Locked(Date(timeIntervalSince1970: 1_800_000_000))
        self.now = now
        let store = try store ?? SQLiteServerStore(path: folder.path("server.sqlite"), durability: .normal)
        var configuration = ServiceConfiguration(limits: limits, tombstoneRetention: tombstoneRetention, clock: { now.value })
        configuration.afterPushCommit = afterPushCommit
        service = try SyncService(store: store, rules: rules, configuration: configuration)
        let authenticator = ConfiguredAuthenticator(apiKeys: [Self.apiKey], tokens: Self.tokens)
        let handler = SyncHTTPHandler(service: service, authenticator: authenticator, limits: bodyLimits)
        let recorded = recorded
        server = try HTTPServer(configuration: http) { request in
            handler.handle(request).observed { response in
                observe?(request, response)
                recorded.update { $0.append(RecordedExchange(request, response)) }
            }
        }
        url = URL(string: "http://127.0.0.1:\(server.port)")!
    }

    deinit { server.shutdown() }

    /// Every exchange so far, in the order the answers were made.
    var exchanges: [RecordedExchange] { recorded.value }

    /// Moves the service's clock forward (tombstones expire by it).
    func advance(by seconds: TimeInterval) { now.update { $0 += seconds } }

    /// A transport to this server as `user` (`nil`: anonymous), or with the token `token` returns
    /// at each request when given, over the HTTP client `exchange`.
    func makeTransport(
        exchange: HTTPExchangeKind = .platformDefault, as user: String? = "ana",
        token: (@Sendable () -> String?)? = nil, timeout: Duration = .seconds(10),
        compressionThreshold: Int = 1_024, maximumAnswerBytes: Int = 64 << 20
    ) -> HTTPTransport {
        let fixed = user.map(Self.token(of:))
        return HTTPTransport(
            serverURL: url, apiKey: Self.apiKey, token: token ?? { fixed }, timeout: timeout,
            compressionThreshold: compressionThreshold, maximumAnswerBytes: maximumAnswerBytes, exchange: exchange)
    }

    /// Work to do before the server stops (SDK instances closing), in the order it was added.
    private let beforeStop = Locked<[@Sendable () async -> Void]>([])

    /// Runs `work` when the server stops, before it does.
    func onStop(_ work: @escaping @Sendable () async -> Void) { beforeStop.update { $0.append(work) } }

    /// Stops the server: first whatever `onStop` asked for, then finishes the requests in flight and
    /// closes every connection.
    func stop() async {
        for work in beforeStop.update({ list in
            defer { list = [] }; return list
        }) { await work() }
        let server = server
        _ = try? await onNewThread { server.shutdown() }
    }
}

/// An HTTP server on loopback that answers whatever the test scripts, for answers the real server
/// never gives (an HTML 502, a redirect, garbage, a zstd bomb, a stall). It records every request.
final class ScriptedServer: Sendable {
    /// The HTTP server.
    let server: HTTPServer
    /// `http://127.0.0.1:<port>`.
    let url: URL
    private let script: Locked<@Sendable (HTTPRequest) -> HTTPResponse>
    private let received = Locked<[HTTPRequest]>([])

    /// Starts a server that answers every request with `answer` until `answer(with:)` changes it.
    init(_ answer: @escaping @Sendable (HTTPRequest) -> HTTPResponse = { _ in .json(status: 200, Array(#"{"status":"ok"}"#.utf8)) }) throws
    {
        let script = Locked<@Sendable (HTTPRequest) -> HTTPResponse>(answer)
        let received = received
        self.script = script
        server = try HTTPServer(configuration: HTTPServerConfiguration(port: 0, loopbackOnly: true)) { request in
            received.update { $0.append(request) }
            return script.value(request)
        }
        url = URL(string: "http://127.0.0.1:\(server.port)")!
    }

    deinit { server.shutdown() }

    /// The requests received so far, bodies included.
    var requests: [HTTPRequest] { received.value }

    /// Answers the next requests with `answer`.
    func answer(with answer: @escaping @Sendable (HTTPRequest) -> HTTPResponse) {
        script.update { $0 = answer }
    }

    /// A transport to this server (API key `key`, token `token`) over the HTTP client `exchange`.
    func makeTransport(
        exchange: HTTPExchangeKind = .platformDefault, timeout: Duration = .seconds(10),
        maximumAnswerBytes: Int = 64 << 20
    ) -> HTTPTransport {
        HTTPTransport(
            serverURL: url, apiKey: "key", token: { "token" }, timeout: timeout, maximumAnswerBytes: maximumAnswerBytes,
            exchange: exchange)
    }

    /// Stops the server; a handler still waiting holds this up, so release it first.
    func stop() async {
        let server = server
        _ = try? await onNewThread { server.shutdown() }
    }
}
