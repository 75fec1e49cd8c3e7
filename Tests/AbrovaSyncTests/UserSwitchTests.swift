import AbrovaServer
import AbrovaTestSupport
import Foundation
import Testing

@testable import AbrovaSync

/// One SDK instance, two users one after the other (a shared family tablet, sign-out then
/// sign-in): each user has their own store, nobody sees the other's documents, and no queue goes
/// out under the other's token. Against the real server over HTTP; rules are owner-only.
@Suite struct UserSwitchTests {
    let folder = TemporaryFolder()

    func serverDocument(_ live: LiveSyncServer, _ id: String, as user: String) -> [String: Value]? {
        try? live.service.document(DocumentKey(collection: "carts", id: id), caller: .user(user)).state.document?.mapValue
    }

    func ids(_ device: Device) async throws -> [String] {
        try await device.carts.getDocuments().map(\.key.id).sorted()
    }

    @Test func signingAnotherUserInMovesToTheirOwnStoreAndBackWithNothingLeakedOrSentUnderTheWrongToken() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder)
        try await device.carts.document("ana-synced").setData(["note": "private"])
        await device.sync.disconnect()
        try await device.carts.document("ana-queued").setData(["note": "made offline"])
        let pending = await device.sync.pendingCount
        let owner = try await device.sync.store.owner()
        let lastError = await device.sync.lastError
        #expect(pending == 1, "owner \(String(describing: owner)) error \(String(describing: lastError))")

        try await device.sync.setAuthToken(LiveSyncServer.token(of: "ben"), userId: "ben")
        // Ben sees nothing of Ana's, and her queue is not his.
        #expect(try await ids(device) == [])
        #expect(try await device.carts.document("ana-synced").getDocument(source: .cache).data == nil)
        #expect(await device.sync.pendingCount == 0)
        await device.sync.reconnect()
        let bens = try await device.carts.document("ben-1").setData(["note": "ben's"])
        let error = await device.sync.lastError
        #expect(!bens.metadata.hasPendingWrites, "ben's online write was not saved: \(String(describing: error))")
        #expect(serverDocument(live, "ben-1", as: "ben") == ["note": "ben's"])
        #expect(serverDocument(live, "ana-queued", as: "ana") == nil, "ana's queue went out under ben's token")
        #expect(try await ids(device) == ["ben-1"])

        // Ana again: her documents, and her queue goes out under her token.
        try await device.sync.setAuthToken(LiveSyncServer.token(of: "ana"), userId: "ana")
        #expect(await eventually { serverDocument(live, "ana-queued", as: "ana") == ["note": "made offline"] })
        #expect(try await ids(device) == ["ana-queued", "ana-synced"])
        #expect(await device.sync.lastError == nil)
        await live.stop()
    }

    @Test func anotherUsersTokenAloneMovesToTheirStoreBeforeAnythingIsSent() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder)
        try await device.carts.document("ana-synced").setData(["note": "private"])
        await device.sync.disconnect()
        try await device.carts.document("ana-queued").setData(["note": "made offline"])

        // The app forgets to name the user: the server says whose the token is.
        await device.sync.setAuthToken(LiveSyncServer.token(of: "ben"))
        await device.sync.reconnect()
        #expect(await eventually { (try? await ids(device)) == [] }, "ana's documents stayed in view")
        #expect(await eventually { await device.sync.pendingCount == 0 })
        try await device.carts.document("ben-1").setData(["note": "ben's"])
        #expect(await eventually { serverDocument(live, "ben-1", as: "ben") != nil })
        #expect(serverDocument(live, "ana-queued", as: "ana") == nil)
        let error = await device.sync.lastError
        #expect(error == nil, "\(String(describing: error))")

        await device.sync.setAuthToken(LiveSyncServer.token(of: "ana"))
        #expect(await eventually { serverDocument(live, "ana-queued", as: "ana") != nil })
        #expect(await eventually { (try? await ids(device)) == ["ana-queued", "ana-synced"] })
        await live.stop()
    }

    @Test func listenersAndStreamsFollowTheSwitchWithoutSubscribingAgain() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder)
        try await device.carts.document("ana-1").setData(["n": 1])
        let seen = Locked<[[String]]>([])
        let registration = await device.carts.addSnapshotListener { documents in
            seen.update { $0.append(documents.map(\.key.id).sorted()) }
        }
        defer { registration.remove() }
        let counts = Locked<[Int]>([])
        let countStream = device.sync.pendingCountChanges
        let counting = Task { for await count in countStream { counts.update { $0.append(count) } } }
        defer { counting.cancel() }
        #expect(await eventually { seen.value.last == ["ana-1"] })

        try await device.sync.setAuthToken(LiveSyncServer.token(of: "ben"), userId: "ben")
        #expect(await eventually { seen.value.last == [] }, "the listener still shows \(seen.value.last ?? [])")
        await device.sync.disconnect()
        try await device.carts.document("ben-1").setData(["n": 2])
        #expect(await eventually { seen.value.last == ["ben-1"] })
        #expect(await eventually { counts.value.last == 1 })
        await live.stop()
    }

    @Test func aTokenReplacedWhileARunPushesNeverCarriesTheRunsQueue() async throws {
        let live = try LiveSyncServer()
        // Batches of one change, each push 300 ms: the run is still sending Ana's queue when the
        // app puts Ben's token in place.
        let sync = try slowPushingInstance(live, storePath: folder.path("tablet.sqlite"), pushDelay: .milliseconds(300))
        await sync.syncNow()
        await sync.disconnect()
        for index in 0..<4 { try await sync.collection("carts").document("q\(index)").setData(["n": .int(Int64(index))]) }
        await sync.reconnect()
        try await Task.sleep(for: .milliseconds(100)) // the first batch is on its way
        await sync.setAuthToken(LiveSyncServer.token(of: "ben"))
        try await Task.sleep(for: .milliseconds(700))
        for index in 0..<4 {
            #expect(serverDocument(live, "q\(index)", as: "ben") == nil, "ana's q\(index) went out under ben's token")
        }
        #expect(await eventually { (try? await sync.collection("carts").getDocuments().map(\.key.id)) == [] })
        await live.stop()
    }

    @Test func aUserWhoseStoreCannotBeOpenedIsRefusedAndTheInstanceStaysAsItWas() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder)
        try await device.carts.document("ana-1").setData(["n": 1])
        // Where Ben's store would be, a folder: SQLite cannot open it.
        try FileManager.default.createDirectory(atPath: folder.path("device~ben.sqlite"), withIntermediateDirectories: true)
        await #expect(throws: AbrovaSyncError.self) {
            try await device.sync.setAuthToken(LiveSyncServer.token(of: "ben"), userId: "ben")
        }
        #expect(try await ids(device) == ["ana-1"])
        let snapshot = try await device.carts.document("ana-2").setData(["n": 2])
        #expect(!snapshot.metadata.hasPendingWrites, "ana's write after the refused switch did not go out")
        #expect(serverDocument(live, "ana-2", as: "ana") == ["n": 2])
        await live.stop()
    }

    @Test func anotherUsersStoreLiesBesideAChosenOneOrInTheDefaultFolder() throws {
        let chosen = try AbrovaSyncConfigBuilder(apiKey: "k").storePath("/data/app/cart.sqlite").build()
        #expect(try chosen.storePath(ofAnotherUser: "ben") == "/data/app/cart~ben.sqlite")
        #expect(try chosen.storePath(ofAnotherUser: nil) == "/data/app/cart~~anonymous.sqlite")
        let byDefault = try AbrovaSyncConfigBuilder(apiKey: "k").userId("ana").build()
        #expect(
            try byDefault.storePath(ofAnotherUser: "ben")
                == URL(fileURLWithPath: byDefault.storePath).deletingLastPathComponent()
                .appendingPathComponent("ben.sqlite").path)
    }
}
