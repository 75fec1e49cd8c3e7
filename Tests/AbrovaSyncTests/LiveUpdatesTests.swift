import AbrovaCore
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

@testable import AbrovaSync

/// A clock that stands still until the test moves it: every sleep waits for `advance(by:)`.
final class ManualSyncClock: SyncClock {
    private struct Sleeper {
        let deadline: Duration
        let continuation: CheckedContinuation<Void, any Error>
    }

    private let state = Locked<(now: Duration, sleepers: [UUID: Sleeper], asked: [Duration])>((.zero, [:], []))

    /// Every delay slept for, in the order asked.
    var delaysAsked: [Duration] { state.value.asked }
    /// How many sleeps wait.
    var sleeping: Int { state.value.sleepers.count }

    func sleep(for duration: Duration) async throws {
        let id = UUID()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                state.update { state in
                    state.asked.append(duration)
                    state.sleepers[id] = Sleeper(deadline: state.now + duration, continuation: continuation)
                }
            }
        } onCancel: {
            state.update { $0.sleepers.removeValue(forKey: id) }?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves time on, waking the sleeps that are due.
    func advance(by duration: Duration) {
        let due = state.update { state -> [Sleeper] in
            state.now += duration
            let due = state.sleepers.filter { $0.value.deadline <= state.now }
            for id in due.keys { state.sleepers[id] = nil }
            return Array(due.values)
        }
        for sleeper in due { sleeper.continuation.resume() }
    }
}

/// A sync server scripted on a `LongPollServer`: health, session, pulls of the documents it holds
/// (cursor `c<version>`) and watches, held until the test answers them. Pushes are not expected.
final class ScriptedSyncServer: Sendable {
    let http: LongPollServer
    private let documents = Locked<[ServerDocument]>([])
    /// How `GET /v1/watch` is answered: held by default.
    let watchReply = Locked<LongPollServer.Reply>(.hold)
    /// Whether pulls are held (until `release`), to keep a run going.
    let holdsPulls = Locked(false)

