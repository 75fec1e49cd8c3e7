import AbrovaCore
import AbrovaServer
import AbrovaTestSupport
import Foundation
import Testing

@testable import AbrovaSync

/// The SDK over its real HTTP transport, through the fault-injecting proxy, against the real
/// server: what each network fault does to a write, and that nothing is lost or applied twice.
@Suite struct FaultProxyTests {
    let folder = TemporaryFolder()
    let milk = DocumentKey(collection: "carts", id: "c1")

    /// A device whose requests go through `proxy`, with a short request timeout.
    func device(through proxy: FaultProxy, _ live: LiveSyncServer, timeout: Duration = .seconds(1)) throws -> AbrovaSync {
        let sync = try AbrovaSync(
            config: try AbrovaSyncConfigBuilder(apiKey: LiveSyncServer.apiKey)
                .serverURL(URL(string: "http://127.0.0.1:\(proxy.port)")!)
                .storePath(folder.path("device.sqlite"))
                .authToken(LiveSyncServer.token(of: "ana"))
                .requestTimeout(timeout)
                .retryPolicy(RetryPolicy(initialDelay: .milliseconds(20), maximumDelay: .milliseconds(100)))
                .build())
        live.onStop { await sync.close() }
        return sync
    }

    func serverVersion(_ live: LiveSyncServer) -> Version? {
        try? live.service.document(milk, caller: .user("ana")).version
    }

    @Test func anAnswerCutAfterTheCommitIsRecoveredByTheRetryAndAppliedOnce() async throws {
        let live = try LiveSyncServer()
        let proxy = try FaultProxy(upstreamPort: live.server.port)
        let sync = try device(through: proxy, live)
        await sync.syncNow()
        try await sync.collection("carts").document("first").setData(["n": 1]) // the server's limits are known
        proxy.fault = .cutResponse(afterBytes: 20)
        let snapshot = try await sync.collection("carts").document("c1").setData(["items": ["milk"]])
        #expect(snapshot.metadata.hasPendingWrites, "the answer was lost: the write is queued")
        let committed = try #require(serverVersion(live), "the server committed before the answer was cut")
        proxy.fault = .none
        #expect(await eventually { await sync.pendingCount == 0 })
        #expect(serverVersion(live) == committed, "the retry got the stored answer; nothing was applied again")
        #expect(proxy.faultsInjected >= 1)
        proxy.stop()
        await live.stop()
    }

    @Test func aRequestCutShortAppliesNothingAndIsSentAgain() async throws {
        let live = try LiveSyncServer()
        let proxy = try FaultProxy(upstreamPort: live.server.port)
        let sync = try device(through: proxy, live)
        await sync.syncNow()
        try await sync.collection("carts").document("first").setData(["n": 1]) // the server's limits are known
        proxy.fault = .cutRequest(afterBytes: 60)
        _ = try await sync.collection("carts").document("c1").setData(["items": ["milk"]])
        #expect(serverVersion(live) == nil, "half a request changes nothing")
        #expect(await sync.pendingCount == 1)
        proxy.fault = .none
        #expect(await eventually { await sync.pendingCount == 0 })
        #expect(try live.service.document(milk, caller: .user("ana")).state.document?.mapValue == ["items": ["milk"]])
        proxy.stop()
        await live.stop()
    }

    @Test func everyRequestDeliveredTwiceIsAppliedOnce() async throws {
        let pushes = Locked(0)
        let live = try LiveSyncServer(afterPushCommit: { _ in pushes.update { $0 += 1 } })
        let proxy = try FaultProxy(upstreamPort: live.server.port)
        proxy.fault = .duplicateRequests
        let sync = try device(through: proxy, live, timeout: .seconds(5))
        let carts = sync.collection("carts")
        for index in 0..<5 {
            _ = try await carts.document("c\(index)").setData(["n": .int(Int64(index))])
        }
        #expect(await eventually { pushes.value >= 10 }, "each push reached the server twice: \(pushes.value)")
        let versions = try (0..<5).map {
            try live.service.document(DocumentKey(collection: "carts", id: "c\($0)"), caller: .user("ana")).version
        }
        let all = try live.service.pull(cursor: nil, limit: 100, caller: .user("ana")).documents
        #expect(all.count == 5)
        // Every application takes a version: a batch applied twice would have taken more.
        #expect(versions.map(\.rawValue) == [1, 2, 3, 4, 5], "one version each, in the order written: \(versions)")
        #expect(await sync.pendingCount == 0)
        proxy.stop()
        await live.stop()
    }

