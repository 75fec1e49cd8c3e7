import AbrovaSync
import Foundation
import Testing

/// Firestore-shaped queries, as an app writes them, against `abrova serve`: one device writes, the
/// other queries (its default source pulls the server's changes first).
@Suite(.timeLimit(.minutes(2))) struct QueryTests {
    static let items: [(id: String, name: String, price: Double, tags: [String])] = [
        ("a", "apple", 2, ["fruit"]), ("b", "bread", 3.5, ["bakery"]), ("c", "cheese", 7, ["dairy"]),
        ("d", "dates", 4, ["fruit", "dried"]), ("e", "eggs", 3, ["dairy"]), ("f", "figs", 9.5, ["fruit"]),
    ]

    func ids(_ snapshots: [AbrovaSync.DocumentSnapshot]) -> [String] { snapshots.map(\.documentID) }

    @Test func filtersOrderAndLimitFindTheDocumentsAnotherDeviceWrote() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        let tablet = try server.device("tablet")
        for item in Self.items {
            try await phone.collection("items").document(item.id).setData(["name": item.name, "price": item.price, "tags": item.tags])
        }
        try await phone.collection("items").document("g").setData(["name": "gift card"]) // no price
        try await phone.collection("items").document("h").setData(["name": "honey", "price": 5]) // an integer price
        let items = tablet.collection("items")
        let ceiling = 4.0

        #expect(ids(try await items.whereField("price", isLessThan: ceiling).order(by: "price").getDocuments()) == ["a", "e", "b"])
        #expect(ids(try await items.whereField("price", isLessThanOrEqualTo: ceiling).getDocuments()) == ["a", "b", "d", "e"])
        #expect(
            ids(try await items.whereField("price", isGreaterThan: 5).order(by: "price", descending: true).getDocuments()) == ["f", "c"])
        #expect(ids(try await items.whereField("price", isGreaterThanOrEqualTo: 5).getDocuments()) == ["c", "f", "h"])
        #expect(ids(try await items.whereField("price", isEqualTo: 5.0).getDocuments()) == ["h"], "5 and 5.0 are one number")
        #expect(ids(try await items.whereField("name", isEqualTo: "eggs").getDocuments()) == ["e"])
        #expect(
            ids(try await items.whereField("name", isNotEqualTo: "eggs").whereField("price", isLessThan: 4).getDocuments()) == ["a", "b"])
        #expect(ids(try await items.whereField("price", isNotEqualTo: 3).getDocuments()) == ["a", "b", "c", "d", "f", "h"])
        #expect(ids(try await items.whereField("name", in: ["figs", "apple", "kale"]).getDocuments()) == ["a", "f"])
        let wanted = ["figs", "dates"]
        #expect(ids(try await items.whereField("name", in: wanted).getDocuments()) == ["d", "f"])
        #expect(
            ids(try await items.whereField("tags", arrayContains: "fruit").order(by: "price").limit(to: 2).getDocuments()) == ["a", "d"])
        #expect(
            ids(try await items.whereField("name", isGreaterThanOrEqualTo: "f").whereField("name", isLessThan: "h").getDocuments()) == [
                "f", "g",
            ])
        #expect(ids(try await items.order(by: "price").limit(to: 3).getDocuments()) == ["g", "a", "e"], "without the field first")
        #expect(ids(try await items.order(by: "price", descending: true).getDocuments()).last == "g", "and last descending")
        #expect(ids(try await items.limit(to: 2).getDocuments()) == ["a", "b"])
        #expect(try await items.getDocuments(source: .cache).count == 8)
        #expect(ids(try await items.whereField("price", isLessThan: "z").getDocuments()).isEmpty, "a string is no bound on numbers")
        let fromServer = try await items.whereField("price", isLessThan: 3).getDocuments(source: .server)
        #expect(ids(fromServer) == ["a"] && fromServer.allSatisfy { !$0.metadata.isFromCache })
        await phone.close()
        await tablet.close()
    }

    @Test func aQuerysSnapshotsFollowItsDocuments() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        let items = phone.collection("items")
        try await items.document("a").setData(["name": "apple", "price": 2])
        let cheap = items.whereField("price", isLessThan: 3).order(by: "price")
        // Each write is seen twice (as written, then as the server confirmed it): the stream is
        // read until it shows what the write made.
        var stream = await cheap.snapshots().makeAsyncIterator()
        func shows(_ expected: [String]) async -> Bool {
            for _ in 0..<5 {
                guard let documents = await stream.next() else { return false }
                if ids(documents) == expected { return true }
            }
            return false
        }
        #expect(await shows(["a"]))
        try await items.document("b").setData(["name": "banana", "price": 1])
        #expect(await shows(["b", "a"]))
        try await items.document("a").updateData(["price": 4])
        #expect(await shows(["b"]))

        let heard = Heard()
        let registration = await items.whereField("name", isEqualTo: "cherry").addSnapshotListener { heard.add($0.count) }
        try await items.document("c").setData(["name": "cherry", "price": 6])
        #expect(await heard.eventually { $0.first == 0 && $0.last == 1 })
        registration.remove()
        await phone.close()
    }

    @Test func aQueryThatCannotRunSaysWhy() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        let items = phone.collection("items")
        let badPath = await #expect(throws: AbrovaSyncError.self) { try await items.whereField("a..b", isEqualTo: 1).getDocuments() }
        #expect(badPath?.kind == .refused && badPath?.statusCode == 400)
        let noValues = await #expect(throws: AbrovaSyncError.self) { try await items.whereField("name", in: [String]()).getDocuments() }
        #expect(noValues?.message.contains("1 to 30 values") == true)
        let rangeOverArray = await #expect(throws: AbrovaSyncError.self) {
            try await items.whereField("tags", isLessThan: ["x"]).getDocuments()
        }
        #expect(rangeOverArray?.kind == .refused)
        for query in [items.order(by: ""), items.whereField("name", in: [String]()), items.whereField("tags", isGreaterThan: ["x": 1])] {
            var ended = await query.snapshots().makeAsyncIterator()
            #expect(await ended.next() == nil, "a query that cannot run is followed")
        }
        await phone.close()

        // A token the server does not know: the server source says so; the default reads the device.
        let stranger = try server.device("stranger", token: "not-a-token")
        let unauthorized = await #expect(throws: AbrovaSyncError.self) {
            try await stranger.collection("items").whereField("price", isEqualTo: 1).getDocuments(source: .server)
        }
        #expect(unauthorized?.kind == .unauthorized, "\(String(describing: unauthorized))")
        await stranger.close()

        // Unreachable: the server source fails, the default falls back to the device.
        let offline = try AbrovaSync(
            config: try AbrovaSyncConfigBuilder(apiKey: "k").serverURL(URL(string: "http://127.0.0.1:9")!).authToken("t")
                .storePath(server.folder.path("offline.sqlite")).build())
        try await offline.collection("items").document("z").setData(["price": 1])
        let unreachable = await #expect(throws: AbrovaSyncError.self) {
            try await offline.collection("items").whereField("price", isEqualTo: 1).getDocuments(source: .server)
        }
        #expect(unreachable?.kind == .unreachable)
        let local = try await offline.collection("items").whereField("price", isEqualTo: 1).getDocuments()
        #expect(ids(local) == ["z"] && local.allSatisfy { $0.metadata.isFromCache && $0.metadata.hasPendingWrites })
        await offline.close()
    }
}

