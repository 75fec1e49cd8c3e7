import AbrovaServer
import AbrovaTestSupport
import Foundation
import Testing

@testable import AbrovaSync

/// The seed's table ("When the cache is used") and its queued writes, row by row, against the real
/// server over HTTP on loopback.
@Suite struct SeedTableTests {
    let folder = TemporaryFolder()
    let milk = DocumentKey(collection: "carts", id: "c1")

    func serverDocument(_ live: LiveSyncServer, _ key: DocumentKey) throws -> [String: Value]? {
        try? live.service.document(key, caller: .user("ana")).state.document?.mapValue
    }

    // MARK: Server reached and allows

    @Test func anOnlineWriteIsSavedOnTheServerBeforeTheCallReturns() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder)
        await device.sync.syncNow()
        let snapshot = try await device.carts.document("c1").setData(["items": ["milk"]])
        #expect(try serverDocument(live, milk) == ["items": ["milk"]])
        #expect(!snapshot.metadata.isFromCache && !snapshot.metadata.hasPendingWrites)
        #expect(await device.sync.pendingCount == 0)
        await live.stop()
    }

    @Test func anOnlineWriteMadeWhileARunIsPushingIsConfirmedWhicheverRunSendsIt() async throws {
        let live = try LiveSyncServer()
        // Batches of one change, each push 200 ms: the run that sends the queue is still pushing
        // when the app writes, and takes the write into one of its later batches.
        let sync = try AbrovaSync(
            config: try AbrovaSyncConfigBuilder(apiKey: LiveSyncServer.apiKey)
                .serverURL(live.url)
                .storePath(folder.path("slow.sqlite"))
                .authToken(LiveSyncServer.token(of: "ana"))
                .maximumBatchChanges(1)
                .transport { _ in SlowTransport(live.makeTransport(as: "ana"), pushDelay: .milliseconds(200)) }
                .build())
        live.onStop { await sync.close() }
        await sync.disconnect()
        for index in 0..<3 { try await sync.collection("carts").document("q\(index)").setData(["n": .int(Int64(index))]) }
        await sync.reconnect()
        try await Task.sleep(for: .milliseconds(100)) // the run is pushing its first batch
        let snapshot = try await sync.collection("carts").document("c1").setData(["items": ["milk"]])
        #expect(try serverDocument(live, milk) == ["items": ["milk"]])
        #expect(!snapshot.metadata.isFromCache && !snapshot.metadata.hasPendingWrites)
        await live.stop()
    }

    @Test func anOnlineReadComesFromTheServerWithPendingEditsOverlaid() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder)
        let other = try Device(live, folder: folder, name: "other")
        await device.sync.syncNow()
        try await other.carts.document("c1").setData(["qty": 1, "note": "from the other device"])
        await device.sync.disconnect()
        try await device.carts.document("c1").setData(["qty": 5]) // queued: the device knew nothing of c1
        await device.sync.reconnect()
        await device.sync.disconnect() // the read below must not be helped by a sync
        let fromCache = try await device.carts.document("c1").getDocument()
        #expect(fromCache.metadata.isFromCache && fromCache.data == ["qty": 5])
        await device.sync.reconnect()
        _ = await eventually { await device.sync.pendingCount == 0 }
        let read = try await device.carts.document("c1").getDocument(source: .server)
        #expect(!read.metadata.isFromCache)
        await live.stop()
    }

    // MARK: Server cannot be reached, or after disconnect()

    @Test func whileUnreachableAWriteReturnsAtOnceQueuedAndIsSentWhenTheServerIsBack() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder)
        await device.sync.syncNow()
        device.transport.isCut = true
        let snapshot = try await device.carts.document("c1").setData(["items": ["milk"]])
        #expect(snapshot.metadata.hasPendingWrites && snapshot.data == ["items": ["milk"]])
        #expect(await device.sync.pendingCount == 1)
        #expect(device.sync.syncState == .offline)
        #expect(try serverDocument(live, milk) == nil)
        let read = try await device.carts.document("c1").getDocument()
        #expect(read.metadata.isFromCache && read.data == ["items": ["milk"]])
        device.transport.isCut = false // the probe notices, and sync on reconnect sends the queue
        #expect(await eventually { await device.sync.pendingCount == 0 })
        #expect(try serverDocument(live, milk) == ["items": ["milk"]])
        #expect(await eventually { device.sync.syncState == .idle })
        await live.stop()
    }

    @Test func afterDisconnectWritesAreQueuedUntilReconnect() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder)
        await device.sync.syncNow()
        await device.sync.disconnect()
        try await device.carts.document("c1").setData(["items": ["milk"]])
        try await Task.sleep(for: .milliseconds(100))
        #expect(try serverDocument(live, milk) == nil)
        #expect(device.transport.pushCount == 0)
        await device.sync.reconnect()
        #expect(await eventually { await device.sync.pendingCount == 0 })
        #expect(try serverDocument(live, milk) == ["items": ["milk"]])
        await live.stop()
    }

    @Test func withoutOfflinePersistenceCallsFailWhenTheServerCannotBeReached() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder) { $0.offlineEnabled(false) }
        await device.sync.syncNow()
        await device.sync.disconnect()
        await #expect(throws: AbrovaSyncError.self) { try await device.carts.document("c1").setData(["n": 1]) }
        await #expect(throws: AbrovaSyncError.self) { _ = try await device.carts.document("c1").getDocument() }
        #expect(await device.sync.pendingCount == 0)
        await live.stop()
    }

    @Test func withoutOfflinePersistenceAWriteThatCannotBeSentFailsAndLeavesNothing() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder) { $0.offlineEnabled(false) }
        await device.sync.syncNow()
        try await device.carts.document("kept").setData(["n": 0])
        // The server goes away without the device knowing: its write is tried, and fails.
        device.transport.isCut = true
        let seen = Locked<[DocumentSnapshot]>([])
        let listener = await device.carts.document("c1").addSnapshotListener { snapshot in seen.update { $0.append(snapshot) } }
        do {
            try await device.carts.document("c1").setData(["n": 1])
            Issue.record("the write did not fail")
        } catch {
            #expect(error.kind == .unreachable)
        }
        #expect(await device.sync.pendingCount == 0)
        #expect(try await device.carts.document("c1").getDocument(source: .cache).data == nil)
        #expect(await eventually { seen.value.last.map { $0.data == nil && $0.metadata.isRollback } ?? false })
        await #expect(throws: AbrovaSyncError.self) { try await device.carts.document("kept").updateData(["n": 2]) }
        #expect(try await device.carts.document("kept").getDocument(source: .cache).data == ["n": 0])
        device.transport.isCut = false
        await device.sync.reconnect()
        await device.sync.syncNow()
        #expect(try serverDocument(live, milk) == nil)
        #expect(try serverDocument(live, DocumentKey(collection: "carts", id: "kept")) == ["n": 0])
        listener.remove()
        await live.stop()
    }

    // MARK: Server refuses

    @Test func aRefusedOnlineWriteThrowsWithTheStatusAndNothingIsQueuedOrChanged() async throws {
        let rules = SwitchableRules()
        rules.refusesWrites = true
        let live = try LiveSyncServer(rules: RuleBook(collections: ["carts": rules]))
        let device = try Device(live, folder: folder)
        await device.sync.syncNow()
        do {
            try await device.carts.document("c1").setData(["items": ["milk"]])
            Issue.record("the write was not refused")
        } catch {
            #expect(error.statusCode == 403 && error.kind == .refused)
        }
        #expect(await device.sync.pendingCount == 0)
        #expect(try await device.carts.document("c1").getDocument(source: .cache).data == nil)
        #expect(try serverDocument(live, milk) == nil)
        await live.stop()
    }

    @Test func aDocumentTheRulesHideReadsAsMissing() async throws {
        let live = try LiveSyncServer()
        let ana = try Device(live, folder: folder)
        let ben = try Device(live, user: "ben", folder: folder, name: "ben")
        try await ana.carts.document("c1").setData(["secret": "ana's"])
        let read = try await ben.carts.document("c1").getDocument(source: .server)
        #expect(read.data == nil && !read.metadata.isFromCache)
        await live.stop()
    }

    // MARK: Queued writes

    @Test func queuedWritesRefusedWhenSentAreRolledBackAndReportedWithoutHoldingBackTheOthers() async throws {
        let rules = SwitchableRules()
        let live = try LiveSyncServer(rules: RuleBook(collections: ["orders": rules], fallback: PresetRules.ownerOnly))
        let device = try Device(live, folder: folder)
        let rejections = Locked<[DocumentRejection]>([])
        let stream = device.sync.documentRejections
        let collector = Task { for await rejection in stream { rejections.update { $0.append(rejection) } } }
        let listener = RecordingListener()
        device.sync.addSyncListener(listener)
        let orders = device.sync.collection("orders")
        try await orders.document("updated").setData(["n": 1])
        try await orders.document("deleted").setData(["n": 1])
        await device.sync.disconnect()
        try await orders.document("created").setData(["n": 1])
        try await device.carts.document("c1").setData(["items": ["milk"]]) // allowed: must go through
        try await orders.document("updated").updateData(["n": 2])
        try await orders.document("deleted").delete()
        let snapshots = Locked<[DocumentSnapshot]>([])
        let registration = await orders.document("updated").addSnapshotListener { snapshot in snapshots.update { $0.append(snapshot) } }
        rules.refusesWrites = true
        await device.sync.reconnect()
        #expect(await eventually { await device.sync.pendingCount == 0 })
        #expect(await eventually { rejections.value.count == 3 })
        #expect(
            Set(rejections.value.map { "\($0.documentId) \($0.operation) \($0.error.statusCode ?? 0)" })
                == ["created create 403", "updated update 403", "deleted delete 403"])
        await device.sync.events.delivered()
        #expect(Set(listener.rejected.value) == ["created create 403", "updated update 403", "deleted delete 403"])
        #expect(try await orders.document("created").getDocument(source: .cache).data == nil)
        #expect(try await orders.document("updated").getDocument(source: .cache).data == ["n": 1])
        #expect(try await orders.document("deleted").getDocument(source: .cache).data == ["n": 1])
        #expect(await eventually { snapshots.value.last?.metadata.isRollback == true && snapshots.value.last?.data == ["n": 1] })
        #expect(try serverDocument(live, milk) == ["items": ["milk"]])
        registration.remove()
        collector.cancel()
        await live.stop()
    }

    @Test func twoThousandWritesQueuedOfflineArePushedInOrderInBatchesEachAppliedOnce() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder)
        await device.sync.syncNow()
        await device.sync.disconnect()
        for index in 0..<2_000 {
            try await device.sync.collection("items").document("i\(index)").setData(["n": .int(Int64(index))])
        }
        #expect(await device.sync.pendingCount == 2_000)
        await device.sync.reconnect()
        #expect(await eventually(60) { await device.sync.pendingCount == 0 })
        #expect(device.transport.pushCount == 4) // batches of 500
        // Versions follow the writes' order, each write applied once.
        let versions = try (0..<2_000).map { index in
            try live.service.document(DocumentKey(collection: "items", id: "i\(index)"), caller: .user("ana")).version
        }
        #expect(versions == versions.sorted() && Set(versions).count == 2_000)
        await live.stop()
    }

    @Test func aRestartWhileOfflineKeepsTheQueueAndSendsItOnReconnect() async throws {
        let live = try LiveSyncServer()
        do {
            let device = try Device(live, folder: folder)
            await device.sync.disconnect()
            try await device.carts.document("c1").setData(["items": ["milk"]])
            await device.sync.close()
        }
        let restarted = try Device(live, folder: folder) // same store file; starts a sync at once
        let sent = await eventually(40) { await restarted.sync.pendingCount == 0 }
        let lastError = await restarted.sync.lastError
        let runs = await restarted.sync.engine.runsStarted
        let pending = await restarted.sync.pendingCount
        let frozen = try await restarted.sync.store.freezeBatch()
        #expect(
            sent,
            "state \(restarted.sync.syncState), error \(String(describing: lastError)), pushes \(restarted.transport.pushCount), runs \(runs), pending \(pending), frozen now \(String(describing: frozen?.batch.changes.count))"
        )
        #expect(try serverDocument(live, milk) == ["items": ["milk"]])
        await live.stop()
    }

    @Test func anAppStartedWithoutANetworkSendsItsWritesWhenOneAppears() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder, startsOffline: true)
        try await device.carts.document("c1").setData(["items": ["milk"]]) // the first sync failed: queued
        #expect(await eventually { device.sync.syncState == .offline })
        #expect(await device.sync.pendingCount == 1)
        device.transport.isCut = false // no write, no call: the probe finds the server by itself
        #expect(await eventually { await device.sync.pendingCount == 0 })
        #expect(try serverDocument(live, milk) == ["items": ["milk"]])
        await live.stop()
    }

    @Test func withoutSyncOnReconnectQueuedWritesWaitForForceSyncNow() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder) { $0.syncOnReconnect(false) }
        await device.sync.syncNow()
        await device.sync.disconnect()
        try await device.carts.document("c1").setData(["items": ["milk"]])
        await device.sync.reconnect()
        try await Task.sleep(for: .milliseconds(200))
        #expect(await device.sync.pendingCount == 1 && device.transport.pushCount == 0)
        await device.sync.syncNow()
        #expect(await device.sync.pendingCount == 0)
        #expect(try serverDocument(live, milk) == ["items": ["milk"]])
        await live.stop()
    }

    @Test func comingToTheForegroundSendsTheQueue() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder) { $0.syncOnReconnect(false) }
        await device.sync.syncNow()
        device.transport.isCut = true
        try await device.carts.document("c1").setData(["items": ["milk"]])
        #expect(device.sync.syncState == .offline && device.transport.pushCount == 0)
        device.transport.isCut = false
        let center = NotificationCenter() // the app framework's, here posted by hand
        let signals = PlatformSignals(engine: { [engine = device.sync.engine] in engine }, notificationCenter: center)
        center.post(name: PlatformSignals.foregroundNotification, object: nil)
        #expect(await eventually { await device.sync.pendingCount == 0 })
        #expect(try serverDocument(live, milk) == ["items": ["milk"]])
        signals.cancel()
        await live.stop()
    }

    @Test func concurrentForceSyncNowCallsShareOneRun() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder)
        await device.sync.syncNow()
        let before = await device.sync.engine.runsStarted
        await device.sync.disconnect()
        try await device.carts.document("c1").setData(["items": ["milk"]])
        await device.sync.reconnect() // starts a run
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<10 { group.addTask { await device.sync.syncNow() } }
        }
        let runs = await device.sync.engine.runsStarted - before
        #expect(runs <= 2, "10 concurrent calls and a reconnect made \(runs) runs")
        #expect(device.transport.pushCount == 1)
        await live.stop()
    }

    @Test func anExpiredTokenKeepsTheQueueUntilItIsReplaced() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, user: "nobody", folder: folder) // a token the server does not know
        await device.sync.syncNow()
        #expect(device.sync.syncState == .error)
        #expect(await device.sync.lastError?.statusCode == 401)
        await device.sync.disconnect()
        try await device.carts.document("c1").setData(["items": ["milk"]])
        await device.sync.reconnect()
        _ = await eventually(1) { false }
        #expect(await device.sync.pendingCount == 1)
        await device.sync.setAuthToken(LiveSyncServer.token(of: "ana"))
        #expect(await eventually { await device.sync.pendingCount == 0 })
        #expect(try serverDocument(live, milk) == ["items": ["milk"]])
        await live.stop()
    }
}

/// A sync listener that records what it hears.
final class RecordingListener: SyncEngine.SyncListener {
    let rejected = Locked<[String]>([])
    let conflicts = Locked<[ConflictInfo]>([])
    let completed = Locked<[Int]>([])

    func onDocumentRejected(documentId: String, operation: OperationType, error: Error) {
        let status = (error as? AbrovaSyncError)?.statusCode ?? 0
        rejected.update { $0.append("\(documentId) \(operation) \(status)") }
    }

    func onConflictDetected(conflict: ConflictInfo) { conflicts.update { $0.append(conflict) } }
    func onSyncCompleted(syncedCount: Int) { completed.update { $0.append(syncedCount) } }
}
