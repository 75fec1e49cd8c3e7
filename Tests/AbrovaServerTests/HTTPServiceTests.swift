import AbrovaCore
import AbrovaHTTP
import AbrovaTestSupport
import AbrovaWire
import Dispatch
import Foundation
import Testing

@testable import AbrovaServer

/// The sync server over real HTTP on loopback, on a fresh store of one kind, with a raw HTTP client.
final class LiveServer: Sendable {
    let fixture: ServiceFixture
    let server: HTTPServer
    static let apiKey = "test-key"

    init(
        _ kind: StoreKind, rules: RuleBook = RuleBook(), limits: WireLimits = WireLimits(), body: BodyLimits = BodyLimits(),
        http: HTTPServerConfiguration = HTTPServerConfiguration(port: 0, loopbackOnly: true),
        watchIdleTime: Duration = .seconds(25), maximumWatches: Int = 10_000,
        afterPushCommit: (@Sendable (PushRequest) throws -> Void)? = nil, log: @escaping @Sendable (String) -> Void = { _ in }
    ) throws {
        fixture = try ServiceFixture(
            kind, rules: rules, limits: limits, watchIdleTime: watchIdleTime, maximumWatches: maximumWatches,
            afterPushCommit: afterPushCommit)
        let authenticator = ConfiguredAuthenticator(apiKeys: [Self.apiKey], tokens: ["token-ana": "ana", "token-ben": "ben"])
        let handler = SyncHTTPHandler(service: fixture.service, authenticator: authenticator, limits: body, log: log)
        server = try HTTPServer(configuration: http) { handler.handle($0) }
    }

    deinit { server.shutdown() }

    /// Sends one request on a new connection and reads the answer, decompressing a zstd body.
    func send(
        _ method: String, _ target: String, as user: String? = "ana", headers: [String: String] = [:],
        body: [UInt8] = []
    ) throws -> RawHTTPConnection.Response {
        let connection = try RawHTTPConnection(port: server.port)
        var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nX-API-Key: \(Self.apiKey)\r\n"
        if let user { head += "Authorization: Bearer token-\(user)\r\n" }
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if headers["Content-Length"] == nil { head += "Content-Length: \(body.count)\r\n" }
        var response: RawHTTPConnection.Response
        do {
            try connection.send(Array((head + "\r\n").utf8) + body)
            response = try connection.readResponse()
        } catch var failure as RawHTTPConnection.Failure {
            failure.description = "\(method) \(target): \(failure.description)"
            throw failure
        }
        if response.headers["content-encoding"] == "zstd" {
            response.body = try Zstd.decompress(response.body, limit: 64 << 20)
        }
        return response
    }

    func push(_ request: PushRequest, as user: String = "ana") throws -> RawHTTPConnection.Response {
        try send("POST", "/v1/push", as: user, body: request.body)
    }

    /// Every document the user may read, pulled page by page over HTTP.
    func pullAll(as user: String = "ana", limit: Int = 100) throws -> [ServerDocument] {
        var cursor = ""
        var documents: [ServerDocument] = []
        while true {
            let response = try send("GET", "/v1/pull?limit=\(limit)&cursor=\(cursor)", as: user)
            guard response.status == 200 else { throw Refusal(statusCode: response.status, message: "pull failed") }
            let page = try PullResponse(body: response.body)
            documents += page.documents
            cursor = page.cursor
            if !page.hasMore { return documents }
        }
    }
}

extension RawHTTPConnection.Response {
    var message: String { Refusal(body: body)?.message ?? String(decoding: body, as: UTF8.self) }
}

extension ServerSuites {
    @Suite struct HTTPServiceTests {
        let cart = DocumentKey(collection: "carts", id: "c1")

        @Test(arguments: StoreKind.available)
        func aCommitAnswered500IsRetriedAndTheChangeExistsExactlyOnce(kind: StoreKind) throws {
            let failNext = Locked(true)
            let live = try LiveServer(
                kind,
                afterPushCommit: { _ in
                    if failNext.update({ flag in
                        defer { flag = false }; return flag
                    }) {
                        throw CancellationError()
                    }
                })
            let request = makeRequest(
                [
                    (cart, try .create(["items": ["milk"]], base: .zero)),
                    (DocumentKey(collection: "carts", id: "c2"), try .create(["n": 1], base: .zero)),
                ], sequence: 1)
            let failed = try live.push(request)
            #expect(failed.status == 500)
            let retried = try live.push(request)
            let again = try live.push(request)
            #expect(retried.status == 200 && again.body == retried.body)
            let results = try PushResponse(body: retried.body).results
            guard case .applied(let version, nil, _) = results[0] else { Issue.record("\(results)"); return }
            let documents = try live.pullAll()
            #expect(documents.count == 2 && documents[0].version == version && documents[0].state.document == ["items": ["milk"]])
            #expect(try live.fixture.service.store.write { try $0.nextVersion() } == Version(3)) // two changes, nothing more
        }