/// What a listener heard, in order.
final class Heard: Sendable {
    // NSLock, as an app on iOS 16 would (Synchronization's Mutex needs iOS 18).
    private let lock = NSLock()
    nonisolated(unsafe) private var counts: [Int] = []

    func add(_ count: Int) { lock.withLock { counts.append(count) } }

    /// Whether the counts heard come to satisfy `isDone` within 5 seconds.
    func eventually(_ isDone: ([Int]) -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline {
            if isDone(lock.withLock { counts }) { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return false
    }
}

/// A view model as a SwiftUI app keeps one: isolated to the main actor, its properties set inside
/// the listeners' closures without a hop by hand.
@MainActor final class ItemsModel {
    var names: [String] = []
    var cheapest: String?
    var first: String?
    private var registrations: [ListenerRegistration] = []

    var shown: Shown { Shown(names: names, cheapest: cheapest, first: first) }

    func follow(_ sync: AbrovaSync) async {
        let items = sync.collection("items")
        registrations.append(await items.addSnapshotListener { documents in self.names = documents.map(\.documentID) })
        registrations.append(
            await items.order(by: "price").limit(to: 1).addSnapshotListener { documents in
                MainActor.assertIsolated()
                self.cheapest = documents.first?.documentID
            })
        registrations.append(await items.document("a").addSnapshotListener { snapshot in self.first = snapshot.get("name")?.stringValue })
    }

    func stop() { registrations.forEach { $0.remove() } }
}

struct Shown: Equatable, Sendable {
    var names: [String]
    var cheapest: String?
    var first: String?
}

@Suite(.timeLimit(.minutes(2))) struct MainActorListenerTests {
    @Test func listenersSetAMainActorModelsProperties() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        let model = ItemsModel()
        await model.follow(phone)
        try await phone.collection("items").document("a").setData(["name": "apple", "price": 2])
        try await phone.collection("items").document("b").setData(["name": "bread", "price": 1])
        let expected = Shown(names: ["a", "b"], cheapest: "b", first: "apple")
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline, await model.shown != expected { try await Task.sleep(for: .milliseconds(10)) }
        #expect(await model.shown == expected)
        await model.stop()
        await phone.close()
    }

    /// The one-callback setters and a `SyncListener` that is a `@MainActor` view model set its
    /// properties without a hop by hand; `syncNow()` returns once they have heard its run.
    @Test func syncCallbacksAndListenersSetAMainActorModelsProperties() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        let model = StatusModel()
        await model.follow(phone)
        await phone.disconnect()
        try await phone.collection("items").document("a").setData(["name": "apple"])
        await phone.reconnect()
        await phone.syncNow()
        let (synced, completed, states, counts) = await (model.synced, model.completedRuns, model.states, model.counts)
        #expect(synced.contains("a"), "\(synced)")
        #expect(completed > 0)
        #expect(states.last == .idle && counts.last == 0, "\(states) \(counts)")
        await phone.close()
    }
}

/// A status view model: the SDK's callbacks and listener methods set its properties on the main actor.
@MainActor final class StatusModel: SyncEngine.SyncListener {
    var synced: [String] = []
    var completedRuns = 0
    var states: [AbrovaSync.SyncState] = []
    var counts: [Int] = []

    func follow(_ sync: AbrovaSync) {
        sync.addSyncListener(self)
        sync.onSyncState { state in self.states.append(state) }
        sync.onPendingCount { count in
            MainActor.assertIsolated()
            self.counts.append(count)
        }
    }

    func onDocumentSynced(documentId: String, operation: AbrovaSync.OperationType) { synced.append(documentId) }
    func onSyncCompleted(syncedCount: Int) { completedRuns += 1 }
}
