import AbrovaCore
import AbrovaHTTP
import AbrovaServer
import AbrovaTestSupport
import AbrovaWire
import Dispatch
import Foundation
import Testing

@testable import AbrovaSync

func path(_ dotted: String) -> FieldPath { try! FieldPath(dotted) }

func makeRequest(
    _ changes: [(DocumentKey, DocumentDelta)], client: String = "client-a", sequence: Int64,
    strategy: ConflictStrategy = .merge
) -> PushRequest {
    PushRequest(
        batch: Batch(clientID: client, sequence: sequence, changes: changes.map { BatchChange(key: $0.0, delta: $0.1, writes: 1) }),
        strategy: strategy)
}

/// The failure `body` throws; `nil` when it succeeds.
func failure<Result>(of body: () async throws -> Result) async -> TransportFailure? {
    do {
        _ = try await body()
        return nil
    } catch let error as TransportFailure {
        return error
    } catch {
        Issue.record("not a TransportFailure: \(error)")
        return nil
    }
}

/// A protocol error answer.
private func json(_ status: Int, _ message: String, headers: [(name: String, value: String)] = []) -> HTTPResponse {
    .error(status: status, message: message, headers: headers)
}

/// A text answer, as a proxy would give.
private func text(_ status: Int, _ text: String, headers: [(name: String, value: String)] = []) -> HTTPResponse {
    HTTPResponse(status: status, headers: [("Content-Type", "text/html")] + headers, body: Array(text.utf8))
}

extension TransportFailure {
    /// The reason of an `.unreachable`, `nil` for the other cases.
    var unreachableReason: String? {
        if case .unreachable(let reason) = self { return reason }
        return nil
    }
}

/// The transport against the real server on loopback.
@Suite struct HTTPTransportTests {
    let cart = DocumentKey(collection: "carts", id: "c1")

    @Test(arguments: HTTPExchangeKind.available)
    func aPushIsSentWithTheProtocolsHeadersAndItsAnswerDecoded(_ exchange: HTTPExchangeKind) async throws {
        let live = try LiveSyncServer()
        let transport = live.makeTransport(exchange: exchange, as: "ana")
        let request = makeRequest([(cart, try .create(["items": ["milk"]], base: .zero))], sequence: 1)
        let answer = try await transport.push(body: request.body)
        guard case .applied(let version, nil, [])? = answer.results.first, answer.results.count == 1 else {
            Issue.record("\(answer)")
            return
        }
        let sent = try #require(live.exchanges.last)
        #expect(sent.method == "POST" && sent.path == "/v1/push" && sent.status == 200)
        #expect(sent.headers["x-api-key"] == LiveSyncServer.apiKey && sent.headers["authorization"] == "Bearer token-ana")
        #expect(sent.headers["accept-encoding"] == "zstd" && sent.headers["content-type"] == "application/json")
        #expect(sent.headers["content-encoding"] == nil && sent.bodyBytes == request.body.count) // under 1 KiB: plain

        let document = try #require(try await transport.document(cart))
        #expect(document.version == version && document.state.document == ["items": ["milk"]])
        // A retry of the same bytes gets the same results: the stored answer, which carries no cursor.
        #expect(answer.cursor != nil, "nothing changed before the batch on this server")
        #expect(try await transport.push(body: request.body) == PushResponse(results: answer.results))
        await live.stop()
    }

