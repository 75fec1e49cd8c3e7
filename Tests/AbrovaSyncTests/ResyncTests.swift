import AbrovaServer
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

@testable import AbrovaSync

/// The device holds exactly what the server would give it now, plus its own unsent writes: after
/// a "resync required" (410), after a cursor the server does not know (its database replaced),
/// and after the read rules changed. Against the real server on loopback.
@Suite struct ResyncTests {
    let folder = TemporaryFolder()

    func cachedIDs(_ device: Device, _ collection: String = "carts") async throws -> Set<String> {
        Set(try await device.sync.collection(collection).getDocuments().map(\.key.id))
    }

    @Test func afterAResyncRequiredDocumentsDeletedMeanwhileLeaveTheDevice() async throws {
        let live = try LiveSyncServer(rules: RuleBook(fallback: PresetRules.anyAuthenticatedUser), tombstoneRetention: 60)
        let ana = try Device(live, folder: folder, name: "ana")
        let ben = try Device(live, user: "ben", folder: folder, name: "ben")
        try await ana.carts.document("gone").setData(["n": 1])
        try await ana.carts.document("kept").setData(["n": 1])
        try await ana.carts.document("edited").setData(["n": 1])
        await ben.sync.syncNow()
        #expect(try await cachedIDs(ben) == ["gone", "kept", "edited"])
        await ben.sync.disconnect()
        try await ben.carts.document("mine").setData(["n": 2]) // unsent while the resync happens
        try await ben.carts.document("edited").updateData(["m": 5]) // unsent, on a document deleted meanwhile
        try await ana.carts.document("gone").delete()
        try await ana.carts.document("edited").delete()
        live.advance(by: 120)
        try live.service.purgeExpiredTombstones() // ben's cursor is now older than a removed delete
        let seen = Locked<[DocumentSnapshot]>([])
        let listener = await ben.carts.document("gone").addSnapshotListener { snapshot in seen.update { $0.append(snapshot) } }
        await ben.sync.reconnect()
        #expect(await eventually { await ben.sync.pendingCount == 0 })
        await ben.sync.syncNow()
        #expect(live.exchanges.contains { $0.path == "/v1/pull" && $0.status == 410 }, "the server never said resync")
        #expect(try await ben.carts.document("gone").getDocument(source: .cache).data == nil)
        #expect(await eventually { seen.value.last?.exists == false }, "the listener never heard that the document left")
        #expect(try await cachedIDs(ben) == ["kept", "mine"])
        // The edit of a document deleted meanwhile was sent on its own and refused (404: the
        // document no longer exists); nothing of it stays.
        #expect(try await ben.carts.document("edited").getDocument(source: .cache).data == nil)
        listener.remove()
        await live.stop()
    }

    /// Increments made offline on both sides of a resync count once: the unsent ones are sent
    /// once, and the full pull brings the counters as the server counted them.
    @Test func incrementsMadeAroundAResyncCountOnce() async throws {
        let live = try LiveSyncServer(rules: RuleBook(fallback: PresetRules.anyAuthenticatedUser), tombstoneRetention: 60)
        let ana = try Device(live, folder: folder, name: "ana")
        let ben = try Device(live, user: "ben", folder: folder, name: "ben")
        try await ana.carts.document("c1").setData(["milk": 1])
        try await ana.carts.document("gone").setData(["n": 1])
        await ben.sync.syncNow()
        try await ben.carts.document("c1").updateData(["milk": .increment(2)])
        await ben.sync.syncNow() // counted: 3
        await ben.sync.disconnect()
        try await ben.carts.document("c1").updateData(["milk": .increment(5)]) // unsent while the resync happens
        try await ana.carts.document("c1").updateData(["milk": .increment(10)])
        try await ana.carts.document("gone").delete()
        live.advance(by: 120)
        try live.service.purgeExpiredTombstones()
        await ben.sync.reconnect()
        #expect(await eventually { await ben.sync.pendingCount == 0 })
        await ben.sync.syncNow()
        await ana.sync.syncNow()
        #expect(live.exchanges.contains { $0.path == "/v1/pull" && $0.status == 410 }, "the server never said resync")
        for device in [ana, ben] {
            #expect(try await device.carts.document("c1").getDocument(source: .cache).data == ["milk": 18])
        }
        await live.stop()
    }

