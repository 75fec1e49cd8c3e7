import AbrovaCore
import AbrovaHTTP
import AbrovaLocking
import AbrovaServer
import AbrovaTestSupport
import AbrovaWire
import Foundation

/// The HTTP target's input: a request written as text, read leniently so that every input is a
/// request. Lines end with `\n` (a `\r` before it is dropped); the first line is the method and the
/// target (`POST /v1/push?x=1`), then `name: value` headers up to an empty line, then the body:
///
///     POST /v1/push
///     x-api-key: fuzz
///     authorization: Bearer ana
///     x-fuzz-zstd: 1
///
///     {"batchSeq":1,...}
///
/// `x-fuzz-zstd` (any value) sends the body compressed with zstd, with `Content-Encoding: zstd`
/// unless the input names an encoding itself, so that mutations of the JSON reach the decoder
/// behind the decompression. Invalid UTF-8 in the head becomes U+FFFD, as the server's C strings do.
public struct FuzzedRequest: Sendable {
    /// The method: the first line up to its first space.
    public var method: String
    /// The path and query as written: the rest of the first line (`/` when there is none).
    public var target: String
    /// The headers in order, names lowercased.
    public var headers: [(name: String, value: String)]
    /// The body as sent: compressed when the input asked for zstd.
    public var body: [UInt8]

    /// The pseudo-header that asks for the body to be sent compressed.
    static let compressHeader = "x-fuzz-zstd"

    /// Reads an input; never fails.
    public init(_ input: [UInt8]) {
        var lines: [ArraySlice<UInt8>] = []
        var start = 0
        var bodyStart = input.count
        while start < input.count {
            let end = input[start...].firstIndex(of: UInt8(ascii: "\n")) ?? input.count
            var line = input[start..<end]
            if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
            start = end + 1
            if line.isEmpty && !lines.isEmpty {
                bodyStart = min(start, input.count)
                break
            }
            lines.append(line)
        }
        let requestLine = String(decoding: lines.first ?? [], as: UTF8.self)
        if let space = requestLine.firstIndex(of: " ") {
            method = String(requestLine[..<space])
            target = String(requestLine[requestLine.index(after: space)...])
        } else {
            method = requestLine
            target = "/"
        }
        var headers: [(name: String, value: String)] = []
        var compresses = false
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { continue }
            let name = String(decoding: line[..<colon], as: UTF8.self).lowercased()
            let value = String(decoding: line[(colon + 1)...].drop(while: { $0 == 0x20 || $0 == 0x09 }), as: UTF8.self)
            if name == Self.compressHeader { compresses = true } else { headers.append((name, value)) }
        }
        body = Array(input[bodyStart...])
        // zstd's own encoder: a failure (out of memory) sends the body as it is.
        if compresses, let compressed = try? Zstd.compress(body, level: 1) {
            body = compressed
            if !headers.contains(where: { $0.name == "content-encoding" }) { headers.append(("content-encoding", "zstd")) }
        }
        self.headers = headers
    }

    /// The input that reads as this request (for seeds; the body is written as it is).
    public static func text(_ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8] = []) -> [UInt8] {
        var text = "\(method) \(target)\n"
        for (name, value) in headers { text += "\(name): \(value)\n" }
        return Array((text + "\n").utf8) + body
    }

    /// The request as the server hands it to its handler: the query split at `&` and `=` and
    /// percent-decoded with `+` as a space; a repeated header or query name keeps its last value.
    public var request: HTTPRequest {
        let (path, query) = target.firstIndex(of: "?").map { (String(target[..<$0]), target[target.index(after: $0)...]) } ?? (target, "")
        var arguments: [String: String] = [:]
        for part in query.split(separator: "&") {
            let (name, value) = part.firstIndex(of: "=").map { (part[..<$0], part[part.index(after: $0)...]) } ?? (part, "")
            arguments[percentDecoded(name, plusIsSpace: true)] = percentDecoded(value, plusIsSpace: true)
        }
        var fields: [String: String] = [:]
        for (name, value) in headers { fields[name] = value }
        return HTTPRequest(method: method, path: path, query: arguments, headers: fields, body: body)
    }

    /// The request as HTTP/1.1 bytes, with `Connection: close` and a `Content-Length` of the body
    /// unless the input sets one (which may lie).
    public var rawHTTP: [UInt8] {
        var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !headers.contains(where: { $0.name == "content-length" }) { head += "Content-Length: \(body.count)\r\n" }
        return Array((head + "\r\n").utf8) + body
    }
}