        /// A push waits on the store on a worker thread: with one connection thread, other
        /// clients' requests are answered while it waits (a database far away, an fsync), and the
        /// push is answered once its work ends.
        @Test(arguments: StoreKind.available)
        func aPushWaitingOnTheStoreLeavesTheConnectionThreadToOthers(kind: StoreKind) throws {
            let inside = DispatchSemaphore(value: 0)
            let gate = DispatchSemaphore(value: 0)
            let live = try LiveServer(
                kind, http: HTTPServerConfiguration(port: 0, threadCount: 1, loopbackOnly: true),
                afterPushCommit: { _ in
                    inside.signal()
                    gate.wait()
                })
            let pushing = try RawHTTPConnection(port: live.server.port)
            let body = makeRequest([(cart, try .create(["items": ["milk"]], base: .zero))], sequence: 1).body
            try pushing.send(
                Array(
                    ("POST /v1/push HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: \(LiveServer.apiKey)\r\n"
                        + "Authorization: Bearer token-ana\r\nContent-Length: \(body.count)\r\n\r\n").utf8) + body)
            inside.wait()
            var isOpen = false
            defer { if !isOpen { gate.signal() } } // a failure must not leave the push waiting
            let others = try RawHTTPConnection(port: live.server.port, receiveTimeoutSeconds: 5)
            try others.send("GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            let health = try others.readResponse()
            try others.send(
                "GET /v1/pull HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: \(LiveServer.apiKey)\r\nAuthorization: Bearer token-ben\r\n\r\n")
            let pull = try others.readResponse()
            gate.signal()
            isOpen = true
            let pushed = try pushing.readResponse()
            #expect(health.status == 200)
            #expect(pull.status == 200)
            #expect(pushed.status == 200)
            #expect(pushed.headers["x-request-id"] != nil)
            #expect(try live.pullAll().count == 1)
        }

        @Test(arguments: StoreKind.available)
        func badInputIsAnswered4xxAndChangesNothing(kind: StoreKind) throws {
            let live = try LiveServer(
                kind, limits: WireLimits(maximumChanges: 10),
                body: BodyLimits(maximumDecompressedBytes: 1 << 20, maximumWindowLog: 22),
                http: HTTPServerConfiguration(port: 0, maximumBodyBytes: 256 << 10, loopbackOnly: true))
            #expect(try live.push(makeRequest([(cart, try .create(["qty": 1], base: .zero))], sequence: 1)).status == 200)
            let before = try live.pullAll()

            func push(_ text: String) -> [UInt8] { Array(text.utf8) }
            let valid =
                #"{"batchSeq":2,"changes":[{"collection":"carts","delta":{"create":0,"assignments":{"n":[1,0]}},"id":"x"}],"clientId":"client-a","strategy":"merge"}"#
            func replacing(_ old: String, _ new: String) -> [UInt8] { Array(valid.replacingOccurrences(of: old, with: new).utf8) }
            var deep = "1"
            for _ in 0..<40 { deep = "[\(deep)]" }
            let bomb = ZstdFrames.windowedFrame(repeating: [UInt8](repeating: 0x20, count: 1 << 20), times: 64)
            let window = ZstdFrames.windowedFrame(repeating: Array(valid.utf8), times: 1, windowLog: 24)
            let lying = ZstdFrames.replacingContentSize(of: try Zstd.compress(Array(valid.utf8)), with: 20)
            let cases: [(name: String, headers: [String: String], body: [UInt8], status: Int, mentions: String)] = [
                ("malformed JSON", [:], push(#"{"batchSeq":2,"#), 400, "JSON"),
                ("not an object", [:], push("[1,2]"), 400, "object"),
                ("wrong type", [:], replacing(#""batchSeq":2"#, #""batchSeq":"2""#), 400, "batchSeq"),
                ("negative number", [:], replacing(#""batchSeq":2"#, #""batchSeq":-2"#), 400, "batchSeq"),
                ("unknown operation", [:], replacing(#""create":0"#, #""upsert":0"#), 400, "upsert"),
                ("unknown strategy", [:], replacing(#""merge""#, #""lastWriteWins""#), 400, "strategy"),
                ("invalid UTF-8", [:], Array(valid.utf8.prefix(100)) + [0xFF, 0xFE] + Array(valid.utf8.dropFirst(100)), 400, "UTF-8"),
                ("deep nesting", [:], replacing(#""n":[1,0]"#, #""n":[\#(deep),0]"#), 400, "deep"),
                ("corrupt zstd", ["Content-Encoding": "zstd"], [0x28, 0xB5, 0x2F, 0xFD] + Array(repeating: 0x41, count: 40), 400, "zstd"),
                ("zstd bomb", ["Content-Encoding": "zstd"], bomb, 413, "maximumDecompressedBytes"),
                ("lying content size", ["Content-Encoding": "zstd"], lying, 400, "zstd"),
                ("zstd window too large", ["Content-Encoding": "zstd"], window, 400, "maximumWindowLog"),
                ("unknown encoding", ["Content-Encoding": "br"], push(valid), 415, "br"),
                ("oversized body", [:], Array(repeating: 0x20, count: 300 << 10), 413, "maximumBodyBytes"),
                (
                    "too many changes", [:],
                    replacing(
                        #""changes":[{"#,
                        #""changes":[\#(String(repeating: #"{"collection":"carts","delta":{"create":0},"id":"y"},"#, count: 10)){"#), 413,
                    "maximumChanges"
                ),
                (
                    "SQL in a collection", [:], replacing(#""collection":"carts""#, #""collection":"carts'; DROP TABLE documents; --""#),
                    400, "collection"
                ),
                ("SQL in an id", [:], replacing(#""id":"x""#, #""id":"x' OR '1'='1""#), 400, "id"),
                ("SQL in a field name", [:], replacing(#""n":[1,0]"#, #""n'; DELETE FROM documents; --":[1,0]"#), 400, "field"),
                ("server-owned version", [:], replacing(#""id":"x""#, #""id":"x","version":99"#), 400, "version"),
                ("server-owned owner", [:], replacing(#""id":"x""#, #""id":"x","owner":"ben""#), 400, "owner"),
            ]
            for item in cases {
                let response = try live.send("POST", "/v1/push", headers: item.headers, body: item.body)
                #expect(response.status == item.status, "\(item.name): \(response.status) \(response.message)")
                #expect(response.message.contains(item.mentions), "\(item.name): \(response.message)")
            }
            for (target, mentions) in [
                ("/v1/pull?limit=-1", "limit"), ("/v1/pull?limit=99999999999999999999", "limit"),
                ("/v1/pull?limit=ten", "limit"), ("/v1/pull?cursor=c1.AAAAAAAAAAEAAAAAAAAAAAAAAAAAAAAA", "cursor"),
                ("/v1/pull?collections=carts%27%3B%20DROP%20TABLE%20documents", "collection"), ("/v1/pull?form=data", "form"),
                ("/v1/docs/carts/x%27%20OR%20%271%27%3D%271", "id"),
            ] {
                let response = try live.send("GET", target)
                #expect(response.status == 400 && response.message.contains(mentions), "\(target): \(response.status) \(response.message)")
            }
            #expect(try live.pullAll() == before)
            #expect(try live.fixture.service.store.write { try $0.nextVersion() } == Version(2))
        }

        @Test(arguments: StoreKind.available)
        func credentialsAreCheckedOnEveryRoute(kind: StoreKind) throws {
            let live = try LiveServer(kind)
            #expect(try live.send("GET", "/v1/health", as: nil).status == 200)
            let noKey = try RawHTTPConnection(port: live.server.port)
            try noKey.send("GET /v1/pull HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer token-ana\r\n\r\n")
            #expect(try noKey.readResponse().status == 401)
            #expect(try live.send("GET", "/v1/pull", as: "nobody").status == 401)
            #expect(try live.send("GET", "/v1/pull", as: nil, headers: ["Authorization": "Basic YTpi"]).status == 401)
            #expect(try live.push(makeRequest([(cart, try .create(["n": 1], base: .zero))], sequence: 1), as: "anonymous").status == 401)
            #expect(try live.send("DELETE", "/v1/docs/carts/c1").status == 405)
            #expect(try live.send("GET", "/v2/anything").status == 404)
        }

        @Test(arguments: StoreKind.available)
        func userBNeverReadsOrWritesUserAsPrivateDocuments(kind: StoreKind) throws {
            let live = try LiveServer(kind)
            let anasBatch = makeRequest([(cart, try .create(["secret": "ana's"], base: .zero))], client: "ana-phone", sequence: 1)
            #expect(try live.push(anasBatch).status == 200)
            // Hidden reads as missing: the same status and words as an id nobody used.
            let hidden = try live.send("GET", "/v1/docs/carts/c1", as: "ben")
            let none = try live.send("GET", "/v1/docs/carts/c2", as: "ben")
            #expect(
                hidden.status == 404
                    && String(decoding: hidden.body, as: UTF8.self)
                        == String(decoding: none.body, as: UTF8.self)
                        .replacingOccurrences(of: "carts/c2", with: "carts/c1")
            )
            #expect(try live.pullAll(as: "ben").isEmpty)
            let raw = try live.send("GET", "/v1/pull", as: "ben")
            #expect(raw.status == 200 && !String(decoding: raw.body, as: UTF8.self).contains("carts")) // not even the id
            // Ben replays Ana's batch, or writes under her client id: his own client of that id,
            // whose writes the rules refuse as they would under any id.
            let replay = try live.push(anasBatch, as: "ben")
            guard case .rejected(.notFound, "no document carts/c1")? = try PushResponse(body: replay.body).results.first else {
                Issue.record("\(String(decoding: replay.body, as: UTF8.self))")
                return
            }
            let bens = makeRequest(
                [(cart, try .update(set: [path("secret"): "ben's"], base: .zero))], client: "ana-phone", sequence: 2,
                strategy: .clientWins)
            let results = try PushResponse(body: try live.push(bens, as: "ben").body).results
            guard case .rejected(.notFound, "no document carts/c1") = results[0] else { Issue.record("\(results)"); return }
            let document = try ServerDocument(body: try live.send("GET", "/v1/docs/carts/c1").body)
            #expect(document.state.document == ["secret": "ana's"])
        }

        /// A device keeps states, and a document's data follows from its state: it asks for the
        /// state alone, and gets the same documents as a reader of both.
        @Test(arguments: StoreKind.available)
        func aPullOfStatesAloneSendsEachDocumentOnce(kind: StoreKind) throws {
            let live = try LiveServer(kind)
            let gone = DocumentKey(collection: "carts", id: "c2")
            let created = makeRequest(
                [
                    (cart, try .create(["items": ["milk", "eggs"], "qty": ["milk": 2]], base: .zero)),
                    (gone, try .create(["n": 1], base: .zero)),
                ],
                sequence: 1)
            #expect(try live.push(created).status == 200)
            #expect(try live.push(makeRequest([(gone, .delete(base: Version(2)))], sequence: 2)).status == 200)
            let full = try live.send("GET", "/v1/pull")
            let states = try live.send("GET", "/v1/pull?form=state")
            #expect(full.status == 200 && states.status == 200, "\(states.status) \(states.message)")
            #expect(String(decoding: full.body, as: UTF8.self).contains(#""data":"#))
            #expect(!String(decoding: states.body, as: UTF8.self).contains(#""data":"#))
            #expect(states.body.count < full.body.count)
            #expect(try PullResponse(body: states.body) == PullResponse(body: full.body))
            #expect(try live.send("GET", "/v1/pull?form=full").body == full.body)
        }

        @Test(arguments: StoreKind.available)
        func bodiesTravelWithZstdBothWays(kind: StoreKind) throws {
            let live = try LiveServer(kind)
            let items: [Value] = (0..<200).map { .string("item number \($0)") }
            let request = makeRequest([(cart, try .create(["items": .array(items)], base: .zero))], sequence: 1)
            let compressed = try Zstd.compress(request.body)
            let response = try live.send(
                "POST", "/v1/push", headers: ["Content-Encoding": "zstd", "Accept-Encoding": "gzip, zstd"],
                body: compressed)
            #expect(response.status == 200)
            #expect(compressed.count < request.body.count / 3)
            let packed = try live.send("GET", "/v1/docs/carts/c1", headers: ["Accept-Encoding": "gzip, zstd"])
            #expect(packed.headers["content-encoding"] == "zstd")
            #expect(try ServerDocument(body: packed.body).state.document == ["items": .array(items)]) // send() decompressed it
            let plain = try live.send("GET", "/v1/docs/carts/c1")
            #expect(plain.headers["content-encoding"] == nil)
            #expect(try ServerDocument(body: plain.body).state.document == ["items": .array(items)])
        }

        @Test(arguments: StoreKind.available)
        func anOverloadedServerAnswers429WithRetryAfter(kind: StoreKind) async throws {
            let gate = DispatchSemaphore(value: 0)
            let entered = Locked(false)
            let live = try LiveServer(
                kind, http: HTTPServerConfiguration(port: 0, maximumConcurrentRequests: 1, loopbackOnly: true),
                afterPushCommit: { _ in
                    entered.update { $0 = true }
                    _ = gate.wait(timeout: .now() + 30) // a server thread, not a task's
                })
            let request = makeRequest([(cart, try .create(["n": 1], base: .zero))], sequence: 1)
            let held = Task { try await onNewThread { try live.push(request) } }
            let deadline = ContinuousClock.now + .seconds(30)
            while !entered.value, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
            let refused = try await onNewThread { try live.send("GET", "/v1/pull") }
            #expect(refused.status == 429 && refused.headers["retry-after"] == "1")
            gate.signal()
            #expect(try await held.value.status == 200)
        }

        @Test(arguments: StoreKind.available)
        func concurrentPushersGetUniqueVersionsInCommitOrderAndAConcurrentPullerMissesNothing(kind: StoreKind) async throws {
            let live = try LiveServer(kind)
            let shared = try (0..<3).map {
                (DocumentKey(collection: "carts", id: "shared\($0)"), try DocumentDelta.create(["title": "shared"], base: .zero))
            }
            #expect(try live.push(makeRequest(shared, client: "creator", sequence: 1)).status == 200)
            let isQuiet = Locked(false)
            let clients = 4
            let batches = 15
            let pusherTasks = (0..<clients).map { client in
                Task {
                    try await onNewThread {
                        var versions: [Version] = []
                        for sequence in 1...batches {
                            let changes = try (0..<3).map { index in
                                // Documents shared between clients are changed again and again.
                                (
                                    DocumentKey(collection: "carts", id: "shared\(index)"),
                                    try DocumentDelta.update(setAdd: [path("items"): [.string("c\(client)-\(sequence)")]], base: .zero)
                                )
                            }
                            let response = try live.push(makeRequest(changes, client: "client-\(client)", sequence: Int64(sequence)))
                            for case .applied(let version, _, _) in try PushResponse(body: response.body).results {
                                versions.append(version)
                            }
                        }
                        return versions
                    }
                }
            }
            // The puller follows the cursor while the pushers run; what it ends with must be the final state.
            let puller = Task {
                try await onNewThread {
                    var seen: [DocumentKey: ServerDocument] = [:]
                    var cursor = ""
                    var lastVersion = Version.zero
                    var rounds = 0
                    while true {
                        // Read before the pull: only a pull sent after the last push was answered must see it.
                        let wasQuiet = isQuiet.value
                        let response = try live.send("GET", "/v1/pull?limit=2&cursor=\(cursor)")
                        let page = try PullResponse(body: response.body)
                        for document in page.documents {
                            #expect(document.version > lastVersion, "versions go up within and across pages")
                            lastVersion = document.version
                            seen[document.key] = document
                        }
                        cursor = page.cursor
                        rounds += 1
                        if !page.hasMore {
                            if wasQuiet { return (seen, rounds) }
                            Thread.sleep(forTimeInterval: 0.002)
                        }
                    }
                }
            }
            var all: [Version] = []
            for task in pusherTasks { all += try await task.value }
            isQuiet.update { $0 = true }
            let (seen, rounds) = try await puller.value
            #expect(all.count == clients * batches * 3 && Set(all).count == all.count)
            let final = try live.pullAll()
            #expect(Dictionary(uniqueKeysWithValues: final.map { ($0.key, $0) }) == seen, "after \(rounds) pulls")
            for document in final {
                #expect(document.state.document?[path("items")]?.arrayValue?.count == clients * batches)
            }
        }

        @Test func whatTheClientSentIsLoggedEscapedEvenWithoutCredentials() throws {
            let lines = Locked<[String]>([])
            let live = try LiveServer(.sqlite, log: { line in lines.update { $0.append(line) } })
            let connection = try RawHTTPConnection(port: live.server.port)
            try connection.send(Array("GET /v1/\u{1b}[31mred\u{7}\\x1b\u{7f} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".utf8))
            #expect(try connection.readResponse().status == 404)
            let line = try #require(lines.value.first)
            #expect(line.hasPrefix(#"GET /v1/\x1b[31mred\x07\\x1b\x7f 404 "#), "\(line)")
            #expect(!line.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F })
        }

        @Test func aDevelopmentCallerIsLoggedEscaped() throws {
            let lines = Locked<[String]>([])
            let fixture = try ServiceFixture(.sqlite)
            let handler = SyncHTTPHandler(
                service: fixture.service, authenticator: DevelopmentAuthenticator(),
                log: { line in lines.update { $0.append(line) } })
            let response = handler.handle(
                HTTPRequest(path: "/v1/session", headers: ["x-api-key": "k", "authorization": "Bearer ana\u{1b}[2J\u{9b}\n"]))
            #expect(response.status == 200)
            let line = try #require(lines.value.first)
            #expect(line.hasSuffix(#"caller=ana\x1b[2J\u{9b}\x0a"#), "\(line)")
        }
    }
}
