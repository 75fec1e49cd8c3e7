import AbrovaCore
import AbrovaLocking
import AbrovaWire
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The sync server's routes (Spec/protocol.md) over HTTP: with URLSession on Apple platforms,
/// with libcurl on Linux (`HTTPExchange`).
///
/// Every request carries the API key (`X-API-Key`), the current token (`Authorization: Bearer`,
/// read from `token` at each request, so the app can replace it at run time) and
/// `Accept-Encoding: zstd`. A push body of at least `compressionThreshold` bytes travels
/// compressed with zstd; a zstd answer is decompressed, never past `maximumAnswerBytes`.
///
/// Every outcome becomes a `TransportFailure` by what the SDK does next: no connection, a
/// timeout, a cancelled task, a 408, 429 or 5xx status, a redirect, a 4xx without the protocol's
/// JSON error body (a proxy's page), or a 2xx answer that cannot be read is `.unreachable` (retry
/// later, the same push body); a 401 is `.unauthorized`; any other 4xx is `.refused` with the
/// server's message.
///
///     let transport = HTTPTransport(serverURL: URL(string: "https://sync.example.com")!,
///                                   apiKey: "app-key", token: { session.currentToken })
///     let page = try await transport.pull(cursor: nil, limit: 500)
///
/// No cache, no cookies, no stored credentials. Redirects are not
/// followed (a `POST` would be replayed as a `GET`); they are answered `.unreachable` naming the
/// `Location`, which is a misconfigured `serverURL`.
package final class HTTPTransport: SyncTransport {
    /// The server's base URL; the routes are appended to its path (`https://host/sync` serves
    /// `https://host/sync/v1/push`).
    package let serverURL: URL
    /// How long a request may take, from its start to the last byte of the answer. libcurl (on
    /// Linux) counts milliseconds; URLSession counts whole seconds: a fraction is rounded up.
    package let timeout: Duration
    /// The zstd level of compressed push bodies.
    package let compressionLevel: Int32
    /// Push bodies smaller than this many bytes are sent uncompressed (compression would not pay).
    package let compressionThreshold: Int
    /// The most bytes an answer may hold once decompressed; a larger one is abandoned as it
    /// arrives and reported `.unreachable`.
    package let maximumAnswerBytes: Int

    private let apiKey: String
    private let token: @Sendable () -> String?
    private let exchange: any HTTPExchange

    /// How long `isReachable()` waits at most.
    private static let reachabilityTimeout: Duration = .seconds(5)
    /// How much longer than the server's idle time a watch may take: the idle answer's way back.
    static let watchMargin: Duration = .seconds(10)
    /// The server's watch idle time, once a health answer said it (or that it says nothing).
    private let announcedWatchIdle = Protected<Duration?>(nil)

    /// A transport to the server at `serverURL`.
    ///
    /// - Parameters:
    ///   - apiKey: the app's API key, sent as `X-API-Key`.
    ///   - token: the signed-in user's bearer token, read at every request; `nil` or empty for
    ///     an anonymous caller (who may read public collections and never push).
    ///   - timeout: how long a request may take in all (30 s by default).
    ///   - compressionLevel: the zstd level of push bodies (1, the cheapest, by default: the
    ///     server's work per change dominates, see Docs/BENCHMARKS.md).
    ///   - compressionThreshold: push bodies from this size (1 KiB by default) are compressed.
    ///   - maximumAnswerBytes: the largest answer accepted, decompressed (64 MiB by default).
    package convenience init(
        serverURL: URL, apiKey: String, token: @escaping @Sendable () -> String?,
        timeout: Duration = .seconds(30), compressionLevel: Int32 = 1, compressionThreshold: Int = 1_024,
        maximumAnswerBytes: Int = 64 << 20
    ) {
        self.init(
            serverURL: serverURL, apiKey: apiKey, token: token, timeout: timeout, compressionLevel: compressionLevel,
            compressionThreshold: compressionThreshold, maximumAnswerBytes: maximumAnswerBytes, exchange: .platformDefault)
    }

    /// A transport that sends its requests with the HTTP client `exchange` (tests and benchmarks
    /// run both where both are built).
    package init(
        serverURL: URL, apiKey: String, token: @escaping @Sendable () -> String?,
        timeout: Duration = .seconds(30), compressionLevel: Int32 = 1, compressionThreshold: Int = 1_024,
        maximumAnswerBytes: Int = 64 << 20, exchange: HTTPExchangeKind
    ) {
        precondition(timeout > .zero, "timeout must be positive")
        precondition(maximumAnswerBytes > 0, "maximumAnswerBytes must be positive")
        self.serverURL = serverURL
        self.apiKey = apiKey
        self.token = token
        self.timeout = timeout
        self.compressionLevel = compressionLevel
        self.compressionThreshold = compressionThreshold
        self.maximumAnswerBytes = maximumAnswerBytes
        self.exchange = exchange.makeExchange(timeout: timeout, maximumAnswerBytes: maximumAnswerBytes)
    }

    // MARK: - The routes

    /// `POST /v1/push`: sends `body` (a `PushRequest.body`) as it is, compressed when large, with
    /// the device's pull cursor (`nil`: it never pulled).
    ///
    /// - Throws: `TransportFailure`; after `.unreachable` the push may have been applied all the
    ///   same, so it is retried with the same body (the server answers a retry from its record).
    package func push(body: [UInt8], pullCursor: String?) async throws(TransportFailure) -> PushResponse {
        var request = try makeRequest(method: "POST", path: "/v1/push", query: "cursor=" + Self.percentEncoded(pullCursor ?? ""))
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        // zstd only fails when memory runs out; the server takes the plain body as well.
        if body.count >= compressionThreshold, let compressed = try? Zstd.compress(body, level: compressionLevel) {
            request.setValue("zstd", forHTTPHeaderField: "Content-Encoding")
            request.httpBody = Data(compressed)
        } else {
            request.httpBody = Data(body)
        }
        let answer = try await send(request, timeout: timeout)
        return try Self.read(answer, limit: maximumAnswerBytes) { bytes throws(Refusal) in try PushResponse(body: bytes) }
    }

    /// `GET /v1/pull`: the page of documents changed after `cursor` (`nil`: from the beginning).
    ///
    /// - Throws: `TransportFailure`; `.refused(.resyncRequired, _)` when the cursor is past removed
    ///   tombstones (pull again from the beginning), `.refused(.invalid, _)` for a cursor the server
    ///   did not make or a `limit` outside 1...1,000.
    package func pull(cursor: String?, limit: Int, scope: SyncScope?) async throws(TransportFailure) -> PullResponse {
        // The device keeps states, and each document's data follows from its state.
        var query = "form=state&limit=\(limit)"
        if let cursor { query += "&cursor=" + Self.percentEncoded(cursor) }
        if let scope { query += "&" + Self.scopeArgument(scope) }
        let answer = try await send(try makeRequest(method: "GET", path: "/v1/pull", query: query), timeout: timeout)
        return try Self.read(answer, limit: maximumAnswerBytes) { bytes throws(Refusal) in try PullResponse(body: bytes) }
    }

    /// `GET /v1/docs/{collection}/{id}`: the document, or `nil` when it does not exist or is
    /// deleted.
    ///
    /// - Throws: `TransportFailure`; `.refused(.forbidden, _)` when the rules refuse the read.
    package func document(_ key: DocumentKey) async throws(TransportFailure) -> ServerDocument? {
        let path = "/v1/docs/" + Self.pathSegment(key.collection) + "/" + Self.pathSegment(key.id)
        let answer = try await send(try makeRequest(method: "GET", path: path), timeout: timeout)
        // Only the protocol's own 404 (with its JSON error body) says the document is missing;
        // another one (a proxy's page) means the route was not reached.
        if answer.statusCode == 404, let body = try? Self.content(of: answer, limit: maximumAnswerBytes),
            Refusal(body: body) != nil
        {
            return nil
        }
        return try Self.read(answer, limit: maximumAnswerBytes) { bytes throws(Refusal) in try ServerDocument(body: bytes) }
    }

    /// `GET /v1/health`, waiting at most 5 s (or `timeout`, when shorter): whether the server
    /// answers 200.
    package func isReachable() async -> Bool {
        guard var request = try? makeRequest(method: "GET", path: "/v1/health", withCredentials: false) else { return false }
        let wait = min(timeout, Self.reachabilityTimeout)
        request.timeoutInterval = Self.seconds(wait)
        guard let answer = try? await send(request, timeout: wait), answer.statusCode == 200,
            let body = try? Self.content(of: answer, limit: maximumAnswerBytes)
        else { return false }
        // A captive portal answers 200 too, with a page of its own.
        guard let health = HealthResponse(body: body) else { return false }
        noteWatchIdle(in: health)
        return true
    }

    /// `GET /v1/health`: the limits the server announces (`nil` from a server that announces
    /// none).
    ///
    /// - Throws: `TransportFailure`; `.unreachable` for an answer that is not the sync server's.
    package func serverLimits() async throws(TransportFailure) -> ServerLimits? {
        let answer = try await send(try makeRequest(method: "GET", path: "/v1/health", withCredentials: false), timeout: timeout)
        let health = try Self.read(answer, limit: maximumAnswerBytes) { bytes throws(Refusal) in
            guard let health = HealthResponse(body: bytes) else { throw Refusal.invalid("not the sync server's health answer") }
            return health
        }
        noteWatchIdle(in: health)
        return health.limits
    }

    /// `GET /v1/watch`: waits for the server to say whether something changed after `cursor`
    /// (`nil`: from the beginning). The request may take the server's idle time
    /// (`watchIdleSeconds` in `GET /v1/health`, asked before the first watch; 25 s when not
    /// announced) plus a margin, not `timeout`.
    ///
    /// - Throws: `TransportFailure`: `.refused(.notFound, _)` when the server has no such route
    ///   (its own 404, with the protocol's JSON error body; a proxy's 404 page is `.unreachable`);
    ///   `.refused(.invalid or .resyncRequired, _)` for a cursor a pull would refuse so.
    package func watch(cursor: String?, scope: SyncScope?) async throws(TransportFailure) -> Bool {
        if announcedWatchIdle.withLock({ $0 }) == nil { _ = try? await serverLimits() }
        let wait = (announcedWatchIdle.withLock { $0 } ?? .seconds(ServerLimits.defaultWatchIdleSeconds)) + Self.watchMargin
        var parts: [String] = []
        if let cursor { parts.append("cursor=" + Self.percentEncoded(cursor)) }
        if let scope { parts.append(Self.scopeArgument(scope)) }
        var request = try makeRequest(
            method: "GET", path: "/v1/watch", query: parts.isEmpty ? nil : parts.joined(separator: "&"))
        request.timeoutInterval = Self.seconds(wait)
        let answer = try await send(request, timeout: wait, onFreshConnection: true)
        return try Self.read(answer, limit: maximumAnswerBytes) { bytes throws(Refusal) in try WatchResponse(body: bytes).changed }
    }

    /// Keeps the watch idle time a health answer announces (the default when it announces none).
    private func noteWatchIdle(in health: HealthResponse) {
        let idle = Duration.seconds(health.limits?.watchIdleSeconds ?? ServerLimits.defaultWatchIdleSeconds)
        announcedWatchIdle.withLock { $0 = idle }
    }

    /// `GET /v1/session`: the user the current token names (`.some(nil)`: the anonymous caller);
    /// `nil` from a server without the route (404).
    ///
    /// - Throws: `TransportFailure` (`.unauthorized` for a token the server does not know).
    package func sessionUser() async throws(TransportFailure) -> String?? {
        let answer = try await send(try makeRequest(method: "GET", path: "/v1/session"), timeout: timeout)
        do {
            let session = try Self.read(answer, limit: maximumAnswerBytes) { bytes throws(Refusal) in
                guard let session = SessionResponse(body: bytes) else { throw Refusal.invalid("not the sync server's session answer") }
                return session
            }
            return .some(session.user)
        } catch .refused(.notFound, _) {
            return nil
        }
    }

    // MARK: - Requests

    /// A request for `path` (and `query`, already percent-encoded) under `serverURL`, with the
    /// headers every route shares.
    private func makeRequest(
        method: String, path: String, query: String? = nil,
        withCredentials: Bool = true
    ) throws(TransportFailure) -> URLRequest {
        guard var components = URLComponents(url: serverURL, resolvingAgainstBaseURL: true) else {
            throw .unreachable("the server URL \(serverURL) cannot hold a route")
        }
        var base = components.percentEncodedPath
        while base.hasSuffix("/") { base.removeLast() }
        components.percentEncodedPath = base + path
        components.percentEncodedQuery = query
        components.fragment = nil
        guard let url = components.url else { throw .unreachable("the server URL \(serverURL) cannot hold \(path)") }
        var request = URLRequest(url: url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: Self.seconds(timeout))
        request.httpMethod = method
        request.httpShouldHandleCookies = false
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        request.setValue("zstd", forHTTPHeaderField: "Accept-Encoding")
        guard withCredentials else { return request }
        // A line break in a header value would smuggle in headers of its own.
        guard Self.isHeaderSafe(apiKey) else {
            throw .unauthorized("the API key holds characters an HTTP header cannot carry")
        }
        request.setValue(apiKey, forHTTPHeaderField: "X-API-Key")
        if let token = token(), !token.isEmpty {
            guard Self.isHeaderSafe(token) else {
                throw .unauthorized("the token holds characters an HTTP header cannot carry")
            }
            request.setValue("Bearer " + token, forHTTPHeaderField: "Authorization")
        }
        return request
    }

    /// Sends `request` and collects the whole answer; a failure here means no usable answer
    /// came (the status is not looked at yet).
    private func send(_ request: URLRequest, timeout: Duration, onFreshConnection: Bool = false) async throws(TransportFailure)
        -> HTTPAnswer
    {
        guard let url = request.url else { throw .unreachable("the request has no URL") }
        let exchangeRequest = HTTPExchangeRequest(
            method: request.httpMethod ?? "GET", url: url,
            headers: request.allHTTPHeaderFields ?? [:], body: request.httpBody,
            timeout: timeout, isOnFreshConnection: onFreshConnection)
        do {
            return try await exchange.send(exchangeRequest)
        } catch {
            throw .unreachable(error.reason)
        }
    }

    private static func seconds(_ duration: Duration) -> TimeInterval {
        let (seconds, attoseconds) = duration.components
        // URLSession on Linux truncates the timeout to whole seconds: 0.5 s would become 0.
        return max(1, (Double(seconds) + Double(attoseconds) / 1e18).rounded(.up))
    }

    private static func isHeaderSafe(_ text: String) -> Bool {
        text.utf8.allSatisfy { (0x20...0x7E).contains($0) }
    }
}
