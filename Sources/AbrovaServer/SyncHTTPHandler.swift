import AbrovaCore
import AbrovaHTTP
import AbrovaWire
import Foundation

/// Limits the HTTP layer puts on bodies, beyond the server's raw body limit.
public struct BodyLimits: Hashable, Sendable {
    /// The largest request body after decompression.
    public var maximumDecompressedBytes: Int
    /// The largest zstd window a request may need, as a power of two: the memory one
    /// decompression may take.
    public var maximumWindowLog: Int
    /// The zstd level of compressed answers.
    public var compressionLevel: Int32
    /// Answers smaller than this are sent uncompressed (compression would not pay).
    public var compressionThreshold: Int
    /// The largest body as sent, which the HTTP server in front enforces
    /// (`HTTPServerConfiguration.maximumBodyBytes`); announced to clients with the rest.
    public var maximumBodyBytes: Int

    /// Limits with the defaults: 32 MiB decompressed, a 32 MiB window, level 1 above 1 KiB, and
    /// the HTTP server's default of 16 MiB as sent.
    public init(
        maximumDecompressedBytes: Int = 32 << 20, maximumWindowLog: Int = 25, compressionLevel: Int32 = 1,
        compressionThreshold: Int = 1_024, maximumBodyBytes: Int = 16 << 20
    ) {
        self.maximumDecompressedBytes = maximumDecompressedBytes
        self.maximumWindowLog = maximumWindowLog
        self.compressionLevel = compressionLevel
        self.compressionThreshold = compressionThreshold
        self.maximumBodyBytes = maximumBodyBytes
    }
}

/// The protocol's routes (Spec/protocol.md) over a `SyncService`: it authenticates, decodes
/// bodies (zstd or identity), calls the service and encodes its answers and errors as JSON.
public struct SyncHTTPHandler: Sendable {
    /// The service answering.
    public let service: SyncService
    /// Who the callers are.
    public let authenticator: any Authenticator
    /// Body limits and answer compression.
    public let limits: BodyLimits
    /// Receives one line per request (`RequestRecord`): its id, method, path, status, duration,
    /// caller.
    public let log: @Sendable (String) -> Void
    /// How those lines are written.
    public let logFormat: LogFormat

    /// A handler for `service`.
    public init(
        service: SyncService, authenticator: any Authenticator, limits: BodyLimits = BodyLimits(),
        logFormat: LogFormat = .text, log: @escaping @Sendable (String) -> Void = { _ in }
    ) {
        self.service = service
        self.authenticator = authenticator
        self.limits = limits
        self.logFormat = logFormat
        self.log = log
    }

    /// Answers one request. Every answer carries the request's id in `X-Request-Id` (the
    /// client's, when it sent a usable one), which its log line names too.
    public func handle(_ request: HTTPRequest) -> HTTPResponse {
        let start = ContinuousClock.now
        let id = RequestRecord.id(sentAs: request.headers["x-request-id"])
        var caller: Caller?
        do {
            if let watch = try preparedWatch(request, caller: &caller) {
                // Answered later, from the service's thread; logged then, with the whole wait.
                return .deferred { [self, caller] responder in
                    let waiting = watch.wait { changed in
                        var response = encoded(status: 200, body: WatchResponse(changed: changed).body, for: request, closing: true)
                        response.headers.append(("X-Request-Id", id))
                        record(request, id: id, status: response.status, since: start, caller: caller)
                        responder.send(response)
                    }
                    // A client that hangs up drops its watch at once (the server closed the
                    // connection); logged as nginx logs one, 499.
                    responder.onClientGone { [self] in
                        waiting.cancel()
                        record(request, id: id, status: 499, since: start, caller: caller)
                    }
                }
            }
            if Self.waitsOnStore(request) {
                // Made on a worker thread: a push waits on the database (round trips to a
                // PostgreSQL across a network, an fsync), and the thread that read it serves other
                // connections that must not wait with it.
                return .offloaded { [self, caller] in answer(request, id: id, since: start, caller: caller) }
            }
        } catch {
            return refused(request, error, id: id, since: start, caller: caller)
        }
        return answer(request, id: id, since: start, caller: caller)
    }

