import AbrovaCore
import AbrovaServer
import AbrovaTestSupport
import Foundation
import Testing

@testable import AbrovaSync

/// The seed's table: a write made while the server answers is saved on the server as written,
/// whatever the collection's strategy; the strategy settles the writes that waited in the queue.
/// Two devices of one user against the real server over HTTP.
@Suite struct OnlineWriteTests {
    let folder = TemporaryFolder()
    let jersey = DocumentKey(collection: "carts", id: "j1")

    func serverDocument(_ live: LiveSyncServer) -> [String: Value]? {
        try? live.service.document(jersey, caller: .user("ana")).state.document?.mapValue
    }

    /// Both devices have seen `{jersey: 1, size: "M"}`; then the first sets `jersey: 7` online.
    func twoDevicesAfterTheFirstSetSeven(_ live: LiveSyncServer, _ strategy: ConflictStrategy) async throws -> (
        first: Device, second: Device
    ) {
        let first = try Device(live, folder: folder, name: "first") { $0.conflictStrategy(strategy).conflictResolver { _ in .useServer } }
        let second = try Device(live, folder: folder, name: "second") { $0.conflictStrategy(strategy).conflictResolver { _ in .useServer } }
        try await first.carts.document("j1").setData(["jersey": 1, "size": "M"])
        await second.sync.syncNow()
        #expect(try await second.carts.document("j1").getDocument(source: .cache).data == ["jersey": 1, "size": "M"])
        try await first.carts.document("j1").updateData(["jersey": 7])
        #expect(serverDocument(live) == ["jersey": 7, "size": "M"])
        return (first, second)
    }

