import AbrovaCore
import AbrovaServer
import AbrovaTestSupport
import Foundation
import Testing

@testable import AbrovaSync

/// The engine's promises beyond the seed's table: resyncs, the exact pending count, a write that
/// can never succeed, the streams.
@Suite struct SyncEngineTests {
    let folder = TemporaryFolder()

    /// `disconnect()` queues every later write, also while a run that began before it is still
    /// sending: the run sends no batch after it.
    @Test func aRunGoingWhenTheAppDisconnectsSendsNothingWrittenAfter() async throws {
        let live = try LiveSyncServer()
        // Batches of one change, each push 300 ms: the run is still sending when the app disconnects.
        let sync = try slowPushingInstance(live, storePath: folder.path("device.sqlite"), pushDelay: .milliseconds(300))
        await sync.syncNow()
        await sync.disconnect()
        for index in 0..<3 { try await sync.collection("carts").document("q\(index)").setData(["n": .int(Int64(index))]) }
        await sync.reconnect()
        try await Task.sleep(for: .milliseconds(100)) // the first batch is on its way
        await sync.disconnect()
        try await sync.collection("carts").document("late").setData(["n": 9])
        try await Task.sleep(for: .milliseconds(1_200)) // three more pushes' time
        let onServer = { (id: String) in try? live.service.document(DocumentKey(collection: "carts", id: id), caller: .user("ana")) }
        #expect(onServer("late") == nil, "a write made after disconnect() went out")
        #expect(onServer("q2") == nil, "the run went on sending after disconnect()")
        #expect(await sync.pendingCount >= 2)
        await sync.reconnect()
        #expect(await eventually { await sync.pendingCount == 0 })
        #expect(onServer("late") != nil)
        await live.stop()
    }

    @Test func aResyncRequiredAnswerPullsFromTheStartAndKeepsUnsentChanges() async throws {
        let live = try LiveSyncServer(rules: RuleBook(fallback: PresetRules.anyAuthenticatedUser), tombstoneRetention: 60)
        let ana = try Device(live, folder: folder, name: "ana")
        let ben = try Device(live, user: "ben", folder: folder, name: "ben")
        try await ana.carts.document("gone").setData(["n": 1])
        try await ana.carts.document("kept").setData(["n": 1])
        await ben.sync.syncNow()
        #expect(try await ben.carts.document("gone").getDocument(source: .cache).exists)
        await ben.sync.disconnect()
        try await ben.carts.document("mine").setData(["n": 2]) // unsent while the resync happens
        try await ana.carts.document("gone").delete()
        try await ana.carts.document("kept").updateData(["n": 3])
        live.advance(by: 120)
        try live.service.purgeExpiredTombstones() // ben's cursor is now older than a removed delete
        await ben.sync.reconnect()
        #expect(await eventually { await ben.sync.pendingCount == 0 })
        await ben.sync.syncNow()
        #expect(ben.sync.syncState == .idle)
        #expect(try await ben.carts.document("kept").getDocument(source: .cache).data == ["n": 3])
        #expect(try await ben.carts.document("mine").getDocument(source: .cache).data == ["n": 2])
        #expect(live.exchanges.contains { $0.path == "/v1/pull" && $0.status == 410 }, "the server never said resync")
        await live.stop()
    }

    @Test func pullsGoPageByPageAndReportProgress() async throws {
        let live = try LiveSyncServer(rules: RuleBook(fallback: PresetRules.anyAuthenticatedUser))
        let reader = try Device(live, user: "ben", folder: folder, name: "reader")
        await reader.sync.syncNow()
        let seen = Locked<[SyncProgress]>([])
        let stream = reader.sync.syncProgressChanges
        let collector = Task { for await progress in stream { seen.update { $0.append(progress) } } }
        let writer = try Device(live, folder: folder, name: "writer")
        await writer.sync.disconnect()
        for index in 0..<1_200 { try await writer.sync.collection("items").document("i\(index)").setData(["n": .int(Int64(index))]) }
        await writer.sync.reconnect()
        #expect(await eventually(60) { await writer.sync.pendingCount == 0 })
        await reader.sync.syncNow()
        #expect(await eventually { seen.value.contains { $0.pulledDocuments == 1_200 && !$0.isPulling } })
        #expect(seen.value.filter { $0.isPulling }.map(\.pulledDocuments) == [500, 1_000], "pages of 500: \(seen.value)")
        #expect(try await reader.sync.collection("items").getDocuments().count == 1_200)
        collector.cancel()
        await live.stop()
    }