    @Test(arguments: HTTPExchangeKind.available)
    func aLargePushTravelsCompressedAndALargePageComesBackCompressed(_ exchange: HTTPExchangeKind) async throws {
        let live = try LiveSyncServer()
        let transport = live.makeTransport(exchange: exchange, as: "ana")
        let items: [Value] = (0..<300).map { .string("item number \($0)") }
        let request = makeRequest([(cart, try .create(["items": .array(items)], base: .zero))], sequence: 1)
        #expect(request.body.count > 4_096)
        let answer = try await transport.push(body: request.body)
        guard case .applied? = answer.results.first else { Issue.record("\(answer)"); return }
        let push = try #require(live.exchanges.last)
        #expect(push.headers["content-encoding"] == "zstd")
        #expect(push.bodyBytes < request.body.count / 3, "\(push.bodyBytes) bytes on the wire for \(request.body.count)")

        let page = try await transport.pull(cursor: nil, limit: 100)
        #expect(page.documents.map(\.key) == [cart] && page.documents[0].state.document == ["items": .array(items)])
        let pull = try #require(live.exchanges.last)
        #expect(pull.answerHeaders["content-encoding"] == "zstd")
        #expect(pull.answerBytes < page.body.count / 3, "\(pull.answerBytes) bytes on the wire for \(page.body.count)")
        await live.stop()
    }

    @Test(arguments: HTTPExchangeKind.available)
    func pagesFollowTheirCursors(_ exchange: HTTPExchangeKind) async throws {
        let live = try LiveSyncServer()
        let transport = live.makeTransport(exchange: exchange, as: "ana")
        let keys = (1...5).map { DocumentKey(collection: "notes", id: "n\($0)") }
        _ = try await transport.push(body: makeRequest(try keys.map { ($0, try .create(["n": 1], base: .zero)) }, sequence: 1).body)

        var pages: [PullResponse] = []
        var cursor: String?
        repeat {
            let page = try await transport.pull(cursor: cursor, limit: 2)
            pages.append(page)
            cursor = page.cursor
        } while pages.last!.hasMore && pages.count < 10
        #expect(pages.map(\.documents.count) == [2, 2, 1] && pages.flatMap(\.documents).map(\.key) == keys)
        // Cursors are opaque, but Spec/protocol.md makes them `c1.` and URL-safe base64.
        #expect(
            pages.allSatisfy {
                $0.cursor.hasPrefix("c1.") && $0.cursor.dropFirst(3).allSatisfy { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }
            })
        let after = try await transport.pull(cursor: cursor, limit: 2)
        #expect(after.documents.isEmpty && !after.hasMore)

