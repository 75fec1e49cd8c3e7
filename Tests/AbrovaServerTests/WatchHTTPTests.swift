import AbrovaCore
import AbrovaHTTP
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

@testable import AbrovaServer

extension ServerSuites {
    /// `GET /v1/watch` over real HTTP, as a device (or anyone with the API key) sends it.
    @Suite struct WatchHTTPTests {
        static let rules = RuleBook(collections: ["board": PresetRules.anyAuthenticatedUser], fallback: PresetRules.ownerOnly)

        /// Sends a watch on a connection of its own and waits for its answer on a thread of its own.
        static func watch(_ live: LiveServer, as user: String, cursor: String) -> Task<(RawHTTPConnection.Response, Duration), any Error> {
            Task {
                try await onNewThread {
                    let started = ContinuousClock.now
                    let answer = try live.send("GET", "/v1/watch?cursor=\(cursor)", as: user)
                    return (answer, ContinuousClock.now - started)
                }
            }
        }

        static func create(_ key: DocumentKey, sequence: Int64) throws -> PushRequest {
            makeRequest([(key, try .create(["n": .int(sequence)], base: .zero))], client: "ana-phone", sequence: sequence)
        }

        @Test(arguments: StoreKind.available)
        func aWatchIsAnsweredChangedWhenAReadableDocumentChangesAndClosesItsConnection(kind: StoreKind) async throws {
            let live = try LiveServer(kind, rules: Self.rules)
            let cursor = try PullResponse(body: try live.send("GET", "/v1/pull", as: "ben").body).cursor
            let watch = Self.watch(live, as: "ben", cursor: cursor)
            try await Task.sleep(for: .milliseconds(200))
            #expect(live.fixture.service.watchCount == 1)
            #expect(try live.push(Self.create(DocumentKey(collection: "board", id: "b1"), sequence: 1)).status == 200)
            let (answer, waited) = try await watch.value
            #expect(answer.status == 200 && String(decoding: answer.body, as: UTF8.self) == #"{"changed":true}"#)
            #expect(answer.headers["connection"]?.lowercased() == "close")
            #expect(waited < .seconds(5), "answered after \(waited)")
        }

        @Test func anotherUsersPrivateChangeLeavesAWatchToItsIdleTime() async throws {
            let live = try LiveServer(.sqlite, rules: Self.rules, watchIdleTime: .seconds(1))
            let cursor = try PullResponse(body: try live.send("GET", "/v1/pull", as: "ben").body).cursor
            let watch = Self.watch(live, as: "ben", cursor: cursor)
            try await Task.sleep(for: .milliseconds(100))
            #expect(try live.push(Self.create(DocumentKey(collection: "diary", id: "d1"), sequence: 1)).status == 200)
            let (answer, waited) = try await watch.value
            #expect(String(decoding: answer.body, as: UTF8.self) == #"{"changed":false}"#)
            #expect(waited >= .seconds(1), "answered after \(waited), before its idle time")
        }

        @Test func waitingWatchesTakeNoRequestSlotAndHaveTheirOwnLimit() async throws {
            var http = HTTPServerConfiguration(port: 0, loopbackOnly: true)
            http.maximumConcurrentRequests = 1
            http.threadCount = 1
            let live = try LiveServer(.sqlite, rules: Self.rules, http: http, maximumWatches: 4)
            let watches = (0..<4).map { _ in Self.watch(live, as: "ben", cursor: "") }
            #expect(await eventually { live.fixture.service.watchCount == 4 })
            // A pull is served while four watches wait on the one thread, with the one slot.
            #expect(try await onNewThread { try live.send("GET", "/v1/pull", as: "ana").status } == 200)
            let refused = try await onNewThread { try live.send("GET", "/v1/watch", as: "ana") }
            #expect(refused.status == 429 && refused.headers["retry-after"] == "5", "\(refused.status) \(refused.message)")
            #expect(refused.message.contains("maximumWatches"))
            live.fixture.service.stopWatching()
            for watch in watches { #expect(try await watch.value.0.status == 200) }
        }

        @Test func aWatchWhoseClientHangsUpIsDroppedAtOnceAndNothingAnswersIt() async throws {
            let lines = Locked<[String]>([])
            let live = try LiveServer(.sqlite, rules: Self.rules, log: { line in lines.update { $0.append(line) } })
            let port = live.server.port
            let service = live.fixture.service
            // The socket stays on the thread it was made on; the watch count is read from there.
            let droppedAfter = try await onNewThread { () -> Duration? in
                let connection = try RawHTTPConnection(port: port)
                try connection.send(
                    "GET /v1/watch?cursor= HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: \(LiveServer.apiKey)\r\nAuthorization: Bearer token-ben\r\n\r\n"
                )
                guard holds(within: .seconds(10), { service.watchCount == 1 }) else { return nil }
                let left = ContinuousClock.now
                connection.close()
                guard holds(within: .seconds(2), { service.watchCount == 0 }) else { return nil }
                return ContinuousClock.now - left
            }
            #expect(droppedAfter != nil, "the watch outlived its client by 2 s, or never waited")
            #expect(live.server.deferredRequests == 0)
            // The count drops as the watch is cancelled, a moment before its line is logged.
            #expect(
                await eventually(2) { lines.value.contains { $0.hasPrefix("GET /v1/watch 499 ") && $0.hasSuffix("caller=ben") } },
                "\(lines.value)")
            // A readable change now has no watch to answer; the server goes on.
            #expect(try live.push(Self.create(DocumentKey(collection: "board", id: "b1"), sequence: 1)).status == 200)
            try await Task.sleep(for: .milliseconds(200))
            #expect(!lines.value.contains { $0.hasPrefix("GET /v1/watch 200 ") }, "\(lines.value)")
            #expect(live.fixture.service.watchCount == 0)
            #expect(try await onNewThread { try live.send("GET", "/v1/pull", as: "ben").status } == 200)
        }

        @Test func aWatchIsRefusedAsAPullIsAndItsIdleTimeIsAnnounced() async throws {
            let live = try LiveServer(.sqlite, rules: Self.rules, watchIdleTime: .seconds(25))
            let forged = try await onNewThread { try live.send("GET", "/v1/watch?cursor=c1.forged", as: "ben") }
            #expect(forged.status == 400 && Refusal(body: forged.body) != nil)
            let posted = try await onNewThread { try live.send("POST", "/v1/watch", as: "ben") }
            #expect(posted.status == 405)
            let anonymous = try await onNewThread { try live.send("GET", "/v1/watch", as: nil, headers: ["Authorization": "Basic x"]) }
            #expect(anonymous.status == 401)
            let health = HealthResponse(body: try live.send("GET", "/v1/health").body)
            #expect(health?.limits?.watchIdleSeconds == 25)
        }
    }
}

/// Whether `condition` holds within `seconds`, checked every 10 ms.
private func eventually(_ seconds: Double = 10, _ condition: () async -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1_000))
    while ContinuousClock.now < deadline {
        if await condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return await condition()
}

/// Whether `condition` holds within `limit`, checked every 5 ms on the calling thread (one of the
/// test's own).
private func holds(within limit: Duration, _ condition: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now + limit
    while !condition() {
        guard ContinuousClock.now < deadline else { return false }
        Thread.sleep(forTimeInterval: 0.005)
    }
    return true
}