    @Test func aCursorTheServerDoesNotKnowStartsAResyncInsteadOfStoppingSync() async throws {
        let path = folder.path("device.sqlite")
        let first = try LiveSyncServer()
        do {
            let device = try AbrovaSync(
                config: try AbrovaSyncConfigBuilder(apiKey: LiveSyncServer.apiKey)
                    .serverURL(first.url).storePath(path).authToken(LiveSyncServer.token(of: "ana")).build())
            try await device.collection("carts").document("old").setData(["n": 1])
            await device.syncNow()
            await device.close()
        }
        await first.stop()
        // The server's database is replaced: the device's cursor means nothing there.
        let second = try LiveSyncServer()
        let other = try Device(second, folder: folder, name: "other")
        try await other.carts.document("new").setData(["n": 2])
        let device = try AbrovaSync(
            config: try AbrovaSyncConfigBuilder(apiKey: LiveSyncServer.apiKey)
                .serverURL(second.url).storePath(path).authToken(LiveSyncServer.token(of: "ana")).build())
        second.onStop { await device.close() }
        await device.syncNow()
        #expect(second.exchanges.contains { $0.path == "/v1/pull" && $0.status == 400 }, "the server knew the cursor")
        let stoppedOn = await device.lastError
        #expect(await eventually { device.syncState == .idle }, "sync stopped: \(String(describing: stoppedOn))")
        #expect(Set(try await device.collection("carts").getDocuments().map(\.key.id)) == ["new"])
        await second.stop()
    }

    @Test func documentsTheRulesNoLongerLetTheUserReadLeaveTheDevice() async throws {
        let shared = RuleBook(collections: ["shared": PresetRules.anyAuthenticatedUser])
        let first = try LiveSyncServer(rules: shared)
        let ana = try Device(first, folder: folder, name: "ana")
        let ben = try Device(first, user: "ben", folder: folder, name: "ben")
        try await ana.sync.collection("shared").document("s1").setData(["n": 1])
        try await ben.sync.collection("shared").document("b1").setData(["n": 1])
        await ben.sync.syncNow()
        #expect(try await cachedIDs(ben, "shared") == ["s1", "b1"])
        await ben.sync.close()
        // The same database, now served with owner-only reads everywhere.
        let store = try SQLiteServerStore(path: first.folder.path("server.sqlite"))
        let second = try LiveSyncServer(rules: RuleBook(), store: store)
        let benAgain = try AbrovaSync(
            config: try AbrovaSyncConfigBuilder(apiKey: LiveSyncServer.apiKey)
                .serverURL(second.url).storePath(folder.path("ben.sqlite")).authToken(LiveSyncServer.token(of: "ben")).build())
        second.onStop { await benAgain.close() }
        await benAgain.syncNow()
        #expect(second.exchanges.contains { $0.path == "/v1/pull" && $0.status == 410 }, "the server never said resync")
        #expect(Set(try await benAgain.collection("shared").getDocuments().map(\.key.id)) == ["b1"])
        #expect(try await benAgain.collection("shared").document("s1").getDocument(source: .cache).data == nil)
        await second.stop()
        await first.stop()
    }

    @Test func anotherUsersCursorIsRefused() throws {
        let live = try LiveSyncServer(rules: RuleBook(fallback: PresetRules.anyAuthenticatedUser))
        let cursor = try live.service.pull(cursor: nil, caller: .user("ana")).cursor
        #expect(throws: Refusal.self) { try live.service.pull(cursor: cursor, caller: .user("ben")) }
        #expect(try live.service.pull(cursor: cursor, caller: .user("ana")).documents.isEmpty)
    }
}