/// The server's HTTP handling: `SyncHTTPHandler.handle` on a service over a SQLite store in a
/// temporary folder, with development authentication (any API key; a bearer token is its user),
/// rules that make some collections public, shared or validated, and small limits (16 changes a
/// batch, 50 documents a page, 1 MiB decompressed, a 1 MiB zstd window). The input is a
/// `FuzzedRequest`.
///
/// Oracle: the status is 2xx or 4xx, never 5xx; an answer is JSON, decompresses when it says zstd,
/// and is what the SDK can read: `{"message", "statusCode"}` with the answer's status for an
/// error, a push answer with one result per change, a page, a document. Every 500 inputs, and
/// in `checkStillWorks`, a new client pushes a document and reads it back and pulls.
///
/// The store keeps what inputs pushed (a pull after a push finds something), so an input's answer
/// can depend on the inputs before it; a new store is made every 50,000 inputs.
public final class HTTPTarget: FuzzTarget {
    public let name = "http"
    public let seeds: [[UInt8]]
    public let dictionary: [[UInt8]]

    private struct Server {
        let folder: TemporaryFolder
        let handler: SyncHTTPHandler
        var inputs = 0
    }

    private let server: Protected<Server>
    /// What the service logged since the last input: the store's failures behind a 500.
    private let serviceLog: ServiceLog
    private let healthChecks = Protected<Int>(0)
    static let inputsPerStore = 50_000
    static let inputsPerHealthCheck = 500
    static let wireLimits = WireLimits(maximumChanges: 16, maximumPageSize: 50)
    static let bodyLimits = BodyLimits(maximumDecompressedBytes: 1 << 20, maximumWindowLog: 20)

    /// The target over a new store, seeded with requests of every route, the push bodies of the
    /// fixtures and those built in code.
    ///
    /// - Throws: `FuzzSetupError` when the store cannot be made.
    public init(fixtures: WireCorpus) throws {
        let log = ServiceLog()
        serviceLog = log
        server = Protected(try Self.makeServer(log: log))
        let credentials: [(String, String)] = [("x-api-key", "fuzz"), ("authorization", "Bearer ana")]
        var seeds: [[UInt8]] = [
            FuzzedRequest.text("GET", "/v1/health"),
            FuzzedRequest.text("GET", "/v1/pull?limit=10&collections=carts,notes&cursor=", headers: credentials),
            FuzzedRequest.text("GET", "/v1/pull", headers: credentials + [("accept-encoding", "gzip, zstd;q=1")]),
            FuzzedRequest.text("GET", "/v1/pull?cursor=c1.AAAAAAAAACkpS9sX0Vw4J1wJr5fZ1Wmq&limit=1", headers: credentials),
            FuzzedRequest.text("GET", "/v1/pull?collections=catalog", headers: [("x-api-key", "fuzz")]),
            FuzzedRequest.text("GET", "/v1/docs/carts/c1", headers: credentials),
            FuzzedRequest.text("GET", "/v1/docs/carts%2Fx/a%20b", headers: [("x-api-key", "fuzz"), ("authorization", "Bearer ben")]),
            FuzzedRequest.text("DELETE", "/v1/docs/carts/c1", headers: credentials),
            FuzzedRequest.text("PUT", "/v1/push", headers: credentials),
            FuzzedRequest.text("POST", "/v1/push", headers: credentials + [("content-encoding", "br")], body: Array("{}".utf8)),
            FuzzedRequest.text(
                "POST", "/v1/push", headers: credentials + [("content-encoding", "zstd")],
                body: [0x28, 0xB5, 0x2F, 0xFD] + Array(repeating: 0x41, count: 40)),
        ]
        seeds += Self.smugglingSeeds(credentials: credentials)
        for (index, body) in (fixtures.pushBodies + BuiltSeeds.pushBodies).enumerated() {
            var headers = credentials
            if index % 3 == 1 { headers.append((FuzzedRequest.compressHeader, "1")) }
            if index % 4 == 2 { headers += [("accept-encoding", "zstd"), ("authorization", "Bearer ben")] }
            seeds.append(FuzzedRequest.text("POST", "/v1/push", headers: headers, body: body))
        }
        self.seeds = seeds
        dictionary =
            jsonDictionary
            + [
                "GET ", "POST ", "PUT ", "/v1/push", "/v1/pull", "/v1/docs/", "/v1/health", "?limit=", "&limit=", "&cursor=c1.",
                "&collections=", "x-api-key: fuzz\n", "authorization: Bearer ana\n", "authorization: Bearer \n",
                "content-encoding: zstd\n", "content-encoding: identity\n", "accept-encoding: zstd\n", "x-fuzz-zstd: 1\n",
                "content-length: 5\n", "transfer-encoding: chunked\n", "authorization: Bearer ben\n",
                "\n\n", "%", "%2F", "%00", "%ZZ", "%2e%2e", "+", "&", "=",
            ].map { Array($0.utf8) }
    }