    /// Whether answering `request` waits on the store: a push or a pull.
    private static func waitsOnStore(_ request: HTTPRequest) -> Bool {
        (request.method == "POST" && request.path == "/v1/push") || (request.method == "GET" && request.path == "/v1/pull")
    }

    /// The answer to a request of any route but the watch, logged.
    private func answer(_ request: HTTPRequest, id: String, since start: ContinuousClock.Instant, caller: Caller?) -> HTTPResponse {
        var caller = caller
        do {
            var response = try route(request, caller: &caller)
            response.headers.append(("X-Request-Id", id))
            record(request, id: id, status: response.status, since: start, caller: caller)
            return response
        } catch {
            return refused(request, error, id: id, since: start, caller: caller)
        }
    }

    /// The answer to a request refused with `error`, logged and counted.
    private func refused(
        _ request: HTTPRequest, _ error: Refusal, id: String, since start: ContinuousClock.Instant, caller: Caller?
    ) -> HTTPResponse {
        var response = encoded(status: error.statusCode, body: error.body, for: request)
        if error.reason == .overloaded { response.headers.append(("Retry-After", "5")) }
        response.headers.append(("X-Request-Id", id))
        service.metrics.add("abrova_rejections_total", [("reason", error.reason.rawValue)])
        if error.reason == .unavailable || error.reason == .failed {
            service.metrics.add("abrova_database_errors_total", [("kind", error.reason.rawValue)])
        }
        record(request, id: id, status: response.status, since: start, caller: caller)
        return response
    }

    /// Logs an answered request and counts it.
    private func record(_ request: HTTPRequest, id: String, status: Int, since start: ContinuousClock.Instant, caller: Caller?) {
        let duration = (ContinuousClock.now - start).components
        let seconds = Double(duration.seconds) + Double(duration.attoseconds) / 1e18
        let route = Self.routeName(request.path)
        service.metrics.add("abrova_http_requests_total", [("route", route), ("status", String(status))])
        service.metrics.observe("abrova_http_request_duration_seconds", [("route", route)], seconds: seconds)
        let entry = RequestRecord(
            id: id, method: request.method, path: request.path, status: status, milliseconds: seconds * 1_000,
            caller: caller?.description)
        log(entry.line(logFormat))
    }

    /// The route a path names, for metrics: a handful of names, whatever paths clients send.
    static func routeName(_ path: String) -> String {
        switch path {
        case "/v1/push": "push"
        case "/v1/pull": "pull"
        case "/v1/watch": "watch"
        case "/v1/health": "health"
        case "/v1/session": "session"
        default: path.hasPrefix("/v1/docs/") ? "docs" : "other"
        }
    }

    /// `GET /v1/watch`, checked: the watch to wait for; `nil` for every other route.
    private func preparedWatch(_ request: HTTPRequest, caller: inout Caller?) throws(Refusal) -> SyncService.PreparedWatch? {
        guard request.path == "/v1/watch" else { return nil }
        guard request.method == "GET" else { throw Refusal(.methodNotAllowed, "\(request.method) is not allowed on \(request.path)") }
        let who = try authenticate(request)
        caller = who
        return try service.prepareWatch(
            cursor: request.query["cursor"], collections: Self.collections(in: request), scope: try Self.scope(in: request), caller: who)
    }

