import AbrovaSync
import Foundation
import Testing

/// Partial sync as an app uses it against `abrova serve`: a device keeps only the collections of
/// its scope; widening it pulls the new part, narrowing it removes the rest (unsent writes stay
/// until sent), and the configured scope applies at every start.
@Suite(.timeLimit(.minutes(3))) struct SyncScopeTests {
    func device(_ server: ServedForApps, _ name: String, scope: [String]? = nil) throws -> AbrovaSync {
        var builder = AbrovaSyncConfigBuilder(apiKey: "k").serverURL(server.url).authToken("t")
            .storePath(server.folder.path("\(name).sqlite"))
        if let scope { builder = builder.syncScope(collections: scope) }
        return try AbrovaSync(config: try builder.build())
    }

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
}
