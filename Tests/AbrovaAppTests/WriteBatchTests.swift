import AbrovaSync
import Foundation
import Testing

/// `sync.batch()` as an app uses it against `abrova serve` (owner-only rules: `ben` may not write
/// `ana`'s documents): a batch stands whole or not at all, online and offline.
@Suite(.timeLimit(.minutes(3))) struct WriteBatchTests {
    /// Moves eggs from the cart to saved-for-later in one batch.
    func move(on device: AbrovaSync, cart: String = "c1") -> WriteBatch {
        let batch = device.batch()
        batch.updateData(["qty.eggs": .delete(), "items": .arrayRemove(["eggs"])], forDocument: device.collection("carts").document(cart))
        batch.setData(["qty": 6, "from": .string(cart)], forDocument: device.collection("saved").document("eggs"), merge: true)
        batch.updateData(["moves": .increment(1)], forDocument: device.collection("carts").document(cart))
        return batch
    }

    @Test(arguments: ServedForApps.Store.available)
    func aBatchIsSavedWholeOnlineAndOffline(store: ServedForApps.Store) async throws {
        let server = try await ServedForApps(store: store)
        let phone = try server.device("phone")
        let cart = phone.collection("carts").document("c1")
        try await cart.setData(["qty": ["eggs": 6, "milk": 1], "moves": 0])
        try await cart.updateData(["items": .arrayUnion(["eggs", "milk"])])
        try await move(on: phone).commit()
        let onServer = try await cart.getDocument(source: .server)
        #expect(onServer.data == ["items": ["milk"], "qty": ["milk": 1], "moves": 1])
        #expect(try await phone.collection("saved").document("eggs").getDocument(source: .server).data == ["qty": 6, "from": "c1"])

        // Offline: saved on the device at once, both documents; sent together later.
        await phone.disconnect()
        let batch = phone.batch()
        batch.setData(["qty": ["bread": 1]], forDocument: phone.collection("carts").document("c2"))
        batch.updateData(["qty.milk": .increment(2)], forDocument: cart)
        batch.deleteDocument(phone.collection("saved").document("eggs"))
        try await batch.commit()
        #expect(try await cart.getDocument(source: .cache).get("qty.milk")?.intValue == 3)
        #expect(try await phone.collection("saved").document("eggs").getDocument(source: .cache).exists == false)
        #expect(await phone.pendingCount == 3)
        await phone.reconnect()
        await phone.syncNow()
        #expect(await phone.pendingCount == 0)
        #expect(try await cart.getDocument(source: .server).get("qty.milk")?.intValue == 3)
        #expect(try await phone.collection("carts").document("c2").getDocument(source: .server).exists)
        #expect(try await phone.collection("saved").document("eggs").getDocument(source: .server).exists == false)
        await phone.close()
    }

    /// Online, the write the server refuses is thrown and nothing of the batch stays, here or
    /// there.
    @Test func aRefusedWriteTakesTheWholeBatchWithItOnline() async throws {
        let server = try await ServedForApps()
        let ana = try server.device("ana")
        try await ana.collection("carts").document("c1").setData(["owner": "ana"])
        let ben = try server.device("ben", token: "t2")
        let batch = ben.batch()
        batch.setData(["note": "mine"], forDocument: ben.collection("lists").document("b1"))
        batch.setData(["owner": "ben"], forDocument: ben.collection("carts").document("c1")) // ana's
        await #expect(throws: AbrovaSyncError.self) { try await batch.commit() }
        #expect(try await ben.collection("lists").document("b1").getDocument(source: .cache).exists == false)
        #expect(try await ben.collection("lists").document("b1").getDocument(source: .server).exists == false)
        #expect(try await ana.collection("carts").document("c1").getDocument(source: .server).data == ["owner": "ana"])
        #expect(await ben.pendingCount == 0)
        await ana.close()
        await ben.close()
    }

    /// Offline, a batch the server refuses later is rolled back whole and reported once.
    @Test func aBatchRefusedLaterIsRolledBackWholeAndReportedOnce() async throws {
        let server = try await ServedForApps()
        let ana = try server.device("ana")
        try await ana.collection("carts").document("c1").setData(["owner": "ana"])
        let ben = try server.device("ben", token: "t2")
        let rejections = Locked<[String]>([])
        let stream = ben.documentRejections
        let collector = Task { for await rejection in stream { rejections.update { $0.append(rejection.documentId) } } }
        await ben.disconnect()
        let batch = ben.batch()
        batch.setData(["note": "mine"], forDocument: ben.collection("lists").document("b1"))
        batch.setData(["owner": "ben"], forDocument: ben.collection("carts").document("c1"))
        try await batch.commit()
        #expect(try await ben.collection("lists").document("b1").getDocument(source: .cache).exists)
        await ben.reconnect()
        await ben.syncNow()
        try await Task.sleep(for: .milliseconds(100))
        #expect(try await ben.collection("lists").document("b1").getDocument(source: .cache).exists == false)
        #expect(try await ben.collection("carts").document("c1").getDocument(source: .cache).exists == false)
        #expect(try await ben.collection("lists").document("b1").getDocument(source: .server).exists == false)
        #expect(rejections.value == ["c1"])
        #expect(await ben.pendingCount == 0)
        collector.cancel()
        await ana.close()
        await ben.close()
    }

    /// Under manual, a batch with a write the resolver would be asked about is refused whole (its
    /// conflict would describe a document the batch had changed, never saved): rolled back on the
    /// device, reported once, and nothing of it on the server.
    @Test func underManualAConflictRefusesTheWholeBatch() async throws {
        let server = try await ServedForApps()
        let asked = Locked(0)
        func device(_ name: String) throws -> AbrovaSync {
            try AbrovaSync(
                config: try AbrovaSyncConfigBuilder(apiKey: "k").serverURL(server.url).authToken("t")
                    .storePath(server.folder.path("\(name).sqlite")).conflictStrategy(.manual)
                    .conflictResolver { _ in
                        asked.update { $0 += 1 }
                        return .useServer
                    }
                    .build())
        }
        let phone = try device("phone")
        let tablet = try device("tablet")
        try await phone.collection("carts").document("c1").setData(["note": "first"])
        await tablet.syncNow()
        await tablet.disconnect()
        let rejections = Locked<[String]>([])
        let stream = tablet.documentRejections
        let collector = Task { for await rejection in stream { rejections.update { $0.append(rejection.documentId) } } }
        let batch = tablet.batch()
        batch.setData(["eggs": 6], forDocument: tablet.collection("saved").document("s1"))
        batch.updateData(["note": "tablet"], forDocument: tablet.collection("carts").document("c1"))
        try await batch.commit()
        try await phone.collection("carts").document("c1").updateData(["note": "phone"])
        await tablet.reconnect()
        await tablet.syncNow()
        try await Task.sleep(for: .milliseconds(100))
        #expect(try await phone.collection("saved").document("s1").getDocument(source: .server).exists == false)
        #expect(try await phone.collection("carts").document("c1").getDocument(source: .server).get("note")?.stringValue == "phone")
        #expect(try await tablet.collection("saved").document("s1").getDocument(source: .cache).exists == false)
        #expect(try await tablet.collection("carts").document("c1").getDocument(source: .cache).get("note")?.stringValue == "phone")
        #expect(rejections.value == ["s1"])
        #expect(asked.value == 0)
        #expect(await tablet.pendingCount == 0)
        collector.cancel()
        await phone.close()
        await tablet.close()
    }

    /// What cannot be saved on the device saves nothing; a batch commits once.
    @Test func aWriteThatCannotBeMadeSavesNothing() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        await phone.disconnect()
        let batch = phone.batch()
        batch.setData(["note": "x"], forDocument: phone.collection("lists").document("l1"))
        batch.updateData(["qty": 1], forDocument: phone.collection("carts").document("missing"))
        await #expect(throws: AbrovaSyncError.self) { try await batch.commit() }
        #expect(try await phone.collection("lists").document("l1").getDocument(source: .cache).exists == false)
        #expect(await phone.pendingCount == 0)

        let once = phone.batch().setData(["note": "y"], forDocument: phone.collection("lists").document("l2"))
        try await once.commit()
        await #expect(throws: AbrovaSyncError.self) { try await once.commit() }
        await #expect(throws: AbrovaSyncError.self) { try await phone.batch().commit() }
        let bad = phone.batch().updateData(["a..b": 1], forDocument: phone.collection("lists").document("l2"))
        await #expect(throws: AbrovaSyncError.self) { try await bad.commit() }
        #expect(await phone.pendingCount == 1)
        await phone.close()
    }
}

/// A value shared between the test and the tasks it starts.
final class Locked<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value { lock.withLock { stored } }
    func update(_ body: (inout Value) -> Void) { lock.withLock { body(&stored) } }
}
