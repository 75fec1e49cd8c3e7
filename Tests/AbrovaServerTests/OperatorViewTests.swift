import AbrovaCore
import AbrovaHTTP
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

@testable import AbrovaServer

extension ServerSuites {
    /// What an operator sees of a server: metrics, request ids in answers and logs, JSON log
    /// lines, and a readiness check that asks the database.
    @Suite struct OperatorViewTests {
        static let cart = DocumentKey(collection: "carts", id: "c1")

        func metricsText(_ live: LiveServer) -> String {
            let response = MetricsHTTPHandler(service: live.fixture.service, token: nil).handle(HTTPRequest(path: "/metrics"))
            #expect(response.status == 200)
            return String(decoding: response.body, as: UTF8.self)
        }

        @Test(arguments: StoreKind.available)
        func metricsCountRequestsChangesConflictsRejectionsAndPulls(kind: StoreKind) throws {
            let live = try LiveServer(kind)
            #expect(try live.push(makeRequest([(Self.cart, try .create(["qty": 1], base: .zero))], sequence: 1)).status == 200)
            // Another device's change on the old base meets the first: a conflict the server wins.
            let stale = makeRequest(
                [(Self.cart, try .update(set: [try FieldPath("qty"): 5], base: .zero))], client: "client-b", sequence: 1,
                strategy: .serverWins)
            #expect(try live.push(stale).status == 200)
            // Ben may not write Ana's cart: rejected.
            let foreign = makeRequest(
                [(Self.cart, try .update(set: [try FieldPath("qty"): 9], base: Version(1)))], client: "b", sequence: 1)
            #expect(try live.push(foreign, as: "ben").status == 200)
            #expect(try live.send("GET", "/v1/pull").status == 200)
            #expect(try live.send("GET", "/v1/pull?limit=0").status == 400)

            let service = live.fixture.service
            #expect(service.metrics.value("abrova_push_changes_total", [("strategy", "merge"), ("result", "applied")]) == 1)
            #expect(service.metrics.value("abrova_push_changes_total", [("strategy", "serverWins"), ("result", "applied")]) == 1)
            #expect(service.metrics.value("abrova_conflicts_total", [("strategy", "serverWins"), ("outcome", "serverWon")]) == 1)
            #expect(service.metrics.value("abrova_push_changes_total", [("strategy", "merge"), ("result", "rejected")]) == 1)
            #expect(service.metrics.value("abrova_rejections_total", [("reason", "notFound")]) == 1)
            #expect(service.metrics.value("abrova_rejections_total", [("reason", "invalid")]) == 1)
            #expect(service.metrics.value("abrova_pulls_total") == 1)
            #expect(service.metrics.value("abrova_pull_documents_total") == 1)
            #expect(service.metrics.value("abrova_http_requests_total", [("route", "push"), ("status", "200")]) == 3)
            #expect(service.metrics.value("abrova_http_requests_total", [("route", "pull"), ("status", "400")]) == 1)

            let text = metricsText(live)
            #expect(text.contains("# TYPE abrova_http_requests_total counter\n"))
            #expect(text.contains(#"abrova_http_requests_total{route="push",status="200"} 3"#))
            #expect(text.contains("# TYPE abrova_http_request_duration_seconds histogram\n"))
            #expect(text.contains(#"abrova_http_request_duration_seconds_bucket{route="push",le="+Inf"} 3"#))
            #expect(text.contains(#"abrova_http_request_duration_seconds_count{route="push"} 3"#))
            #expect(text.contains("abrova_watches_active 0\n"))
            #expect(text.contains(#"abrova_database_connections{state="maximum"}"#) == (kind == .postgres))
            // Every sample line is a name, optional labels and a number.
            for line in text.split(separator: "\n") where !line.hasPrefix("#") {
                #expect(line.wholeMatch(of: /[a-z_]+(\{[^}]*\})? -?[0-9.e+-]+/) != nil, "\(line)")
            }
        }

        @Test func theMetricsListenerWantsItsTokenAndOnlyItsRoute() throws {
            let live = try LiveServer(.sqlite)
            let handler = MetricsHTTPHandler(service: live.fixture.service, token: "s3cret")
            #expect(handler.handle(HTTPRequest(path: "/metrics")).status == 401)
            #expect(handler.handle(HTTPRequest(path: "/metrics", headers: ["authorization": "Bearer wrong"])).status == 401)
            #expect(handler.handle(HTTPRequest(path: "/metrics", headers: ["authorization": "Bearer s3cret"])).status == 200)
            #expect(handler.handle(HTTPRequest(path: "/v1/pull", headers: ["authorization": "Bearer s3cret"])).status == 404)
            #expect(
                handler.handle(HTTPRequest(method: "POST", path: "/metrics", headers: ["authorization": "Bearer s3cret"])).status == 405)
        }

