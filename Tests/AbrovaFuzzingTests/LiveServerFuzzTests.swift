import AbrovaCore
import AbrovaServer
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

@testable import AbrovaFuzzing
@testable import AbrovaHTTP

/// The sync server over real HTTP on loopback (libmicrohttpd, the handler, SQLite), fed seeded
/// mutations of raw HTTP/1.1 requests: request lines, headers, lying Content-Lengths, chunked and
/// pipelined bodies, heads framed two ways (request smuggling) or naming two callers. Every answer
/// must be below 500 (but libmicrohttpd's own 505 for a request line naming another HTTP version),
/// or the connection closed without one; a strictly well-formed head framed two ways gets only 4xx
/// answers (its hidden request is never served); no connection may hang; afterwards the server
/// still pushes and pulls, and holds no request. Every eighth request is sent in pieces, a pause
/// between them.
///
/// A request left incomplete (a head without its end, a body shorter than its Content-Length) is
/// closed by libmicrohttpd when the connection times out (1 s here), not when the client stops
/// sending; so requests go out in batches, each on its own connection at once, and are read after.
/// Not the property harness: it runs one case at a time. The run prints its seed; replay with
/// `ABROVA_PROPERTY_BASE_SEED=<seed>`, change the number of cases with `ABROVA_PROPERTY_CASES`.
@Suite(.timeLimit(.minutes(5))) struct LiveServerFuzzTests {
    @Test func mutatedRawRequestsAreAnsweredBelow500OrClosed() throws {
        let live = try FuzzedLiveServer()
        let requests = try HTTPTarget(fixtures: WireCorpus.load()).seeds.map { FuzzedRequest($0).rawHTTP }
        let mutator = Mutator(
            corpus: requests + FuzzedLiveServer.rawSeeds,
            dictionary: FuzzedLiveServer.rawDictionary, maximumSize: 64 << 10)
        let environment = ProcessInfo.processInfo.environment
        let seed = environment["ABROVA_PROPERTY_BASE_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 0...UInt64.max)
        let cases = environment["ABROVA_PROPERTY_CASES"].flatMap { Int($0) } ?? 500
        print("raw HTTP fuzz: \(cases) mutated requests and \(mutator.corpus.count) seeds, ABROVA_PROPERTY_BASE_SEED=\(seed)")
        var random = SplitMix64(seed: seed)
        let inputs = mutator.corpus + (0..<cases).map { _ in mutator.input(using: &random) }
        for start in stride(from: 0, to: inputs.count, by: FuzzedLiveServer.batchSize) {
            let batch = Array(inputs[start..<min(start + FuzzedLiveServer.batchSize, inputs.count)])
            for (input, problem) in zip(batch, live.problems(sending: batch)) {
                guard let problem else { continue }
                Issue.record("ABROVA_PROPERTY_BASE_SEED=\(seed): \(problem)\n  request: \(FuzzInput(bytes: input))")
            }
        }
        try live.checkStillAnswers()
    }
}

/// A sync server on a free loopback port over a SQLite store in a temporary folder, with
/// development authentication and small limits, as the fuzz targets use.
final class FuzzedLiveServer: Sendable {
    let folder = TemporaryFolder()
    let server: HTTPServer
    /// How long a connection may go without an answer or a close.
    static let answerTimeoutSeconds = 10

    init() throws {
        let store = try SQLiteServerStore(path: folder.path("server.sqlite"), durability: .normal)
        let service = try SyncService(store: store, configuration: ServiceConfiguration(limits: HTTPTarget.wireLimits))
        let handler = SyncHTTPHandler(service: service, authenticator: DevelopmentAuthenticator(), limits: HTTPTarget.bodyLimits)
        server = try HTTPServer(
            configuration: HTTPServerConfiguration(
                port: 0, threadCount: 2, maximumBodyBytes: 256 << 10, maximumConcurrentRequests: 2 * Self.batchSize,
                connectionTimeoutSeconds: 1, loopbackOnly: true)
        ) { handler.handle($0) }
    }

    deinit { server.shutdown() }

    /// Requests HTTP lets a client write in more than one way.
    static let rawSeeds: [[UInt8]] = [
        "POST /v1/push HTTP/1.1\r\nHost: a\r\nX-API-Key: k\r\nAuthorization: Bearer ana\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n",
        "GET /v1/health HTTP/1.0\r\n\r\n",
        "GET /v1/health HTTP/1.1\r\nHost: a\r\n\r\nGET /v1/pull?limit=2 HTTP/1.1\r\nHost: a\r\nX-API-Key: k\r\nConnection: close\r\n\r\n",
        "POST /v1/push HTTP/1.1\r\nHost: a\r\nX-API-Key: k\r\nAuthorization: Bearer ana\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
        "GET http://127.0.0.1/v1/health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        "OPTIONS * HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        "GET /v1/pull HTTP/1.1\r\nHost: a\r\nX-API-Key: k\r\nX-Folded: a\r\n b\r\nConnection: close\r\n\r\n",
        "POST /v1/push HTTP/1.1\r\nHost: a\r\nX-API-Key: k\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\n{}GET /v1/health HTTP/1.1\r\nHost: a\r\n\r\n",
        "POST /v1/push HTTP/1.1\r\nHost: a\r\nX-API-Key: k\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\nGET /v1/health HTTP/1.1\r\nHost: a\r\n\r\n",
        "POST /v1/push HTTP/1.1\r\nHost: a\r\nX-API-Key: k\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n",
        "GET /v1/session HTTP/1.1\r\nHost: a\r\nX-API-Key: k\r\nAuthorization: Bearer ana\r\nAuthorization: Bearer ben\r\n\r\n",
        // Heads past the server's own limits (a target over 8 KiB, headers over 32 KiB): 414 and 431 in JSON.
        "GET /v1/docs/carts/" + String(repeating: "i", count: 8_300) + " HTTP/1.1\r\nHost: a\r\nX-API-Key: k\r\n\r\n",
        "POST /v1/push HTTP/1.1\r\nHost: a\r\nX-API-Key: k\r\nX-Pad: " + String(repeating: "p", count: 33_000)
            + "\r\nContent-Length: 2\r\n\r\n{}",
    ].map { Array($0.utf8) }

    /// The words of HTTP/1.1 framing, and the HTTP target's words.
    static let rawDictionary: [[UInt8]] =
        [
            "\r\n", "\r\n\r\n", " HTTP/1.1", " HTTP/1.0", " HTTP/2.0", "Content-Length: ", "Content-Length: 99999999999999999999\r\n",
            "Content-Length: -1\r\n", "Transfer-Encoding: chunked\r\n", "0\r\n\r\n", "ffffffffffffffff\r\n", "Expect: 100-continue\r\n",
            "Connection: keep-alive\r\n", "Host: \r\n", ": ", "GET / HTTP/1.1\r\n\r\n", "Content-Encoding: zstd\r\n",
            "Content-Length: 5\r\n", "Transfer-Encoding: gzip\r\n", "Authorization: Bearer ben\r\n",
        ].map { Array($0.utf8) } + [[0x28, 0xB5, 0x2F, 0xFD]]

    /// Requests sent at once before their answers are read.
    static let batchSize = 100

    /// Sends each request on a new connection (every `piecewiseEvery`th in pieces), says each has
    /// sent all, then reads each until the server closes: `nil` for a request whose answers are all
    /// below 500 (or that got none) and, for a head framed two ways, all 4xx; otherwise what is wrong.
    func problems(sending requests: [[UInt8]], piecewiseEvery: Int = 8) -> [String?] {
        let connections = requests.enumerated().map { index, request -> Result<RawHTTPConnection, any Error> in
            Result {
                let connection = try RawHTTPConnection(port: server.port, receiveTimeoutSeconds: Self.answerTimeoutSeconds)
                // A server that closes early (a refused head) makes the rest of the send fail: not a finding.
                for piece in index % piecewiseEvery == 0 ? Self.pieces(of: request) : [request[...]] {
                    if piece.startIndex > 0 { usleep(Self.pauseBetweenPieces) }
                    try? connection.send(Array(piece))
                }
                connection.finishSending()
                return connection
            }
        }
        return zip(requests, connections).map { request, connection in
            do {
                let stream = try connection.get().readUntilClosed()
                return Self.problem(with: stream) ?? Self.smugglingProblem(with: stream, to: request)
            } catch {
                return "no answer and no close within \(Self.answerTimeoutSeconds) s: \(error)"
            }
        }
    }

    /// Microseconds between the pieces of a request sent in pieces: well under the 1 s timeout.
    static let pauseBetweenPieces: UInt32 = 30_000

    /// The request cut after its first byte and at its thirds: a head arriving in parts.
    static func pieces(of request: [UInt8]) -> [ArraySlice<UInt8>] {
        let cuts = Set([0, min(1, request.count), request.count / 3, 2 * request.count / 3, request.count]).sorted()
        return zip(cuts, cuts.dropFirst()).compactMap { start, end in start < end ? request[start..<end] : nil }
    }

    /// What is wrong with the answers to a request whose head is framed two ways or names two
    /// callers: anything but 4xx answers means the body's hidden request may have been served.
    static func smugglingProblem(with stream: [UInt8], to request: [UInt8]) -> String? {
        guard let head = StrictHead(request), head.isAmbiguous else { return nil }
        let statuses = statuses(in: stream)
        guard statuses.isEmpty || statuses.contains(where: { !(400...499).contains($0) }) else { return nil }
        return "a head framed two ways was answered \(statuses): \(FuzzFinding.preview(Array(stream.prefix(300))))"
    }

    /// What is wrong with what a server sent on one connection: `nil` when every answer is below 500.
    static func problem(with stream: [UInt8]) -> String? {
        guard !stream.isEmpty else { return nil }
        guard stream.starts(with: Array("HTTP/1.".utf8)) else {
            return "the answer is not HTTP: \(FuzzFinding.preview(Array(stream.prefix(300))))"
        }
        for status in statuses(in: stream) where !(100...499).contains(status) {
            // libmicrohttpd answers a request line naming another HTTP version (HTTP/2.0) itself,
            // with the status HTTP defines for it, before any of the server's code runs.
            if status == 505, stream.firstRange(of: Array("Requested HTTP version is not supported".utf8)) != nil { continue }
            return "answered \(status): \(FuzzFinding.preview(Array(stream.prefix(300))))"
        }
        return nil
    }

    /// The status of every status line in `stream` (a line that starts `HTTP/1.x NNN`): read by
    /// lines rather than by Content-Length, because libmicrohttpd 0.9.75 writes the head of its
    /// own 400 for a malformed Content-Length twice, the second inside the first one's body.
    static func statuses(in stream: [UInt8]) -> [Int] {
        let lines = String(decoding: stream, as: UTF8.self).components(separatedBy: "\r\n")
        return lines.compactMap { line in
            let parts = line.split(separator: " ", maxSplits: 2)
            guard parts.count >= 2, parts[0] == "HTTP/1.0" || parts[0] == "HTTP/1.1", parts[1].count == 3 else { return nil }
            return Int(parts[1])
        }
    }

    /// A new client pushes a document and pulls it back, and no request is left in the server.
    func checkStillAnswers() throws {
        let key = DocumentKey(collection: "after", id: "fuzz")
        let push = PushRequest(
            batch: Batch(
                clientID: "after-fuzz", sequence: 1,
                changes: [
                    BatchChange(key: key, delta: try .create(["n": 1], base: .zero), writes: 1)
                ]), strategy: .merge)
        let pushed = try send("POST /v1/push", body: push.body)
        #expect(pushed.status == 200, "\(String(decoding: pushed.body, as: UTF8.self))")
        let pulled = try send("GET /v1/pull?collections=after")
        #expect(pulled.status == 200)
        #expect(try PullResponse(body: pulled.body).documents.map(\.key) == [key])
        let deadline = ContinuousClock.now + .seconds(10)
        while (server.requestsInFlight > 0 || server.liveRequestStates > 0) && ContinuousClock.now < deadline {
            usleep(10_000)
        }
        #expect(
            server.requestsInFlight == 0 && server.liveRequestStates == 0,
            "\(server.requestsInFlight) requests in flight, \(server.liveRequestStates) request states alive")
    }

    private func send(_ requestLine: String, body: [UInt8] = []) throws -> RawHTTPConnection.Response {
        let connection = try RawHTTPConnection(port: server.port, receiveTimeoutSeconds: Self.answerTimeoutSeconds)
        let head =
            "\(requestLine) HTTP/1.1\r\nHost: a\r\nConnection: close\r\nX-API-Key: k\r\nAuthorization: Bearer after\r\nContent-Length: \(body.count)\r\n\r\n"
        try connection.send(Array(head.utf8) + body)
        return try connection.readResponse()
    }
}