    private static func collections(in request: HTTPRequest) -> [String]? {
        request.query["collections"].map { $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init) }
    }

    /// The `scope` parameter: a sync scope's JSON (Spec/protocol.md).
    private static func scope(in request: HTTPRequest) throws(Refusal) -> SyncScope? {
        try request.query["scope"].map { text throws(Refusal) in try SyncScope(jsonText: text) }
    }

    private func route(_ request: HTTPRequest, caller: inout Caller?) throws(Refusal) -> HTTPResponse {
        // The first segment is what precedes the leading "/"; a path without one (`x/v1/push`)
        // matches no route rather than the route after its first segment.
        let segments = request.path.hasPrefix("/") ? request.path.split(separator: "/", omittingEmptySubsequences: false).dropFirst() : []
        switch (request.method, Array(segments)) {
        case ("GET", ["v1", "health"]):
            // `?ready`: for load balancers, whether the database answers too.
            if request.query["ready"] != nil { try service.checkReady() }
            return encoded(status: 200, body: HealthResponse(limits: announcedLimits).body, for: request)
        case ("GET", ["v1", "session"]):
            let who = try authenticate(request)
            caller = who
            return encoded(status: 200, body: SessionResponse(user: who.userID).body, for: request)
        case ("POST", ["v1", "push"]):
            let who = try authenticate(request)
            caller = who
            let answer = try service.push(body: try decodedBody(of: request), caller: who, pullCursor: request.query["cursor"])
            return encoded(status: 200, body: answer, for: request)
        case ("GET", ["v1", "pull"]):
            let who = try authenticate(request)
            caller = who
            var limit: Int?
            if let text = request.query["limit"] {
                guard let number = Int(text) else { throw Refusal.invalid("limit must be an integer, not \"\(text.prefix(20))\"") }
                limit = number
            }
            var form = PullForm.full
            if let text = request.query["form"] {
                guard let named = PullForm(rawValue: text) else {
                    throw Refusal.invalid("form must be full or state, not \"\(text.prefix(20))\"")
                }
                form = named
            }
            let page = try service.pullBody(
                cursor: request.query["cursor"], limit: limit, collections: Self.collections(in: request),
                scope: try Self.scope(in: request),
                form: form, caller: who)
            return encoded(status: 200, body: page, for: request)
        case ("GET", let parts) where parts.count == 4 && parts[0] == "v1" && parts[1] == "docs":
            let who = try authenticate(request)
            caller = who
            guard let collection = parts[2].removingPercentEncoding, let id = parts[3].removingPercentEncoding else {
                throw Refusal.invalid("the document path is not valid percent-encoding")
            }
            let document = try service.document(DocumentKey(collection: collection, id: id), caller: who)
            return encoded(status: 200, body: document.body, for: request)
        case (_, ["v1", "health"]), (_, ["v1", "session"]), (_, ["v1", "push"]), (_, ["v1", "pull"]):
            throw Refusal(.methodNotAllowed, "\(request.method) is not allowed on \(request.path)")
        case (_, let parts) where parts.count == 4 && parts[0] == "v1" && parts[1] == "docs":
            throw Refusal(
                .methodNotAllowed,
                "\(request.method) is not allowed on \(request.path); documents are read with GET and written with POST /v1/push")
        default:
            throw Refusal(.notFound, "no route \(request.method) \(request.path.prefix(100))")
        }
    }

    /// The limits clients cut their batches by: a body may be sent uncompressed, so the smaller of
    /// the two body limits.
    var announcedLimits: ServerLimits {
        let wire = service.configuration.limits
        return ServerLimits(
            maximumChanges: wire.maximumChanges,
            maximumPushBytes: min(limits.maximumDecompressedBytes, limits.maximumBodyBytes),
            maximumPageSize: wire.maximumPageSize, maximumPageBytes: wire.maximumPageBytes,
            watchIdleSeconds: Int((service.configuration.watchIdleTime / .seconds(1)).rounded(.up)))
    }

    private func authenticate(_ request: HTTPRequest) throws(Refusal) -> Caller {
        var token: String?
        if let authorization = request.headers["authorization"] {
            guard authorization.hasPrefix("Bearer "), authorization.count > 7 else {
                throw Refusal(.unauthenticated, "the Authorization header must be \"Bearer <token>\"")
            }
            token = String(authorization.dropFirst(7))
        }
        return try authenticator.authenticate(apiKey: request.headers["x-api-key"], bearerToken: token)
    }

    /// The request body, decompressed when it says it is zstd.
    private func decodedBody(of request: HTTPRequest) throws(Refusal) -> [UInt8] {
        switch request.headers["content-encoding"]?.lowercased() {
        case nil, "identity":
            guard request.body.count <= limits.maximumDecompressedBytes else {
                throw Refusal(
                    .tooLarge,
                    "the body holds \(request.body.count) bytes; the limit is \(limits.maximumDecompressedBytes) (maximumDecompressedBytes)"
                )
            }
            return request.body
        case "zstd":
            do {
                let body = try Zstd.decompress(
                    request.body, limit: limits.maximumDecompressedBytes, maximumWindowLog: limits.maximumWindowLog)
                service.metrics.add(
                    "abrova_zstd_bytes_total", [("direction", "request"), ("form", "compressed")], Double(request.body.count))
                service.metrics.add("abrova_zstd_bytes_total", [("direction", "request"), ("form", "raw")], Double(body.count))
                return body
            } catch  where error.code == .tooLarge {
                throw Refusal(
                    .tooLarge, "the zstd body expands past \(limits.maximumDecompressedBytes) bytes (limit maximumDecompressedBytes)")
            } catch {
                throw Refusal(error.reason, "the zstd body was refused: \(error.message)")
            }
        case let other?:
            throw Refusal(.unsupportedEncoding, "Content-Encoding \(other.prefix(40)) is not supported; use zstd or identity")
        }
    }

    /// A JSON answer, compressed with zstd when the client accepts it and it is worth it.
    /// The answer to `request`, compressed when it accepts zstd and the body is large enough;
    /// `closing` asks the client to close the connection after it (a watch: a waiting watch on a
    /// fresh connection costs the server a seventh of one on a connection that served before).
    private func encoded(status: Int, body: [UInt8], for request: HTTPRequest, closing: Bool = false) -> HTTPResponse {
        let accepts =
            request.headers["accept-encoding"]?.split(separator: ",").contains {
                $0.trimmingCharacters(in: .whitespaces).split(separator: ";").first == "zstd"
            } ?? false
        if accepts, body.count >= limits.compressionThreshold, let compressed = try? Zstd.compress(body, level: limits.compressionLevel) {
            service.metrics.add("abrova_zstd_bytes_total", [("direction", "answer"), ("form", "compressed")], Double(compressed.count))
            service.metrics.add("abrova_zstd_bytes_total", [("direction", "answer"), ("form", "raw")], Double(body.count))
            return .json(
                status: status, compressed,
                headers: [("Content-Encoding", "zstd"), ("Vary", "Accept-Encoding")] + (closing ? [("Connection", "close")] : []))
        }
        return .json(status: status, body, headers: [("Vary", "Accept-Encoding")] + (closing ? [("Connection", "close")] : []))
    }
}

/// `text` as it may be written to a log or a terminal: control characters (C0, DEL and C1, which
/// terminals read as escape sequences, or line breaks that forge a log line) become `\x1b` or
/// `\u{9b}`, and a backslash is doubled so that the escaping cannot be faked.
func escapedForLog(_ text: String) -> String {
    var escaped = ""
    for scalar in text.unicodeScalars {
        switch scalar.value {
        case 0x5C: escaped += "\\\\"
        case 0..<0x20, 0x7F: escaped += "\\x" + hexDigits(scalar.value, count: 2)
        case 0x80..<0xA0: escaped += "\\u{" + hexDigits(scalar.value, count: 2) + "}"
        default: escaped.unicodeScalars.append(scalar)
        }
    }
    return escaped
}

private func hexDigits(_ value: UInt32, count: Int) -> String {
    let digits = String(value, radix: 16)
    return String(repeating: "0", count: max(0, count - digits.count)) + digits
}