        var tampered = Array(pages[0].cursor)
        tampered[5] = tampered[5] == "A" ? "B" : "A"
        guard case .refused(.invalid, let message)? = await failure(of: { try await transport.pull(cursor: String(tampered), limit: 2) })
        else {
            Issue.record("a tampered cursor was not refused")
            return
        }
        #expect(message.contains("cursor"))
        guard case .refused(.invalid, let limit)? = await failure(of: { try await transport.pull(cursor: nil, limit: 0) }) else {
            Issue.record("limit 0 was not refused")
            return
        }
        #expect(limit.contains("limit"))
        await live.stop()
    }

    @Test(arguments: HTTPExchangeKind.available)
    func aCursorPastRemovedTombstonesIsRefused410(_ exchange: HTTPExchangeKind) async throws {
        let live = try LiveSyncServer(tombstoneRetention: 3_600)
        let transport = live.makeTransport(exchange: exchange, as: "ana")
        _ = try await transport.push(body: makeRequest([(cart, try .create(["qty": 1], base: .zero))], sequence: 1).body)
        let page = try await transport.pull(cursor: nil, limit: 10)
        _ = try await transport.push(body: makeRequest([(cart, .delete(base: page.documents[0].version))], sequence: 2).body)
        live.advance(by: 7_200)
        try live.service.purgeExpiredTombstones()
        guard case .refused(.resyncRequired, let message)? = await failure(of: { try await transport.pull(cursor: page.cursor, limit: 10) })
        else {
            Issue.record("no 410")
            return
        }
        #expect(message.contains("resync"))
        await live.stop()
    }

    @Test(arguments: HTTPExchangeKind.available)
    func documentIdsArePercentEncodedAndAMissingDocumentIsNil(_ exchange: HTTPExchangeKind) async throws {
        let live = try LiveSyncServer()
        let transport = live.makeTransport(exchange: exchange, as: "ana")
        // Every character an id may hold beside letters and digits.
        let odd = DocumentKey(collection: "my_notes-1", id: "a+b=c:d@e~f.g_h-i")
        _ = try await transport.push(body: makeRequest([(odd, try .create(["n": 1], base: .zero))], sequence: 1).body)
        let document = try #require(try await transport.document(odd))
        #expect(document.key == odd && document.state.document == ["n": 1])
        #expect(live.exchanges.last?.path == "/v1/docs/my_notes-1/a%2Bb%3Dc%3Ad%40e~f.g_h-i")

        #expect(try await transport.document(DocumentKey(collection: "carts", id: "missing")) == nil)
        // `..` reaches the server as an id (refused), not as a step up the path.
        guard case .refused(.invalid, _)? = await failure(of: { try await transport.document(DocumentKey(collection: "carts", id: "..")) })
        else {
            Issue.record("\"..\" was not sent as an id")
            return
        }
        #expect(live.exchanges.last?.path == "/v1/docs/carts/%2E%2E")
        guard
            case .refused(.invalid, _)? = await failure(of: { try await transport.document(DocumentKey(collection: "carts", id: "a/b c")) })
        else {
            Issue.record("a bad id was not refused")
            return
        }
        #expect(live.exchanges.last?.path == "/v1/docs/carts/a%2Fb%20c")
        await live.stop()
    }

    @Test(arguments: HTTPExchangeKind.available)
    func badCredentialsAreUnauthorized(_ exchange: HTTPExchangeKind) async throws {
        let live = try LiveSyncServer()
        let body = makeRequest([(cart, try .create(["qty": 1], base: .zero))], sequence: 1).body
        let unknown = await failure(of: { try await live.makeTransport(exchange: exchange, as: "mallory").push(body: body) })
        #expect(unknown == .unauthorized("the bearer token is not known"))
        let wrongKey = HTTPTransport(serverURL: live.url, apiKey: "wrong", token: { "token-ana" }, exchange: exchange)
        guard case .unauthorized(let message)? = await failure(of: { try await wrongKey.pull(cursor: nil, limit: 10) }) else {
            Issue.record("a wrong API key was not unauthorized")
            return
        }
        #expect(message.contains("API key"))
        guard
            case .unauthorized(let anonymous)? = await failure(of: {
                try await live.makeTransport(exchange: exchange, as: nil).push(body: body)
            })
        else {
            Issue.record("an anonymous push was not unauthorized")
            return
        }
        #expect(anonymous.contains("signed-in user"))
        // A token that would add a header of its own never leaves the device.
        let smuggler = live.makeTransport(exchange: exchange, token: { "token-ana\r\nX-Admin: yes" })
        guard case .unauthorized? = await failure(of: { try await smuggler.push(body: body) }) else {
            Issue.record("a token with a line break was sent")
            return
        }
        #expect(live.exchanges.allSatisfy { $0.status == 401 && $0.headers["x-admin"] == nil })
        #expect(live.exchanges.count == 3)
        await live.stop()
    }

    @Test(arguments: HTTPExchangeKind.available)
    func aRequestTheServerRefusesIsRefusedWithItsStatusAndMessage(_ exchange: HTTPExchangeKind) async throws {
        let live = try LiveSyncServer()
        let anas = makeRequest([(cart, try .create(["secret": "ana's"], base: .zero))], client: "ana-phone", sequence: 2)
        let ana = live.makeTransport(exchange: exchange, as: "ana")
        _ = try await ana.push(body: anas.body)
        let older = makeRequest([(cart, try .update(set: [try FieldPath("secret"): "old"], base: .zero))], client: "ana-phone", sequence: 1)
        #expect(
            await failure(of: { try await ana.push(body: older.body) })
                == .refused(reason: .staleBatch, message: "batch 1 is older than batch 2, the last this client sent"))
        let ben = live.makeTransport(exchange: exchange, as: "ben")
        // A document the rules hide reads as missing.
        #expect(try await ben.document(cart) == nil, "Ben read Ana's document")
        await live.stop()
    }

    @Test(arguments: HTTPExchangeKind.available)
    func anAnswerLostAfterTheCommitIsUnreachableAndTheRetryGetsIt(_ exchange: HTTPExchangeKind) async throws {
        let failNext = Locked(true)
        let live = try LiveSyncServer(afterPushCommit: { _ in
            if failNext.update({ flag in
                defer { flag = false }; return flag
            }) {
                throw CancellationError()
            }
        })
        let transport = live.makeTransport(exchange: exchange, as: "ana")
        let request = makeRequest([(cart, try .create(["n": 1], base: .zero))], sequence: 1)
        let lost = try #require(await failure(of: { try await transport.push(body: request.body) })?.unreachableReason)
        #expect(lost.hasPrefix("500: the answer was lost after the commit"), "\(lost)")
        let retried = try await transport.push(body: request.body)
        guard case .applied? = retried.results.first else { Issue.record("\(retried)"); return }
        await live.stop()
    }

    @Test(arguments: HTTPExchangeKind.available)
    func anOverloadedServerIsUnreachableAndSaysWhenToRetry(_ exchange: HTTPExchangeKind) async throws {
        let gate = DispatchSemaphore(value: 0)
        let entered = Locked(false)
        let live = try LiveSyncServer(
            http: HTTPServerConfiguration(port: 0, maximumConcurrentRequests: 1, loopbackOnly: true),
            afterPushCommit: { _ in
                entered.update { $0 = true }
                _ = gate.wait(timeout: .now() + 30) // a server thread, not a task's
            })
        let transport = live.makeTransport(exchange: exchange, as: "ana")
        let body = makeRequest([(cart, try .create(["n": 1], base: .zero))], sequence: 1).body
        let held = Task { try await transport.push(body: body) }
        let deadline = ContinuousClock.now + .seconds(30)
        while !entered.value, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        let refused = try #require(await failure(of: { try await transport.pull(cursor: nil, limit: 10) })?.unreachableReason)
        #expect(refused.hasPrefix("429: ") && refused.hasSuffix("(Retry-After: 1)"), "\(refused)")
        gate.signal()
        guard case .applied? = try await held.value.results.first else { Issue.record("the held push failed"); return }
        await live.stop()
    }

    @Test(arguments: HTTPExchangeKind.available)
    func aClosedPortIsUnreachableAtOnceAndReachabilityFollowsTheServer(_ exchange: HTTPExchangeKind) async throws {
        let live = try LiveSyncServer()
        let transport = live.makeTransport(exchange: exchange, as: "ana", timeout: .seconds(30))
        #expect(await transport.isReachable())
        await live.stop()

        // Refused at once, not timed out after 30 s. (Wall-clock bounds are not checked: with two
        // cores, other suites' tasks may hold this test's continuation for many seconds.)
        let reason = try #require(await failure(of: { try await transport.pull(cursor: nil, limit: 10) })?.unreachableReason)
        #expect(reason.hasPrefix("the connection was refused"), "\(reason)")
        #expect(!(await transport.isReachable()))
    }

    @Test(arguments: HTTPExchangeKind.available)
    func aReplacedTokenIsUsedFromTheNextRequest(_ exchange: HTTPExchangeKind) async throws {
        let live = try LiveSyncServer()
        let token = Locked<String?>("token-ana")
        let transport = live.makeTransport(exchange: exchange, token: { token.value })
        _ = try await transport.push(body: makeRequest([(cart, try .create(["n": 1], base: .zero))], sequence: 1).body)
        #expect(try await transport.document(cart) != nil)
        token.update { $0 = "token-ben" }
        #expect(try await transport.document(cart) == nil, "the old token was used")
        token.update { $0 = nil }
        let anonymous = makeRequest([(DocumentKey(collection: "carts", id: "c2"), try .create(["n": 1], base: .zero))], sequence: 2)
        guard case .unauthorized? = await failure(of: { try await transport.push(body: anonymous.body) }) else {
            Issue.record("a push without a token was not unauthorized")
            return
        }
        #expect(live.exchanges.map { $0.headers["authorization"] } == ["Bearer token-ana", "Bearer token-ana", "Bearer token-ben", nil])
        await live.stop()
    }
}

