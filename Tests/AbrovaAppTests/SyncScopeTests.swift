import AbrovaSync
import Foundation
import Synchronization
import Testing

/// Partial sync as an app uses it against `abrova serve`: a device keeps only the collections of
/// its scope; widening it pulls the new part, narrowing it removes the rest (unsent writes stay
/// until sent), and the configured scope applies at every start.
@Suite(.timeLimit(.minutes(3))) struct SyncScopeTests {
    func device(_ server: ServedForApps, _ name: String, scope: [String]? = nil, queries: [SyncScopeQuery]? = nil) throws -> AbrovaSync {
        var builder = AbrovaSyncConfigBuilder(apiKey: "k").serverURL(server.url).authToken("t")
            .storePath(server.folder.path("\(name).sqlite"))
        if let scope { builder = builder.syncScope(collections: scope) }
        if let queries { builder = builder.syncScope(queries) }
        return try AbrovaSync(config: try builder.build())
    }

    static let anasCarts = SyncScopeQuery(collection: "carts").whereField("owner", isEqualTo: "ana")
    static let bensCarts = SyncScopeQuery(collection: "carts").whereField("owner", isEqualTo: "ben")

    func cached(_ device: AbrovaSync, _ collection: String) async throws -> Set<String> {
        Set(try await device.collection(collection).getDocuments(source: .cache).map(\.documentID))
    }

    @Test(arguments: ServedForApps.Store.available)
    func aDeviceKeepsItsScopeAndFollowsItsChanges(store: ServedForApps.Store) async throws {
        let server = try await ServedForApps(store: store)
        let web = try device(server, "web")
        for id in ["c1", "c2"] { try await web.collection("carts").document(id).setData(["n": 1]) }
        for id in ["o1", "o2", "o3"] { try await web.collection("orders").document(id).setData(["n": 1]) }

        let phone = try device(server, "phone", scope: ["carts"])
        await phone.syncNow()
        #expect(try await cached(phone, "carts") == ["c1", "c2"])
        #expect(try await cached(phone, "orders").isEmpty)
        // Writes to any collection still go out.
        try await phone.collection("orders").document("o4").setData(["n": 4])
        #expect(try await web.collection("orders").document("o4").getDocument(source: .server).exists)
        try await web.collection("orders").document("o1").updateData(["n": 2])
        try await web.collection("carts").document("c1").updateData(["n": 2])
        await phone.syncNow()
        #expect(try await phone.collection("carts").document("c1").getDocument(source: .cache).get("n")?.intValue == 2)
        // A document of another collection it wrote leaves once sent (and pulled past).
        #expect(try await cached(phone, "orders").isEmpty)

        // Widening pulls the new part whole, then goes on from the cursor.
        try await phone.setSyncScope(collections: ["carts", "orders"])
        await phone.syncNow()
        #expect(try await cached(phone, "orders") == ["o1", "o2", "o3", "o4"])
        #expect(try await phone.collection("orders").document("o1").getDocument(source: .cache).get("n")?.intValue == 2)
        try await web.collection("orders").document("o2").updateData(["n": 5])
        await phone.syncNow()
        #expect(try await phone.collection("orders").document("o2").getDocument(source: .cache).get("n")?.intValue == 5)

        // Narrowing removes the rest at once, but an unsent write stays until it is sent.
        await phone.disconnect()
        try await phone.collection("orders").document("o5").setData(["n": 5])
        try await phone.setSyncScope(collections: ["carts"])
        #expect(try await cached(phone, "orders") == ["o5"])
        #expect(try await cached(phone, "carts") == ["c1", "c2"])
        await phone.reconnect()
        await phone.syncNow()
        #expect(await phone.pendingCount == 0)
        #expect(try await cached(phone, "orders").isEmpty)
        #expect(try await web.collection("orders").document("o5").getDocument(source: .server).exists)
        await phone.close()

        // At the next start the configured scope applies.
        let restarted = try device(server, "phone", scope: ["orders"])
        await restarted.syncNow()
        #expect(try await cached(restarted, "carts").isEmpty)
        #expect(try await cached(restarted, "orders") == ["o1", "o2", "o3", "o4", "o5"])
        await restarted.close()
        await web.close()
    }

    @Test func aScopeMustNameCollections() async throws {
        #expect(throws: AbrovaSyncError.self) { try AbrovaSyncConfigBuilder(apiKey: "k").syncScope(collections: []).build() }
        #expect(throws: AbrovaSyncError.self) { try AbrovaSyncConfigBuilder(apiKey: "k").syncScope(collections: ["a b"]).build() }
        let server = try await ServedForApps()
        let phone = try device(server, "phone")
        await #expect(throws: AbrovaSyncError.self) { try await phone.setSyncScope(collections: ["no/slash"]) }
        await #expect(throws: AbrovaSyncError.self) { try await phone.setSyncScope(collections: []) }
        await phone.close()
    }

    @Test(arguments: ServedForApps.Store.available)
    func aDeviceKeepsTheDocumentsItsQueriesMatchAndLetsGoOfThoseThatStopMatching(store: ServedForApps.Store) async throws {
        let server = try await ServedForApps(store: store)
        let web = try device(server, "web")
        try await web.collection("carts").document("c1").setData(["owner": "ana", "milk": 1])
        try await web.collection("carts").document("c2").setData(["owner": "ben", "milk": 1])
        try await web.collection("carts").document("c3").setData(["owner": "ana", "milk": 1])
        try await web.collection("lists").document("l1").setData(["owner": "ana"])

        let phone = try device(server, "phone", queries: [Self.anasCarts])
        await phone.syncNow()
        #expect(try await cached(phone, "carts") == ["c1", "c3"])
        #expect(try await cached(phone, "lists").isEmpty)

        // A document that stops matching leaves at the next pull; one that starts matching comes;
        // a deleted one goes.
        try await web.collection("carts").document("c1").updateData(["owner": "ben"])
        try await web.collection("carts").document("c2").updateData(["owner": "ana"])
        try await web.collection("carts").document("c3").delete()
        await phone.syncNow()
        #expect(try await cached(phone, "carts") == ["c2"])

        // The device's own write of a document outside the scope goes out, then leaves; so does
        // an edit that makes a document stop matching, once it is sent.
        await phone.disconnect()
        try await phone.collection("carts").document("c4").setData(["owner": "ben"])
        try await phone.collection("carts").document("c2").updateData(["owner": "cleo"])
        #expect(try await cached(phone, "carts") == ["c2", "c4"])
        await phone.reconnect()
        await phone.syncNow()
        #expect(await phone.pendingCount == 0)
        #expect(try await cached(phone, "carts").isEmpty)
        #expect(try await web.collection("carts").document("c4").getDocument(source: .server).exists)
        #expect(try await web.collection("carts").document("c2").getDocument(source: .server).get("owner")?.stringValue == "cleo")

        // Widening pulls what the new query matches; narrowing lets go of the rest.
        try await phone.setSyncScope([Self.anasCarts, Self.bensCarts])
        await phone.syncNow()
        #expect(try await cached(phone, "carts") == ["c1", "c4"])
        try await phone.setSyncScope([Self.anasCarts])
        #expect(try await cached(phone, "carts").isEmpty)
        try await phone.setSyncScope([SyncScopeQuery(collection: "carts")])
        await phone.syncNow()
        #expect(try await cached(phone, "carts") == ["c1", "c2", "c4"])
        await phone.close()
        await web.close()
    }

    @Test(arguments: ServedForApps.Store.available)
    func aLiveListenerSeesADocumentLeaveTheScope(store: ServedForApps.Store) async throws {
        let server = try await ServedForApps(store: store)
        let web = try device(server, "web")
        try await web.collection("carts").document("c1").setData(["owner": "ana", "milk": 1])
        let phone = try device(server, "phone", queries: [Self.anasCarts])
        await phone.syncNow()
        let seen = HeardIDs()
        let registration = await phone.collection("carts").addSnapshotListener { documents in seen.add(documents.map(\.documentID)) }
        #expect(await seen.eventually { $0.last == ["c1"] })
        try await web.collection("carts").document("c1").updateData(["owner": "ben"])
        #expect(await seen.eventually { $0.last == [] })
        try await web.collection("carts").document("c2").setData(["owner": "ana"])
        #expect(await seen.eventually { $0.last == ["c2"] })
        registration.remove()
        await phone.close()
        await web.close()
    }

    @Test func numbersMatchAcrossIntegersAndDoubles() async throws {
        let server = try await ServedForApps()
        let web = try device(server, "web")
        try await web.collection("items").document("a").setData(["qty": 2.0])
        try await web.collection("items").document("b").setData(["qty": 2])
        try await web.collection("items").document("c").setData(["qty": "2"])
        try await web.collection("items").document("d").setData(["size": ["qty": 2]])
        let phone = try device(server, "phone", queries: [SyncScopeQuery(collection: "items").whereField("qty", isEqualTo: 2)])
        await phone.syncNow()
        #expect(try await cached(phone, "items") == ["a", "b"])
        try await phone.setSyncScope([SyncScopeQuery(collection: "items").whereField("size.qty", isEqualTo: 2.0)])
        await phone.syncNow()
        #expect(try await cached(phone, "items") == ["d"])
        await phone.close()
        await web.close()
    }

    @Test func aScopeQueryThatCannotBeIsRefused() async throws {
        let carts = SyncScopeQuery(collection: "carts")
        #expect(throws: AbrovaSyncError.self) {
            try AbrovaSyncConfigBuilder(apiKey: "k").syncScope([carts.whereField("tags", isEqualTo: [String]())]).build()
        }
        #expect(throws: AbrovaSyncError.self) {
            try AbrovaSyncConfigBuilder(apiKey: "k").syncScope([carts.whereField("", isEqualTo: 1)]).build()
        }
        #expect(throws: AbrovaSyncError.self) {
            try AbrovaSyncConfigBuilder(apiKey: "k").syncScope([carts.whereField("a", isEqualTo: 1).whereField("a", isEqualTo: 2)]).build()
        }
        let server = try await ServedForApps()
        let phone = try device(server, "phone")
        await #expect(throws: AbrovaSyncError.self) { try await phone.setSyncScope([carts.whereField("at", isEqualTo: Date())]) }
        await #expect(throws: AbrovaSyncError.self) { try await phone.setSyncScope([]) }
        await #expect(throws: AbrovaSyncError.self) {
            try await phone.setSyncScope([(0..<11).reduce(carts) { query, index in query.whereField("f\(index)", isEqualTo: index) }])
        }
        await phone.close()
    }
}

/// What a listener heard, for a test to wait on.
final class HeardIDs: Sendable {
    private let lists = Mutex<[[String]]>([])

    func add(_ ids: [String]) { lists.withLock { $0.append(ids.sorted()) } }

    /// Whether `isDone` holds of what was heard within 10 seconds.
    func eventually(_ isDone: ([[String]]) -> Bool) async -> Bool {
        for _ in 0..<500 {
            if lists.withLock({ isDone($0) }) { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return false
    }
}