    @Test(arguments: ConflictStrategy.allCases)
    func anOnlineUpdateIsSavedAsWrittenAndItsSnapshotSaysWhatItReplaced(_ strategy: ConflictStrategy) async throws {
        let live = try LiveSyncServer()
        let (_, second) = try await twoDevicesAfterTheFirstSetSeven(live, strategy)
        let streamed = Locked<[ConflictInfo]>([])
        let stream = second.sync.conflicts
        let collecting = Task { for await conflict in stream { streamed.update { $0.append(conflict) } } }
        defer { collecting.cancel() }

        // The second device never saw 7: its online write is still saved as written.
        let snapshot = try await second.carts.document("j1").updateData(["jersey": 8])
        #expect(serverDocument(live) == ["jersey": 8, "size": "M"], "under \(strategy)")
        #expect(snapshot.data == ["jersey": 8, "size": "M"])
        #expect(!snapshot.metadata.hasPendingWrites && !snapshot.metadata.isFromCache)
        let replaced = try #require(snapshot.metadata.conflicts.first, "the snapshot lists no conflict under \(strategy)")
        #expect(snapshot.metadata.conflicts.count == 1)
        #expect(replaced.path == (try FieldPath("jersey")) && replaced.serverValue == 7 && replaced.clientValue == 8)
        #expect(replaced.outcome == .clientWon)
        #expect(
            await eventually { streamed.value.contains { $0.documentId == "j1" && $0.conflicts == [replaced] } },
            "the conflicts stream did not hear of it")
        await live.stop()
    }

    @Test(arguments: ConflictStrategy.allCases)
    func anOnlineDeleteDeletes(_ strategy: ConflictStrategy) async throws {
        let live = try LiveSyncServer()
        let (first, second) = try await twoDevicesAfterTheFirstSetSeven(live, strategy)
        let snapshot = try await second.carts.document("j1").delete()
        #expect(serverDocument(live) == nil, "under \(strategy) the server kept \(String(describing: serverDocument(live)))")
        #expect(snapshot.data == nil)
        await first.sync.syncNow()
        #expect(try await first.carts.document("j1").getDocument(source: .cache).data == nil)
        await live.stop()
    }

    @Test func anOnlineWriteIsNotToldOfTheRefusalOfEarlierQueuedWritesSentAgainBeforeIt() async throws {
        let live = try LiveSyncServer(rules: RuleBook(fallback: SwitchableRules()))
        // Batches of one change, each push 200 ms: the two refused writes, composed offline, are
        // sent again one by one ahead of the online write while its call waits.
        let sync = try slowPushingInstance(live, storePath: folder.path("slow.sqlite"), pushDelay: .milliseconds(200))
        let rejections = Locked<[DocumentRejection]>([])
        let stream = sync.documentRejections
        let collecting = Task { for await rejection in stream { rejections.update { $0.append(rejection) } } }
        defer { collecting.cancel() }
        let notes = sync.collection("notes")
        await sync.syncNow()
        await sync.disconnect()
        try await notes.document("j1").setData(["n": 1, "invalid": true])
        try await notes.document("j1").setData(["n": 2, "invalid": true])
        await sync.reconnect()
        try await Task.sleep(for: .milliseconds(50)) // the composed change is on its way
        let snapshot = try await notes.document("j1").setData(["n": 4])
        #expect(!snapshot.metadata.hasPendingWrites && snapshot.data == ["n": 4])
        #expect(try live.service.document(DocumentKey(collection: "notes", id: "j1"), caller: .user("ana")).state.document == ["n": 4])
        #expect(await eventually { rejections.value.count == 2 }, "rejections heard: \(rejections.value)")
        await live.stop()
    }

    /// The facade forwards: an online write waits for its own push, which the run going sends
    /// between two pulled pages, not for the pulls. Before, a write made during a first sync
    /// waited for every page, then for a run of its own (push and pull).
    @Test func anOnlineWriteMadeWhileARunPullsWaitsForItsPushNotForThePulls() async throws {
        let live = try LiveSyncServer()
        // 1,200 documents: three pages of 500, each pull taking 400 ms.
        for batch in 0..<2 {
            let changes = try (0..<600).map { index in
                (
                    DocumentKey(collection: "carts", id: "c\(batch)-\(index)"),
                    try DocumentDelta.create(["n": .int(Int64(index))], base: .zero)
                )
            }
            _ = try live.service.push(makeRequest(changes, client: "seed", sequence: Int64(batch + 1)), caller: .user("ana"))
        }
        let made = Locked<PullCountingTransport?>(nil)
        let sync = try AbrovaSync(
            config: try AbrovaSyncConfigBuilder(apiKey: LiveSyncServer.apiKey)
                .serverURL(live.url)
                .storePath(folder.path("pulling.sqlite"))
                .authToken(LiveSyncServer.token(of: "ana"))
                .transport { token in
                    let transport = PullCountingTransport(
                        SlowTransport(live.makeTransport(as: nil, token: token), pullDelay: .milliseconds(400)))
                    made.update { $0 = transport }
                    return transport
                }
                .build())
        live.onStop { await sync.close() }
        let transport = try #require(made.value)
        #expect(await eventually(30) { transport.begun.value >= 1 }, "the first sync did not start")

        let snapshot = try await sync.collection("carts").document("w1").setData(["n": 1])
        let pagesWhenAnswered = transport.ended.value
        #expect(!snapshot.metadata.hasPendingWrites)
        #expect(try live.service.document(DocumentKey(collection: "carts", id: "w1"), caller: .user("ana")).state.document == ["n": 1])
        #expect(pagesWhenAnswered < 3, "the write waited for \(pagesWhenAnswered) pulled pages")
        // The run goes on and brings every page.
        let last = sync.collection("carts").document("c1-599")
        #expect(await eventually(30) { (try? await last.getDocument(source: .cache).data) == ["n": 599] }, "the last page never came")
        #expect(await sync.pendingCount == 0)
        await live.stop()
    }

    @Test func aQueuedWriteIsStillSettledByTheStrategy() async throws {
        let live = try LiveSyncServer()
        let (_, second) = try await twoDevicesAfterTheFirstSetSeven(live, .serverWins)
        // Written offline: queued, settled by serverWins (7 stays).
        await second.sync.disconnect()
        let queued = try await second.carts.document("j1").updateData(["jersey": 9])
        #expect(queued.metadata.hasPendingWrites)
        await second.sync.reconnect()
        #expect(await eventually { await second.sync.pendingCount == 0 })
        #expect(serverDocument(live) == ["jersey": 7, "size": "M"])
        #expect(try await second.carts.document("j1").getDocument(source: .cache).data == ["jersey": 7, "size": "M"])
        // Online, a write the device makes on top is saved as written.
        try await second.carts.document("j1").updateData(["size": "L"])
        #expect(serverDocument(live) == ["jersey": 7, "size": "L"])
        await live.stop()
    }
}