        @Test func everyAnswerCarriesItsRequestIdWhichTheLogNames() throws {
            let lines = Locked<[String]>([])
            let live = try LiveServer(.sqlite, log: { line in lines.update { $0.append(line) } })
            let echoed = try live.send("GET", "/v1/session", headers: ["X-Request-Id": "app-42.retry_1"])
            #expect(echoed.headers["x-request-id"] == "app-42.retry_1")
            let made = try live.send("GET", "/v1/nowhere", headers: ["X-Request-Id": "not one, with spaces"])
            #expect(made.status == 404)
            let id = try #require(made.headers["x-request-id"])
            #expect(id.count == 16 && id.allSatisfy(\.isHexDigit))
            let other = try live.send("GET", "/v1/session")
            #expect(other.headers["x-request-id"] != id)
            #expect(lines.value.contains { $0.contains("/v1/session 200") && $0.contains("id=app-42.retry_1") })
            #expect(lines.value.contains { $0.contains("/v1/nowhere 404") && $0.contains("id=\(id)") })
        }

        @Test func aJSONLogLineIsOneObjectWhateverThePathHolds() throws {
            let record = RequestRecord(
                id: "abc", method: "GET", path: "/v1/\"x\"\n{forged}", status: 503, milliseconds: 12.345, caller: "user:ana")
            let line = record.line(.json, at: Date(timeIntervalSince1970: 1_800_000_000))
            #expect(!line.contains("\n"))
            let parts = try #require(try Value(json: Array(line.utf8)).mapValue)
            #expect(parts["path"] == .string("/v1/\"x\"\n{forged}"))
            #expect(parts["id"] == "abc" && parts["status"] == 503 && parts["level"] == "error" && parts["msg"] == "request")
            #expect(parts["ms"] == .double(12.3) && parts["caller"] == "user:ana")
            #expect(parts["time"] == "2027-01-15T08:00:00.000000Z")
            let message = try #require(try Value(json: Array(LogFormat.json.line("store failure", level: "error").utf8)).mapValue)
            #expect(message["msg"] == "store failure" && message["level"] == "error")
            #expect(LogFormat.text.line("started") == "started")
        }

        @Test(arguments: StoreKind.available)
        func readinessAsksTheDatabase(kind: StoreKind) throws {
            let live = try LiveServer(kind)
            let ready = try live.send("GET", "/v1/health?ready", as: nil)
            #expect(ready.status == 200)
            #expect(HealthResponse(body: ready.body) != nil)

            let down = try SyncService(store: UnreachableStore(store: live.fixture.test.store))
            let handler = SyncHTTPHandler(service: down, authenticator: DevelopmentAuthenticator())
            #expect(handler.handle(HTTPRequest(path: "/v1/health")).status == 200)
            let refused = handler.handle(HTTPRequest(path: "/v1/health", query: ["ready": ""]))
            #expect(refused.status == 503)
            #expect(Refusal(body: refused.body)?.message.contains("cannot be reached") == true)
            #expect(down.metrics.value("abrova_database_errors_total", [("kind", "unavailable")]) == 1)
        }
    }
}

/// A store whose database has gone away: every read of its latest version fails as unreachable.
private struct UnreachableStore: ServerStore {
    let store: any ServerStore

    func write<Result>(_ body: (any ServerTransaction) throws -> Result) throws -> Result { try store.write(body) }
    func document(_ key: DocumentKey) throws -> StoredDocument? { try store.document(key) }
    func changes(after version: Version, limit: Int, collections: [String]?, maximumBytes: Int) throws -> [StoredDocument] {
        try store.changes(after: version, limit: limit, collections: collections, maximumBytes: maximumBytes)
    }
    func purgeTombstones(deletedBefore time: Date) throws -> Version { try store.purgeTombstones(deletedBefore: time) }
    func tombstoneHorizon() throws -> Version { try store.tombstoneHorizon() }
    func latestVersion() throws -> Version { throw ServerStoreError(unavailable: "connection refused") }
    func cursorKey() throws -> [UInt8] { try store.cursorKey() }
}