    /// Heads framed two ways, each with a second request hidden in its body, and one naming two
    /// callers. Here the handler sees the last value of each header; over HTTP
    /// (`rawHTTP`, the live-server test) the server must refuse them before the body.
    static func smugglingSeeds(credentials: [(String, String)]) -> [[UInt8]] {
        let hidden = Array("GET /v1/health HTTP/1.1\r\nHost: a\r\n\r\n".utf8)
        let body = Array(#"{"a"}"#.utf8) + hidden
        return [
            FuzzedRequest.text(
                "POST", "/v1/push", headers: credentials + [("content-length", "5"), ("content-length", "\(body.count)")], body: body),
            FuzzedRequest.text(
                "POST", "/v1/push", headers: credentials + [("content-length", "\(body.count)"), ("content-length", "5")], body: body),
            FuzzedRequest.text(
                "POST", "/v1/push", headers: credentials + [("transfer-encoding", "chunked"), ("content-length", "5")],
                body: Array("0\r\n\r\n".utf8) + hidden),
            FuzzedRequest.text("POST", "/v1/push", headers: credentials + [("transfer-encoding", "gzip")], body: body),
            FuzzedRequest.text("GET", "/v1/pull?limit=1", headers: credentials + [("authorization", "Bearer ben")]),
        ]
    }

    /// Lines the service logged, shared with its log closure.
    private final class ServiceLog: Sendable {
        let lines = Protected<[String]>([])
    }

    private static func makeServer(log: ServiceLog) throws -> Server {
        let folder = TemporaryFolder()
        let service: SyncService
        do {
            let store = try SQLiteServerStore(path: folder.path("fuzz.sqlite"), durability: .normal)
            let rules = RuleBook(collections: [
                "catalog": PresetRules(read: .public, write: .nobody),
                "notes": PresetRules.publicRead,
                "shared": PresetRules.anyAuthenticatedUser,
                "carts": PresetRules(read: .owner, write: .owner, requiredFields: [BuiltSeeds.path("items")]),
            ])
            service = try SyncService(
                store: store, rules: rules,
                configuration: ServiceConfiguration(
                    limits: wireLimits, log: { line in log.lines.withLock { $0.append(line) } }))
        } catch {
            throw FuzzSetupError("the HTTP target's store could not be made in \(folder.url.path): \(error)")
        }
        return Server(
            folder: folder, handler: SyncHTTPHandler(service: service, authenticator: DevelopmentAuthenticator(), limits: bodyLimits))
    }

    public func check(_ input: [UInt8]) -> String? {
        let request = FuzzedRequest(input).request
        let (response, isHealthCheckDue) = server.withLock { server in
            server.inputs += 1
            return (server.handler.handle(request).answeredHere(), server.inputs % Self.inputsPerHealthCheck == 0)
        }
        if let problem = problem(with: response, to: request) { return problem }
        if isHealthCheckDue, let problem = checkStillWorks() { return "after this input: \(problem)" }
        return nil
    }

    public func checkStillWorks() -> String? {
        let number = healthChecks.withLock {
            $0 += 1; return $0
        }
        let key = DocumentKey(collection: "health", id: "check-\(number)")
        let credentials = ["x-api-key": "fuzz", "authorization": "Bearer fuzz-health"]
        let push: PushRequest
        do {
            push = PushRequest(
                batch: Batch(
                    clientID: "health-\(number)", sequence: 1,
                    changes: [
                        BatchChange(key: key, delta: try .create(["n": .int(Int64(number))], base: .zero), writes: 1)
                    ]), strategy: .merge)
        } catch {
            return "the health check's change was refused: \(error)"
        }
        let requests = [
            HTTPRequest(method: "POST", path: "/v1/push", headers: credentials, body: push.body),
            HTTPRequest(method: "GET", path: "/v1/docs/health/\(key.id)", headers: credentials),
            HTTPRequest(method: "GET", path: "/v1/pull", query: ["collections": "health", "limit": "50"], headers: credentials),
        ]
        for request in requests {
            let response = server.withLock { $0.handler.handle(request).answeredHere() }
            guard response.status == 200 else {
                return
                    "the service no longer answers: \(request.method) \(request.path) got \(response.status) \(String(decoding: response.body, as: UTF8.self))"
            }
            if let problem = problem(with: response, to: request) { return problem }
        }
        let document = server.withLock { $0.handler.handle(requests[1]).answeredHere() }
        guard (try? ServerDocument(body: document.body))?.state.document == ["n": .int(Int64(number))] else {
            return "the health check's document did not read back: \(String(decoding: document.body, as: UTF8.self))"
        }
        server.withLock { server in
            guard server.inputs >= Self.inputsPerStore else { return }
            // A new store bounds the disk a long run takes; a failure keeps the old one.
            if let fresh = try? Self.makeServer(log: serviceLog) { server = fresh }
        }
        return nil
    }

    public func removeFiles() {
        server.withLock { server in try? FileManager.default.removeItem(at: server.folder.url) }
    }

    /// What is wrong with `response`, the answer to `request`: `nil` when the oracle holds.
    func problem(with response: HTTPResponse, to request: HTTPRequest) -> String? {
        let logged = serviceLog.lines.withLock { lines in
            defer { lines = [] }; return lines
        }
        let route = "\(request.method) \(request.path.prefix(80))"
        guard (200...299).contains(response.status) || (400...499).contains(response.status) else {
            return "\(route) was answered \(response.status): \(String(decoding: response.body.prefix(300), as: UTF8.self)) \(logged)"
        }
        let headers = Dictionary(response.headers.map { ($0.name.lowercased(), $0.value) }, uniquingKeysWith: { _, last in last })
        guard headers["content-type"] == "application/json" else { return "\(route): the answer is not JSON: \(headers)" }
        var body = response.body
        if headers["content-encoding"] == "zstd" {
            do {
                body = try Zstd.decompress(body, limit: 64 << 20, maximumWindowLog: 27)
            } catch {
                return "\(route): the zstd answer does not decompress: \(error)"
            }
        }
        if response.status >= 400 {
            guard let error = ErrorBody(body), error.statusCode == response.status, !error.message.isEmpty else {
                return
                    "\(route): the \(response.status) answer is not {\"message\", \"statusCode\"} with its status: \(String(decoding: body.prefix(300), as: UTF8.self))"
            }
            return nil
        }
        do {
            switch request.path {
            case "/v1/health":
                guard HealthResponse(body: body)?.limits != nil else {
                    return "\(route): the health answer is \(String(decoding: body, as: UTF8.self))"
                }
            case "/v1/push":
                let results = try PushResponse(body: body).results
                let sent = try PushRequest(body: try decodedBody(of: request), limits: Self.wireLimits)
                guard results.count == sent.batch.changes.count else {
                    return "\(route): \(results.count) results for \(sent.batch.changes.count) changes"
                }
            case "/v1/pull":
                _ = try PullResponse(body: body)
            default:
                _ = try ServerDocument(body: body)
            }
        } catch {
            return
                "\(route): the \(response.status) answer does not read back (\(error)): \(String(decoding: body.prefix(300), as: UTF8.self))"
        }
        return nil
    }

    private func decodedBody(of request: HTTPRequest) throws -> [UInt8] {
        guard request.headers["content-encoding"]?.lowercased() == "zstd" else { return request.body }
        return try Zstd.decompress(
            request.body, limit: Self.bodyLimits.maximumDecompressedBytes, maximumWindowLog: Self.bodyLimits.maximumWindowLog)
    }
}
