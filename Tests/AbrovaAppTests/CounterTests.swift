import AbrovaSync
import Foundation
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `FieldValue.increment(n)` as an app uses it, against `abrova serve` on each of its stores:
/// increments made on two devices offline both count, under every strategy, and reads show a
/// plain number.
@Suite(.timeLimit(.minutes(3))) struct CounterTests {
    static let cases = ServedForApps.Store.available.flatMap { store in ConflictStrategy.allCases.map { (store, $0) } }

    func device(_ server: ServedForApps, _ name: String, _ strategy: ConflictStrategy) throws -> AbrovaSync {
        try AbrovaSync(
            config: try AbrovaSyncConfigBuilder(apiKey: "k").serverURL(server.url).authToken("t")
                .storePath(server.folder.path("\(name).sqlite")).conflictStrategy(strategy)
                .conflictResolver { _ in .useServer }
                .build())
    }

    @Test(arguments: cases)
    func twoDevicesThatEachAddOneMilkOfflineEndWithTwoMore(store: ServedForApps.Store, strategy: ConflictStrategy) async throws {
        let server = try await ServedForApps(store: store)
        let phone = try device(server, "phone", strategy)
        let tablet = try device(server, "tablet", strategy)
        try await phone.collection("carts").document("c1").setData(["owner": "ana", "qty": ["milk": 1]])
        await phone.syncNow()
        await tablet.syncNow()
        #expect(try await tablet.collection("carts").document("c1").getDocument(source: .cache).get("qty.milk")?.intValue == 1)

        await phone.disconnect()
        await tablet.disconnect()
        let onPhone = try await phone.collection("carts").document("c1").updateData(["qty.milk": .increment(1)])
        #expect(onPhone.get("qty.milk")?.intValue == 2)
        #expect(onPhone.metadata.hasPendingWrites)
        try await tablet.collection("carts").document("c1").updateData(["qty.milk": .increment(1)])

        await phone.reconnect()
        await tablet.reconnect()
        await phone.syncNow()
        await tablet.syncNow()
        await phone.syncNow()
        for device in [phone, tablet] {
            let shown = try await device.collection("carts").document("c1").getDocument(source: .cache)
            #expect(shown.data == ["owner": "ana", "qty": ["milk": 3]], "\(strategy) on \(store)")
            #expect(!shown.metadata.hasPendingWrites)
        }
        let onServer = try await phone.collection("carts").document("c1").getDocument(source: .server)
        #expect(onServer.get("qty.milk") == .int(3))
        await phone.close()
        await tablet.close()
    }

    /// Beside a write that conflicts (both devices set the note), the increments still count:
    /// under manual the conflict waits for the resolver, and its answer keeps the server's count.
    @Test(arguments: ConflictStrategy.allCases)
    func aConflictBesideAnIncrementNeverTakesTheIncrement(strategy: ConflictStrategy) async throws {
        let server = try await ServedForApps()
        let phone = try device(server, "phone", strategy)
        let tablet = try device(server, "tablet", strategy)
        try await phone.collection("carts").document("c1").setData(["note": "", "qty": ["milk": 0]])
        await phone.syncNow()
        await tablet.syncNow()
        await phone.disconnect()
        await tablet.disconnect()
        try await phone.collection("carts").document("c1").updateData(["note": "phone", "qty.milk": .increment(2)])
        try await tablet.collection("carts").document("c1").updateData(["note": "tablet", "qty.milk": .increment(3)])
        await phone.reconnect()
        await phone.syncNow()
        await tablet.reconnect()
        await tablet.syncNow()
        try await Task.sleep(for: .milliseconds(200)) // a manual resolution is written in a task of its own
        await tablet.syncNow()
        await phone.syncNow()

        let onServer = try await phone.collection("carts").document("c1").getDocument(source: .server)
        #expect(onServer.get("qty.milk") == .int(5), "\(strategy)")
        #expect(onServer.get("note")?.stringValue == (strategy == .clientWins ? "tablet" : "phone"), "\(strategy)")
        for device in [phone, tablet] {
            #expect(try await device.collection("carts").document("c1").getDocument(source: .cache).data == onServer.data)
        }
        await phone.close()
        await tablet.close()
    }

    /// `setData(_:merge: true)` counts, also on a document the device never saw; `setData`
    /// without merge replaces the document, so the field takes the amount.
    @Test func setDataMergedCountsAndSetDataReplaces() async throws {
        let server = try await ServedForApps()
        let phone = try device(server, "phone", .serverWins)
        let tablet = try device(server, "tablet", .serverWins)
        await phone.disconnect()
        await tablet.disconnect()
        try await phone.collection("stats").document("s1").setData(["visits": .increment(1), "by": "phone"], merge: true)
        try await tablet.collection("stats").document("s1").setData(["visits": .increment(1)], merge: true)
        await phone.reconnect()
        await tablet.reconnect()
        await phone.syncNow()
        await tablet.syncNow()
        let counted = try await tablet.collection("stats").document("s1").getDocument(source: .server)
        #expect(counted.data == ["visits": 2, "by": "phone"])

        let replaced = try await tablet.collection("stats").document("s1").setData(["visits": .increment(5)])
        #expect(replaced.data == ["visits": 5])
        await tablet.syncNow()
        #expect(try await phone.collection("stats").document("s1").getDocument(source: .server).data == ["visits": 5])
        await phone.close()
        await tablet.close()
    }

    /// Amounts of every kind an app has at hand; a double makes the counter a double; a plain
    /// read over HTTP shows a number.
    @Test func amountsOfEveryKindAndPlainReads() async throws {
        let server = try await ServedForApps()
        let phone = try device(server, "phone", .merge)
        let cart = phone.collection("carts").document("c1")
        try await cart.setData(["qty": ["milk": 1], "total": 10])
        let bought: Int64 = 2
        let many: UInt8 = 3
        try await cart.updateData(["qty.milk": .increment(bought), "qty.eggs": .increment(many), "note": "x"])
        let shown = try await cart.updateData(["total": .increment(2.5), "qty.milk": .increment(-1)])
        #expect(shown.data == ["qty": ["milk": 2, "eggs": 3], "total": 12.5, "note": "x"])
        await phone.syncNow()

        var request = URLRequest(url: server.url.appendingPathComponent("v1/docs/carts/c1"))
        request.setValue("k", forHTTPHeaderField: "X-API-Key")
        request.setValue("Bearer t", forHTTPHeaderField: "Authorization")
        let (body, response) = try await URLSession(configuration: .ephemeral).data(for: request)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        let answer = try #require(JSONSerialization.jsonObject(with: body) as? [String: Any])
        let data = try #require(answer["data"] as? [String: Any])
        #expect((data["qty"] as? [String: Any])?["milk"] as? Int == 2)
        #expect(data["total"] as? Double == 12.5)
        await phone.close()
    }

    /// An increment of a document the device does not have is refused at once, in words.
    @Test func anIncrementOfAMissingDocumentIsRefused() async throws {
        let server = try await ServedForApps()
        let phone = try device(server, "phone", .serverWins)
        await #expect(throws: AbrovaSyncError.self) {
            try await phone.collection("carts").document("nope").updateData(["qty.milk": .increment(1)])
        }
        await phone.close()
    }
}