    @Test func aBatchWhoseAnswerWasLostIsRetriedAndAppliedOnce() async throws {
        let failNext = Locked(true)
        let live = try LiveSyncServer(afterPushCommit: { _ in
            if failNext.update({ flag in
                defer { flag = false }; return flag
            }) {
                throw CancellationError()
            }
        })
        let device = try Device(live, folder: folder)
        await device.sync.disconnect()
        try await device.carts.document("c1").setData(["qty": 1])
        try await device.carts.document("c1").updateData(["qty": 2])
        await device.sync.reconnect() // the first push commits, then its answer is lost (500)
        // Generous: under a load of 7 on 2 cores a request has been seen to wait for its timeout.
        #expect(await eventually(40) { await device.sync.pendingCount == 0 })
        #expect(device.transport.pushCount >= 2)
        let stored = try live.service.document(DocumentKey(collection: "carts", id: "c1"), caller: .user("ana"))
        #expect(stored.state.document == ["qty": 2])
        let pushes = live.exchanges.filter { $0.path == "/v1/push" }.map(\.status)
        #expect(pushes.first == 500 && pushes.dropFirst().allSatisfy { $0 == 200 }, "\(pushes)")
        // One change, one version: the retry was answered from the dedupe record.
        #expect(try live.service.store.write { try $0.nextVersion() } == Version(2))
        await live.stop()
    }

    @Test func thePendingCountIsExactThroughout() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder)
        await device.sync.syncNow()
        let counts = Locked<[Int]>([])
        let stream = device.sync.pendingCountChanges
        let collector = Task { for await count in stream { counts.update { $0.append(count) } } }
        #expect(await eventually { counts.value.last == 0 })
        await device.sync.disconnect()
        try await device.carts.document("a").setData(["n": 1])
        try await device.carts.document("a").updateData(["n": 2]) // composes: still two writes waiting
        try await device.carts.document("b").setData(["n": 1])
        #expect(await eventually { counts.value.last == 3 })
        #expect(await device.sync.pendingCount == 3)
        await device.sync.reconnect()
        #expect(await eventually { counts.value.last == 0 })
        // Told while writing: never a wrong count (a burst may skip some: at most one notice every
        // 10 ms), ending at three, the composed write counted.
        let whileWriting = Array(counts.value.drop { $0 == 0 }.prefix { $0 != 0 })
        #expect(whileWriting.last == 3 && whileWriting == whileWriting.sorted(), "\(counts.value)")
        #expect(Set(whileWriting).isSubset(of: [1, 2, 3]), "\(counts.value)")
        collector.cancel()
        await live.stop()
    }

    @Test func aWriteThatCanNeverSucceedIsRejectedAloneAndTheQueueGoesOn() async throws {
        let rules = SwitchableRules()
        let live = try LiveSyncServer(rules: RuleBook(collections: ["carts": rules]))
        let device = try Device(live, folder: folder)
        await device.sync.syncNow()
        await device.sync.disconnect()
        try await device.carts.document("first").setData(["n": 1])
        try await device.carts.document("bad").setData(["invalid": true]) // the validation rules refuse it
        try await device.carts.document("last").setData(["n": 3])
        let rejections = Locked<[DocumentRejection]>([])
        let stream = device.sync.documentRejections
        let collector = Task { for await rejection in stream { rejections.update { $0.append(rejection) } } }
        await device.sync.reconnect()
        #expect(await eventually { await device.sync.pendingCount == 0 })
        #expect(await eventually { rejections.value.map(\.documentId) == ["bad"] })
        #expect(rejections.value.first?.error.statusCode == 400)
        for id in ["first", "last"] {
            #expect(try live.service.document(DocumentKey(collection: "carts", id: id), caller: .user("ana")).state.exists)
        }
        // Nothing is left to retry: the next sync sends nothing.
        let pushes = device.transport.pushCount
        await device.sync.syncNow()
        #expect(device.transport.pushCount == pushes)
        collector.cancel()
        await live.stop()
    }

    @MainActor @Test func theObservableStatusFollowsTheStreams() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder)
        await device.sync.syncNow()
        let status = device.sync.makeStatus()
        await device.sync.disconnect()
        try await device.carts.document("c1").setData(["n": 1])
        #expect(await eventually { @MainActor in status.pendingCount == 1 && status.syncState == .offline })
        await device.sync.reconnect()
        #expect(await eventually { @MainActor in status.pendingCount == 0 && status.syncState == .idle })
        #expect(await eventually { @MainActor in status.progress.pushedChanges == 1 && !status.progress.isPulling })
        await live.stop()
    }

    @Test func syncStatesAndConnectionStatesReachEverySubscriber() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder)
        await device.sync.syncNow()
        let first = Locked<[SyncState]>([])
        let second = Locked<[SyncState]>([])
        let connections = Locked<[ConnectionState]>([])
        let streams = (device.sync.syncStateChanges, device.sync.syncStateChanges, device.sync.connectionStateChanges)
        let collectors = [
            Task { for await state in streams.0 { first.update { $0.append(state) } } },
            Task { for await state in streams.1 { second.update { $0.append(state) } } },
            Task { for await state in streams.2 { connections.update { $0.append(state) } } },
        ]
        device.transport.isCut = true
        try await device.carts.document("c1").setData(["n": 1])
        #expect(await eventually { first.value.last == .offline && connections.value.last == .disconnected })
        device.transport.isCut = false
        #expect(await eventually { first.value.last == .idle && connections.value.last == .connected })
        #expect(first.value.contains(.syncing) && first.value == second.value)
        for collector in collectors { collector.cancel() }
        await live.stop()
    }
}