/// A request's first head when it is strictly well formed (a request line `METHOD target HTTP/1.x`,
/// CRLF line ends, `token: value` fields, no folded lines): one libmicrohttpd reads as this does.
/// A head less strict is left to the other oracles.
struct StrictHead {
    /// Field values by lowercased name, in order.
    var fields: [(name: String, value: String)] = []

    init?(_ request: [UInt8]) {
        guard let end = request.firstRange(of: Array("\r\n\r\n".utf8)) else { return nil }
        let head = request[..<end.lowerBound]
        guard !head.contains(where: { $0 == 0 || $0 >= 0x80 }) else { return nil }
        let lines = String(decoding: head, as: UTF8.self).components(separatedBy: "\r\n")
        guard !lines.contains(where: { $0.contains("\n") || $0.contains("\r") }),
            let requestLine = lines.first, Self.isRequestLine(requestLine)
        else { return nil }
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":"), Self.isToken(line[..<colon]) else { return nil }
            fields.append((line[..<colon].lowercased(), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
    }

    /// Two Content-Lengths, two Transfer-Encodings or two Authorizations; Transfer-Encoding with
    /// Content-Length, or other than chunked.
    var isAmbiguous: Bool {
        let counts = Dictionary(fields.map { ($0.name, 1) }, uniquingKeysWith: +)
        if ["content-length", "transfer-encoding", "authorization"].contains(where: { counts[$0, default: 0] > 1 }) { return true }
        guard let coding = fields.first(where: { $0.name == "transfer-encoding" })?.value else { return false }
        return counts["content-length"] != nil || coding.lowercased() != "chunked"
    }

    private static func isRequestLine(_ line: String) -> Bool {
        let parts = line.split(separator: " ", omittingEmptySubsequences: false)
        return parts.count == 3 && isToken(parts[0]) && !parts[1].isEmpty && (parts[2] == "HTTP/1.1" || parts[2] == "HTTP/1.0")
    }

    private static func isToken(_ text: Substring) -> Bool {
        !text.isEmpty
            && text.unicodeScalars.allSatisfy { scalar in
                ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) || ("0"..."9").contains(scalar)
                    || "!#$%&'*+-.^_`|~".unicodeScalars.contains(scalar)
            }
    }
}