/// The transport keeps its connection open between requests.
@Suite struct HTTPConnectionReuseTests {
    @Test(arguments: HTTPExchangeKind.available)
    func requestsInTurnShareOneConnection(_ exchange: HTTPExchangeKind) async throws {
        let live = try LiveSyncServer()
        let proxy = try FaultProxy(upstreamPort: live.server.port)
        defer { proxy.stop() }
        let transport = HTTPTransport(
            serverURL: URL(string: "http://127.0.0.1:\(proxy.port)")!, apiKey: LiveSyncServer.apiKey,
            token: { LiveSyncServer.token(of: "ana") }, exchange: exchange)
        for sequence in 1...20 {
            let key = DocumentKey(collection: "carts", id: "c\(sequence)")
            _ = try await transport.push(body: makeRequest([(key, try .create(["n": 1], base: .zero))], sequence: Int64(sequence)).body)
            _ = try await transport.pull(cursor: nil, limit: 5)
        }
        #expect(live.exchanges.count == 40 && proxy.connectionCount == 1, "\(proxy.connectionCount) connections for 40 requests")
        await live.stop()
    }
}

/// The transport against a scripted server: answers the real one never gives.
@Suite struct HTTPTransportOddAnswerTests {
    @Test(arguments: HTTPExchangeKind.available)
    func cursorsAreSentExactlyWhateverTheyHold(_ exchange: HTTPExchangeKind) async throws {
        let scripted = try ScriptedServer { request in
            .json(status: 200, PullResponse(documents: [], cursor: request.query["cursor"] ?? "<none>", hasMore: false).body)
        }
        let transport = scripted.makeTransport(exchange: exchange)
        for cursor in ["c1.AAAA-_", "a+b/c=d", "x y&z=1%20#frag?q", "ü€😀", ""] {
            #expect(try await transport.pull(cursor: cursor, limit: 7).cursor == cursor)
        }
        #expect(try await transport.pull(cursor: nil, limit: 7).cursor == "<none>")
        #expect(scripted.requests.allSatisfy { $0.path == "/v1/pull" && $0.query["limit"] == "7" })
        // A server URL with a path: the routes go under it.
        let proxied = HTTPTransport(
            serverURL: scripted.url.appendingPathComponent("sync/"), apiKey: "key", token: { nil }, exchange: exchange)
        _ = try await proxied.pull(cursor: nil, limit: 7)
        #expect(scripted.requests.last?.path == "/sync/v1/pull")
        await scripted.stop()
    }