    init() throws {
        let documents = documents
        let watchReply = watchReply
        let holdsPulls = holdsPulls
        http = try LongPollServer { request in
            switch request.path {
            case "/v1/health":
                let limits = ServerLimits(
                    maximumChanges: 1_000, maximumPushBytes: 16 << 20, maximumPageSize: 1_000, maximumPageBytes: 8 << 20,
                    watchIdleSeconds: 25)
                return .answer(status: 200, headers: ["Content-Type": "application/json"], body: HealthResponse(limits: limits).body)
            case "/v1/session":
                return .json(200, #"{"user":"ana"}"#)
            case "/v1/pull":
                if holdsPulls.value { return .hold }
                return Self.page(after: request.query["cursor"], of: documents.value)
            case "/v1/watch":
                return watchReply.value
            default:
                return .json(404, #"{"message":"no route","statusCode":404}"#)
            }
        }
    }

    var url: URL { http.url }

    static func page(after cursor: String?, of documents: [ServerDocument]) -> LongPollServer.Reply {
        let after = cursor.flatMap { UInt64($0.dropFirst()) } ?? 0
        let newest = documents.map(\.version.rawValue).max() ?? 0
        let page = PullResponse(
            documents: documents.filter { $0.version.rawValue > after }, cursor: "c\(max(after, newest))", hasMore: false)
        return .answer(status: 200, headers: ["Content-Type": "application/json"], body: page.body)
    }

    /// Another device's write: `data` in `carts/<id>`, at the next version.
    func commit(_ id: String, _ data: [String: Value]) throws {
        let delta = try DocumentDelta.create(data, base: .zero)
        documents.update { documents in
            let version = Version(UInt64(documents.count + 1))
            var state = DocumentState()
            state.applyLocally(delta, at: version)
            documents.append(ServerDocument(key: DocumentKey(collection: "carts", id: id), version: version, state: state))
        }
    }

    var watches: [LongPollServer.Request] { http.requests.filter { $0.path == "/v1/watch" } }
    var pulls: [LongPollServer.Request] { http.requests.filter { $0.path == "/v1/pull" } }
    /// The watches held now.
    var heldWatches: [LongPollServer.Request] { http.held.filter { $0.path == "/v1/watch" } }

    /// Answers the held watch (there must be one) so.
    func answerWatch(changed: Bool) throws {
        let watch = try #require(heldWatches.first)
        #expect(http.release(watch.id, with: .json(200, WatchResponse(changed: changed).body.string)))
    }

    /// Answers the held pulls from the documents, and the next ones at once.
    func releasePulls() {
        holdsPulls.update { $0 = false }
        for pull in http.held where pull.path == "/v1/pull" {
            http.release(pull.id, with: Self.page(after: pull.query["cursor"], of: documents.value))
        }
    }
}

extension [UInt8] {
    var string: String { String(decoding: self, as: UTF8.self) }
}

/// Live updates against a scripted server on loopback: the watch follows the listeners, the
/// lifecycle and the switch; its answers pull, back off or stop it; the connection state says
/// when the device is live.
@Suite struct LiveUpdatesTests {
    let folder = TemporaryFolder()

    /// An instance on its own store against `server`, once its first run is done.
    func device(
        _ server: ScriptedSyncServer, name: String = "device", configure: (AbrovaSyncConfigBuilder) -> AbrovaSyncConfigBuilder = { $0 }
    ) async throws -> AbrovaSync {
        let builder = AbrovaSyncConfigBuilder(apiKey: "key")
            .serverURL(server.url)
            .storePath(folder.path("\(name).sqlite"))
            .authToken("token")
            .retryPolicy(RetryPolicy(initialDelay: .milliseconds(20), maximumDelay: .milliseconds(100)))
        let sync = try AbrovaSync(config: try configure(builder).build())
        #expect(await eventually(60) { await sync.engine.runsStarted >= 1 && sync.syncState == .idle }, "the first run did not end")
        return sync
    }

    /// A scripted server and an instance against it, once its first run is done.
    func started(
        watchReply: LongPollServer.Reply = .hold, configure: (AbrovaSyncConfigBuilder) -> AbrovaSyncConfigBuilder = { $0 }
    ) async throws -> (ScriptedSyncServer, AbrovaSync) {
        let server = try ScriptedSyncServer()
        server.watchReply.update { $0 = watchReply }
        return (server, try await device(server, configure: configure))
    }

    /// Collects the connection states the instance tells.
    func connectionStates(of sync: AbrovaSync) -> (Locked<[ConnectionState]>, Task<Void, Never>) {
        let states = Locked<[ConnectionState]>([])
        let stream = sync.connectionStateChanges
        return (states, Task { for await state in stream { states.update { $0.append(state) } } })
    }

    @Test func aListenerOpensTheWatchAndRemovingTheLastClosesIt() async throws {
        let (server, sync) = try await started()
        defer { server.http.stop() }
        let (states, collector) = connectionStates(of: sync)
        defer { collector.cancel() }
        try await Task.sleep(for: .milliseconds(100))
        #expect(server.watches.isEmpty, "a watch without a listener")
        let document = await sync.collection("carts").document("c1").addSnapshotListener { _ in }
        #expect(await eventually { server.heldWatches.count == 1 })
        #expect(await eventually { states.value.last == .live })
        let query = await sync.collection("carts").addSnapshotListener { _ in }
        let stream = await sync.collection("carts").document("c2").snapshots()
        let streamReader = Task { for await _ in stream {} }
        document.remove()
        query.remove()
        try await Task.sleep(for: .milliseconds(100))
        #expect(server.watches.count == 1 && server.http.abandoned.isEmpty, "a listener is left: the watch stays")
        streamReader.cancel()
        let watch = try #require(server.watches.first)
        #expect(await eventually { server.http.abandoned == [watch.id] }, "the server never saw the watch's request end")
        #expect(await eventually { states.value.last == .connected })
        #expect(server.watches.count == 1)
        await sync.close()
    }

    @Test func newsIsPulledOnceAndWatchedAgainFromTheNewCursor() async throws {
        let (server, sync) = try await started()
        defer { server.http.stop() }
        let seen = Locked<[DocumentSnapshot]>([])
        let listener = await sync.collection("carts").document("c1").addSnapshotListener { snapshot in seen.update { $0.append(snapshot) } }
        #expect(await eventually { server.heldWatches.count == 1 })
        #expect(server.watches.first?.query["cursor"] == "c0")
        let (pulls, runs) = (server.pulls.count, await sync.engine.runsStarted)
        try server.commit("c1", ["qty": 2])
        try server.answerWatch(changed: true)
        #expect(await eventually { seen.value.last?.data == ["qty": 2] }, "another device's change did not show")
        #expect(await eventually { server.heldWatches.first?.query["cursor"] == "c1" })
        #expect(server.pulls.count == pulls + 1 && server.pulls.last?.query["cursor"] == "c0")
        #expect(await sync.engine.runsStarted == runs + 1)
        // Quiet: watched again at once, from the same cursor, with no pull.
        try server.answerWatch(changed: false)
        #expect(await eventually { server.watches.count == 3 && server.heldWatches.count == 1 })
        #expect(server.watches.last?.query["cursor"] == "c1" && server.pulls.count == pulls + 1)
        #expect(seen.value.map(\.data) == [nil, ["qty": 2]], "a snapshot with unchanged data: \(seen.value)")
        listener.remove()
        await sync.close()
    }

    @Test func wakesWhileARunIsGoingGiveOneFollowUpRun() async throws {
        let (server, sync) = try await started()
        defer { server.http.stop() }
        let listener = await sync.collection("carts").addSnapshotListener { _ in }
        #expect(await eventually { server.heldWatches.count == 1 })
        let runs = await sync.engine.runsStarted
        server.holdsPulls.update { $0 = true }
        Task { await sync.syncNow() }
        #expect(await eventually { server.http.held.contains { $0.path == "/v1/pull" } })
        // News, and other triggers, while the run waits for its pull.
        try server.commit("c1", ["qty": 1])
        try server.answerWatch(changed: true)
        for _ in 0..<3 { Task { await sync.syncNow() } }
        try await Task.sleep(for: .milliseconds(200))
        #expect(server.heldWatches.isEmpty, "a watch went out while a run was going to move the cursor")
        server.releasePulls()
        #expect(await eventually { server.heldWatches.count == 1 })
        #expect(server.heldWatches.first?.query["cursor"] == "c1")
        try await Task.sleep(for: .milliseconds(200))
        #expect(await sync.engine.runsStarted == runs + 2, "the burst was not coalesced into one follow-up run")
        #expect(server.watches.count == 2)
        listener.remove()
        await sync.close()
    }

    @Test func aServerWithoutTheRouteIsNotAskedAgainUntilTheNextStart() async throws {
        let (server, first) = try await started(watchReply: .json(404, #"{"message":"no route GET /v1/watch","statusCode":404}"#))
        defer { server.http.stop() }
        var sync = first
        var listener = await sync.collection("carts").addSnapshotListener { _ in }
        let engine = sync.engine
        #expect(await eventually { await engine.watch.phase == .noRoute })
        listener.remove()
        listener = await sync.collection("carts").addSnapshotListener { _ in }
        await sync.disconnect()
        await sync.reconnect()
        await sync.engine.wentToBackground()
        await sync.engine.cameToForeground()
        await sync.syncNow()
        try await Task.sleep(for: .milliseconds(300))
        #expect(server.watches.count == 1, "asked again")
        #expect(sync.events.connectionState != .live)
        listener.remove()
        await sync.close()
        // The next start asks again.
        sync = try await device(server)
        listener = await sync.collection("carts").addSnapshotListener { _ in }
        #expect(await eventually { server.watches.count == 2 })
        listener.remove()
        await sync.close()
    }

    @Test func aFailingWatchBacksOffOnTheEnginesClockAndLeavesTheDeviceOnline() async throws {
        let clock = ManualSyncClock()
        let (server, sync) = try await started(watchReply: .json(503, #"{"message":"too many watches","statusCode":503}"#)) {
            $0.clock(clock).retryPolicy(RetryPolicy(initialDelay: .seconds(1), maximumDelay: .seconds(60)))
        }
        defer { server.http.stop() }
        let listener = await sync.collection("carts").addSnapshotListener { _ in }
        for attempt in 1...3 {
            #expect(await eventually { server.watches.count == attempt && clock.sleeping == 1 })
            try await Task.sleep(for: .milliseconds(100))
            #expect(server.watches.count == attempt, "watched again without waiting")
            let cap = Duration.seconds(1 << (attempt - 1))
            let delay = try #require(clock.delaysAsked.last)
            #expect(delay >= .milliseconds(100) && delay <= cap, "attempt \(attempt) waited \(delay)")
            clock.advance(by: delay)
        }
        #expect(await eventually { server.watches.count == 4 && clock.sleeping == 1 }, "\(clock.sleeping) sleeping")
        let isOnline = await sync.engine.isOnline
        #expect(sync.events.connectionState == .connected && isOnline, "a failed watch took the device offline")
        // An answer ends the backoff: the next failure waits the first delay again.
        server.watchReply.update { $0 = .hold }
        clock.advance(by: .seconds(60))
        #expect(await eventually { server.heldWatches.count == 1 })
        server.watchReply.update { $0 = .json(503, #"{"message":"again","statusCode":503}"#) }
        try server.answerWatch(changed: false)
        #expect(await eventually { clock.delaysAsked.count == 5 && clock.sleeping == 1 })
        #expect(try #require(clock.delaysAsked.last) <= .seconds(1))
        listener.remove()
        await sync.close()
    }

    @Test func disconnectBackgroundAndCloseStopTheWatchAndReconnectAndForegroundRestartIt() async throws {
        let (server, sync) = try await started()
        defer { server.http.stop() }
        let (states, collector) = connectionStates(of: sync)
        defer { collector.cancel() }
        let listener = await sync.collection("carts").addSnapshotListener { _ in }
        #expect(await eventually { server.heldWatches.count == 1 && states.value.last == .live })

        await sync.disconnect()
        #expect(await eventually { server.http.abandoned.count == 1 })
        #expect(states.value.last == .disconnected)
        await sync.reconnect()
        #expect(await eventually { server.heldWatches.count == 1 && server.watches.count == 2 })
        #expect(await eventually { states.value.last == .live })

        // The platform's notifications, as the app framework posts them.
        let center = NotificationCenter()
        let engine = sync.engine
        let signals = PlatformSignals(engine: { engine }, notificationCenter: center)
        defer { signals.cancel() }
        center.post(name: PlatformSignals.backgroundNotification, object: nil)
        #expect(await eventually { server.http.abandoned.count == 2 })
        #expect(await eventually { states.value.last == .connected })
        center.post(name: PlatformSignals.foregroundNotification, object: nil)
        #expect(await eventually { server.heldWatches.count == 1 && server.watches.count == 3 })
        #expect(await eventually { states.value.last == .live })

        await sync.close()
        #expect(await eventually { server.http.abandoned.count == 3 }, "a closed instance left its watch open")
        #expect(server.watches.count == 3)
        listener.remove()
    }

    @Test func withLiveUpdatesOffNothingIsWatched() async throws {
        let (server, sync) = try await started { $0.liveUpdates(false) }
        defer { server.http.stop() }
        let (states, collector) = connectionStates(of: sync)
        defer { collector.cancel() }
        let listener = await sync.collection("carts").document("c1").addSnapshotListener { _ in }
        await sync.syncNow()
        await sync.engine.cameToForeground()
        try await Task.sleep(for: .milliseconds(300))
        #expect(server.watches.isEmpty && !states.value.contains(.live))
        #expect(sync.configuration.liveUpdates == false)
        listener.remove()
        await sync.close()
    }
}