    @Test func totalLossQueuesTheWriteAfterTheTimeoutAndTheQueueDrainsWhenItEnds() async throws {
        let live = try LiveSyncServer()
        let proxy = try FaultProxy(upstreamPort: live.server.port)
        let sync = try device(through: proxy, live, timeout: .milliseconds(500))
        await sync.syncNow()
        proxy.fault = .blackhole
        let started = ContinuousClock.now
        let snapshot = try await sync.collection("carts").document("c1").setData(["items": ["milk"]])
        let waited = ContinuousClock.now - started
        #expect(snapshot.metadata.hasPendingWrites && snapshot.data == ["items": ["milk"]])
        #expect(waited < .seconds(5), "the call returned after the request timeout, not later: \(waited)")
        #expect(sync.syncState == .offline)
        proxy.fault = .none
        #expect(await eventually { await sync.pendingCount == 0 })
        #expect(serverVersion(live) != nil)
        proxy.stop()
        await live.stop()
    }

    @Test func threeSecondsOfLatencySlowsAWriteButLosesNothing() async throws {
        let live = try LiveSyncServer()
        let proxy = try FaultProxy(upstreamPort: live.server.port)
        let sync = try device(through: proxy, live, timeout: .seconds(20))
        await sync.syncNow()
        proxy.fault = .latency(.seconds(3))
        let started = ContinuousClock.now
        let snapshot = try await sync.collection("carts").document("c1").setData(["items": ["milk"]])
        #expect(ContinuousClock.now - started >= .seconds(3))
        #expect(!snapshot.metadata.hasPendingWrites, "slow, but the server answered: the write is confirmed")
        #expect(serverVersion(live) != nil)
        proxy.stop()
        await live.stop()
    }

    @Test func resetConnectionsAreUnreachableNotRefusals() async throws {
        let live = try LiveSyncServer()
        let proxy = try FaultProxy(upstreamPort: live.server.port)
        proxy.fault = .reset
        let sync = try device(through: proxy, live)
        let snapshot = try await sync.collection("carts").document("c1").setData(["items": ["milk"]])
        #expect(snapshot.metadata.hasPendingWrites)
        proxy.fault = .none
        #expect(await eventually { await sync.pendingCount == 0 })
        #expect(serverVersion(live) != nil)
        proxy.stop()
        await live.stop()
    }

    @Test func forwardedBytesCountEachWayExactlyWhatWasSent() async throws {
        let live = try LiveSyncServer()
        let proxy = try FaultProxy(upstreamPort: live.server.port)
        #expect(proxy.forwardedBytes == FaultProxy.ForwardedBytes())
        let request = Array("GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8)
        let connection = try RawHTTPConnection(port: proxy.port)
        try connection.send(request)
        let answer = try connection.readUntilClosed()
        #expect(String(decoding: answer, as: UTF8.self).hasPrefix("HTTP/1.1 200"))
        // The answer has reached the client once it is read; the count may trail by the pump's
        // last step.
        #expect(
            await eventually { proxy.forwardedBytes == FaultProxy.ForwardedBytes(towardServer: request.count, towardClients: answer.count) }
        )
        let before = proxy.forwardedBytes
        let sync = try device(through: proxy, live)
        _ = try await sync.collection("carts").document("c1").setData(["items": ["milk"]])
        let traffic = proxy.forwardedBytes.since(before)
        #expect(traffic.towardServer > 0 && traffic.towardClients > 0)
        #expect(traffic.total == traffic.towardServer + traffic.towardClients)
        proxy.stop()
        await live.stop()
    }
}