    @Test(arguments: HTTPExchangeKind.available)
    func everyOddAnswerIsSortedAndNoneCrashes(_ exchange: HTTPExchangeKind) async throws {
        let scripted = try ScriptedServer()
        let transport = scripted.makeTransport(exchange: exchange)
        let body = makeRequest([(DocumentKey(collection: "c", id: "d"), try .create(["n": 1], base: .zero))], sequence: 1).body
        enum Expected { case unreachable(String), unauthorized(String), refused(Refusal.Reason, String) }
        let cases: [(name: String, answer: HTTPResponse, expected: Expected)] = [
            ("200 not JSON", text(200, "<html>hello</html>"), .unreachable("the answer could not be read: the body is not valid JSON")),
            (
                "200 another shape", .json(status: 200, Array(#"{"results":[{"status":"weird"}]}"#.utf8)),
                .unreachable("the answer could not be read: results[0].status")
            ),
            ("200 empty", HTTPResponse(status: 200), .unreachable("the answer could not be read")),
            ("204", HTTPResponse(status: 204), .unreachable("the answer could not be read")),
            (
                "200 corrupt zstd",
                HTTPResponse(
                    status: 200, headers: [("Content-Encoding", "zstd")],
                    body: [0x28, 0xB5, 0x2F, 0xFD] + Array(repeating: 0x41, count: 40)), .unreachable("")
            ),
            (
                "502 HTML", text(502, "<h1>Bad\r\ngateway</h1>"),
                .unreachable("502: bad gateway, without the protocol's JSON error body: \"<h1>Bad gateway</h1>\"")
            ),
            (
                "503 with Retry-After", json(503, "the server is shutting down", headers: [("Retry-After", "7")]),
                .unreachable("503: the server is shutting down (Retry-After: 7)")
            ),
            (
                "500 not UTF-8", HTTPResponse(status: 500, body: [0xFF, 0xFE, 0x41]),
                .unreachable("500: internal server error, without the protocol's JSON error body: \"\u{FFFD}\u{FFFD}A\"")
            ),
            ("408", json(408, "too slow"), .unreachable("408: too slow")),
            (
                "401 HTML", text(401, "who are you?"),
                .unauthorized("unauthorized, without the protocol's JSON error body: \"who are you?\"")
            ),
            ("403 JSON", json(403, "the rules refuse"), .refused(.forbidden, "the rules refuse")),
            ("413 JSON", json(413, "too many changes (maximumChanges)"), .refused(.tooLarge, "too many changes (maximumChanges)")),
            // A 4xx without the protocol's error body is not the sync server's: it was not reached.
            (
                "418 empty", HTTPResponse(status: 418),
                .unreachable("418: client error, without the protocol's JSON error body, so not from the sync server")
            ),
            (
                "JSON that is not an error body", .json(status: 409, Array(#"{"error":"stale"}"#.utf8)),
                .unreachable(
                    "409: conflict, without the protocol's JSON error body: \"{\"error\":\"stale\"}\", so not from the sync server")
            ),
            ("an error body of another status", .json(status: 404, Refusal(statusCode: 400, message: "bad").body), .unreachable("404:")),
            (
                "an error body naming a status the protocol does not use",
                .json(status: 400, Array(#"{"message":"teapot","statusCode":418}"#.utf8)),
                .unreachable("400:")
            ),
            (
                "a refusal of a status the SDK does not know", json(418, "teapot"),
                .unreachable("418: teapot, a refusal this version of the SDK does not know")
            ),
            ("404 HTML", text(404, "<html>Not Found</html>"), .unreachable("404: not found, without the protocol's JSON error body")),
            (
                "301", HTTPResponse(status: 301, headers: [("Location", "/elsewhere")]),
                .unreachable("301: a redirect to /elsewhere, which the protocol never sends; check the server URL")
            ),
        ]
        for item in cases {
            scripted.answer { _ in item.answer }
            let outcome = await failure(of: { try await transport.push(body: body) })
            switch (item.expected, outcome) {
            case (.unreachable(let start), .unreachable(let reason)?):
                #expect(reason.lowercased().hasPrefix(start.lowercased()), "\(item.name): \(reason)")
            case (.unauthorized(let expected), .unauthorized(let message)?):
                #expect(message.lowercased().hasSuffix(expected.lowercased()), "\(item.name): \(message)")
            case (.refused(let expectedReason, let expected), .refused(let reason, let message)?):
                #expect(
                    reason == expectedReason && message.lowercased().hasSuffix(expected.lowercased()), "\(item.name): \(reason) \(message)")
            default:
                Issue.record("\(item.name): \(String(describing: outcome))")
            }
        }
        // The redirect was not followed (a POST would have come back as a GET).
        #expect(scripted.requests.allSatisfy { $0.method == "POST" && $0.path == "/v1/push" })
        #expect(scripted.requests.count == cases.count)

        // A document: only the protocol's own 404 says it is missing.
        let key = DocumentKey(collection: "c", id: "d")
        scripted.answer { _ in json(404, "no document c/d") }
        #expect(try await transport.document(key) == nil)
        scripted.answer { _ in text(404, "Not Found") }
        guard case .unreachable? = await failure(of: { try await transport.document(key) }) else {
            Issue.record("a proxy's 404 was taken for a missing document or a refusal")
            return
        }
        scripted.answer { _ in .json(status: 200, PullResponse(documents: [], cursor: "c", hasMore: false).body) }
        guard case .unreachable? = await failure(of: { try await transport.document(key) }) else {
            Issue.record("a page was taken for a document")
            return
        }
        await scripted.stop()
    }

    @Test(arguments: HTTPExchangeKind.available)
    func aCompressedAnswerIsReadAndABombIsAbandonedAtTheLimit(_ exchange: HTTPExchangeKind) async throws {
        let page = PullResponse(documents: [], cursor: String(repeating: "c", count: 5_000), hasMore: true)
        let bomb = ZstdFrames.windowedFrame(repeating: [UInt8](repeating: 0x20, count: 1 << 20), times: 32, windowLog: 22)
        let large = PullResponse(documents: [], cursor: String(repeating: "c", count: 2 << 20), hasMore: true)
        let scripted = try ScriptedServer { request in
            switch request.query["cursor"] {
            case "bomb":
                HTTPResponse(status: 200, headers: [("Content-Type", "application/json"), ("Content-Encoding", "zstd")], body: bomb)
            case "large": .json(status: 200, large.body)
            default:
                HTTPResponse(
                    status: 200, headers: [("Content-Type", "application/json"), ("Content-Encoding", "zstd")],
                    body: try! Zstd.compress(page.body))
            }
        }
        let transport = scripted.makeTransport(exchange: exchange, maximumAnswerBytes: 1 << 20)
        #expect(try await transport.pull(cursor: nil, limit: 1) == page)
        let reason = try #require(await failure(of: { try await transport.pull(cursor: "bomb", limit: 1) })?.unreachableReason)
        // Linux's URLSession has libcurl inflate the bomb, abandoned at the limit as it arrives;
        // the others hand the body over as sent, and zstd refuses a window past the limit.
        #if os(Linux)
            let isInflatedOnTheWay = exchange == .urlSession
        #else
            let isInflatedOnTheWay = false
        #endif
        if isInflatedOnTheWay {
            #expect(reason == "the answer could not be read: it holds more than 1048576 bytes (maximumAnswerBytes)")
        } else {
            #expect(
                reason.hasPrefix("the answer could not be read: its zstd body was refused: a frame needs a window larger than 1048576"),
                "\(reason)")
        }
        // A plain body past the limit is abandoned as it arrives.
        let tooLarge = try #require(await failure(of: { try await transport.pull(cursor: "large", limit: 1) })?.unreachableReason)
        #expect(tooLarge == "the answer could not be read: it holds more than 1048576 bytes (maximumAnswerBytes)")
        await scripted.stop()
    }

    @Test(arguments: HTTPExchangeKind.available)
    func aStalledServerTimesOutAndACancelledCallEndsAtOnce(_ exchange: HTTPExchangeKind) async throws {
        let gate = DispatchSemaphore(value: 0)
        let scripted = try ScriptedServer { _ in
            _ = gate.wait(timeout: .now() + 30) // a server thread, not a task's
            return .json(status: 200, Array(#"{"status":"ok"}"#.utf8))
        }
        let transport = scripted.makeTransport(exchange: exchange, timeout: .seconds(1))
        // The reasons tell what ended each call: the gate opening would give a 200 that is no page.
        let reason = try #require(await failure(of: { try await transport.pull(cursor: nil, limit: 1) })?.unreachableReason)
        #expect(reason == "no answer within 1.0 seconds", "\(reason)")
        #expect(!(await transport.isReachable()))
        #if canImport(CCurl)
            if exchange == .curl {
                // libcurl counts milliseconds (URLSession whole seconds). How long it took is not
                // checked: with two cores, other suites' tasks may hold this one for a second.
                let brief = scripted.makeTransport(exchange: exchange, timeout: .milliseconds(300))
                let short = try #require(await failure(of: { try await brief.pull(cursor: nil, limit: 1) })?.unreachableReason)
                #expect(short == "no answer within 0.3 seconds", "\(short)")
            }
        #endif

        let patient = scripted.makeTransport(exchange: exchange, timeout: .seconds(30))
        let call = Task { await failure(of: { try await patient.pull(cursor: nil, limit: 1) }) }
        let deadline = ContinuousClock.now + .seconds(30)
        let expectedRequests = scripted.requests.count + 1
        while scripted.requests.count < expectedRequests, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        call.cancel()
        let cancelled = await call.value
        #expect(cancelled == .unreachable("the request was cancelled"), "\(String(describing: cancelled))")
        for _ in 0..<expectedRequests { gate.signal() }
        await scripted.stop()
    }
}

/// Answers read without a network.
@Suite struct HTTPAnswerTests {
    let page = PullResponse(documents: [], cursor: "c1.x", hasMore: false)

    func read(_ answer: HTTPAnswer, limit: Int = 1 << 20) -> Result<PullResponse, TransportFailure> {
        Result { () throws(TransportFailure) in
            try HTTPTransport.read(answer, limit: limit) { bytes throws(Refusal) in try PullResponse(body: bytes) }
        }
    }

    @Test func aZstdBodyIsDecompressedUnlessTheURLLoadingSystemDidItAlready() throws {
        let compressed = try Zstd.compress(page.body)
        #expect(try read(HTTPAnswer(statusCode: 200, headers: ["content-encoding": "zstd"], body: compressed)).get() == page)
        // libcurl decoded it and left the header.
        #expect(try read(HTTPAnswer(statusCode: 200, headers: ["content-encoding": "zstd"], body: page.body)).get() == page)
        #expect(try read(HTTPAnswer(statusCode: 200, headers: [:], body: page.body)).get() == page)
        // Without the header the bytes are taken as they are.
        guard case .failure(.unreachable) = read(HTTPAnswer(statusCode: 200, headers: [:], body: compressed)) else {
            Issue.record("zstd without its header was read")
            return
        }
        let large = PullResponse(documents: [], cursor: String(repeating: "x", count: 4_000), hasMore: false)
        let tooLarge = HTTPAnswer(statusCode: 200, headers: ["content-encoding": "zstd"], body: try Zstd.compress(large.body))
        #expect(
            read(tooLarge, limit: 1_000)
                == .failure(
                    .unreachable(
                        "the answer could not be read: its zstd body was refused: the body expands past 1000 bytes (limit `limit`)")))
        let cut = HTTPAnswer(statusCode: 200, headers: ["content-encoding": "zstd"], body: Array(compressed.dropLast(3)))
        guard case .failure(.unreachable(let reason)) = read(cut), reason.contains("zstd") else {
            Issue.record("a cut frame was read")
            return
        }
    }

    @Test func anErrorBodyIsReadCompressedOrNot() throws {
        let error = Refusal(statusCode: 400, message: String(repeating: "bad field ", count: 200))
        #expect(
            read(HTTPAnswer(statusCode: 400, headers: ["content-encoding": "zstd"], body: try Zstd.compress(error.body)))
                == .failure(.refused(reason: .invalid, message: error.message)))
        // Too large to be the protocol's error: not from the sync server.
        guard case .failure(.unreachable(let message)) = read(HTTPAnswer(statusCode: 400, headers: [:], body: [], exceedsLimit: true)),
            message.contains(", with a body that could not be read: it holds more than 1048576 bytes (maximumAnswerBytes)")
        else {
            Issue.record("an error body past the limit was not reported")
            return
        }
    }

    @Test func textIsPercentEncodedForPathsAndQueries() {
        #expect(HTTPTransport.percentEncoded("a+b/c=d e&f%g~h.i_j-k") == "a%2Bb%2Fc%3Dd%20e%26f%25g~h.i_j-k")
        #expect(HTTPTransport.percentEncoded("é") == "%C3%A9")
        #expect(HTTPTransport.pathSegment("..") == "%2E%2E" && HTTPTransport.pathSegment(".") == "%2E")
        #expect(HTTPTransport.pathSegment("a.b") == "a.b" && HTTPTransport.pathSegment("...x") == "...x")
    }
}
