import AbrovaSync
import Foundation
import Testing

/// `setData(_:merge: true)` as an app uses it, against `abrova serve`: fields merge leaf by leaf
/// into the document, a device that never saw the document leaves the server's fields alone even
/// under clientWins, and a missing document is created.
@Suite(.timeLimit(.minutes(2))) struct MergingSetTests {
    @Test func mergedFieldsJoinTheDocumentLeafByLeaf() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        let cart = phone.collection("carts").document("c1")
        try await cart.setData(["owner": "ana", "qty": ["milk": 1, "eggs": 6]])
        let merged = try await cart.setData(["qty": ["milk": 2], "note": "soon"], merge: true)
        #expect(merged.get("qty.milk")?.intValue == 2)
        #expect(merged.get("qty.eggs")?.intValue == 6)
        #expect(merged.get("owner")?.stringValue == "ana")
        #expect(merged.get("note")?.stringValue == "soon")
        // merge: false replaces, as setData(_:) does.
        let replaced = try await cart.setData(["owner": "ben"], merge: false)
        #expect(replaced.data == ["owner": "ben"])

        let fresh = try await phone.collection("carts").document("c2").setData(["qty": ["milk": 1]], merge: true)
        #expect(fresh.exists && fresh.get("qty.milk")?.intValue == 1)
        let tablet = try server.device("tablet")
        let seen = try await tablet.collection("carts").document("c1").getDocument(source: .server)
        #expect(seen.data == ["owner": "ben"])
        let created = try await tablet.collection("carts").document("c2").getDocument(source: .server)
        #expect(created.get("qty.milk")?.intValue == 1)
        await phone.close()
        await tablet.close()
    }

    /// The tablet has never seen the cart and is offline: its merging set shows only its own
    /// fields at first, and once sent, the phone's other fields are still there, whatever the
    /// strategy (a set without merge would remove them under clientWins).
    @Test(arguments: [ConflictStrategy.clientWins, .serverWins, .merge])
    func aDeviceThatNeverSawTheDocumentKeepsTheServersFields(strategy: ConflictStrategy) async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        try await phone.collection("carts").document("c1").setData(["owner": "ana", "qty": ["milk": 1, "eggs": 6]])
        await phone.syncNow()

        let tablet = try AbrovaSync(
            config: try AbrovaSyncConfigBuilder(apiKey: "k").serverURL(server.url).authToken("t")
                .storePath(server.folder.path("tablet.sqlite")).conflictStrategy(strategy).build())
        await tablet.disconnect()
        let cart = tablet.collection("carts").document("c1")
        let offline = try await cart.setData(["qty": ["milk": 3], "note": "from the tablet"], merge: true)
        #expect(offline.data == ["qty": ["milk": 3], "note": "from the tablet"])
        #expect(offline.metadata.hasPendingWrites)
        await tablet.reconnect()
        await tablet.syncNow()

        let onServer = try await cart.getDocument(source: .server)
        #expect(onServer.get("owner")?.stringValue == "ana")
        #expect(onServer.get("qty.eggs")?.intValue == 6)
        // The milk the tablet never saw conflicts with its write: the strategy settles it.
        #expect(onServer.get("qty.milk")?.intValue == (strategy == .clientWins ? 3 : 1))
        #expect(onServer.get("note")?.stringValue == "from the tablet")
        let shown = try await cart.getDocument(source: .cache)
        #expect(shown.data == onServer.data)
        await phone.close()
        await tablet.close()
    }

    /// Under manual, the resolver's `local` for a merging set from a device that never saw the
    /// document holds the server's fields too: `useLocal` keeps the device's merged fields and
    /// removes nothing of the other device's.
    @Test func useLocalAfterAMergingSetKeepsTheOtherDevicesFields() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        try await phone.collection("carts").document("c1").setData(["owner": "ana", "qty": ["milk": 1, "eggs": 6]])
        await phone.syncNow()

        let seen = AbrovaSyncTestBox()
        let tablet = try AbrovaSync(
            config: try AbrovaSyncConfigBuilder(apiKey: "k").serverURL(server.url).authToken("t")
                .storePath(server.folder.path("tablet.sqlite")).conflictStrategy(.manual)
                .conflictResolver { info in
                    seen.set(info.local.map { .map($0) })
                    return .useLocal
                }
                .build())
        await tablet.disconnect()
        let cart = tablet.collection("carts").document("c1")
        try await cart.setData(["qty": ["milk": 2]], merge: true)
        await tablet.reconnect()
        await tablet.syncNow()
        try await Task.sleep(for: .milliseconds(300))
        await tablet.syncNow()

        #expect(seen.value == ["owner": "ana", "qty": ["milk": 2, "eggs": 6]])
        let onServer = try await phone.collection("carts").document("c1").getDocument(source: .server)
        #expect(onServer.data == ["owner": "ana", "qty": ["milk": 2, "eggs": 6]])
        await phone.close()
        await tablet.close()
    }

    /// A document the device saw deleted is created anew from the merged fields alone.
    @Test func aMergingSetAfterADeleteCreatesTheDocumentAnew() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        let cart = phone.collection("carts").document("c1")
        try await cart.setData(["owner": "ana", "qty": ["milk": 1]])
        try await cart.delete()
        let merged = try await cart.setData(["qty": ["eggs": 2]], merge: true)
        #expect(merged.data == ["qty": ["eggs": 2]])
        await phone.syncNow()
        let onServer = try await cart.getDocument(source: .server)
        #expect(onServer.data == ["qty": ["eggs": 2]])
        await phone.close()
    }

    struct Profile: Codable, Equatable {
        var name: String
        var seenAt: Date
    }

    @Test func anEncodableValueMergesToo() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        let user = phone.collection("users").document("u1")
        try await user.setData(["name": "old", "karma": 3])
        let seenAt = Date(timeIntervalSince1970: 1_700_000_000)
        let merged = try await user.setData(from: Profile(name: "Ana", seenAt: seenAt), merge: true)
        #expect(merged.get("karma")?.intValue == 3)
        #expect(try merged.data(as: Profile.self) == Profile(name: "Ana", seenAt: seenAt))
        await phone.close()
    }

    @Test func aValueThatCannotBeStoredIsRefusedAndNothingIsQueued() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        await phone.disconnect()
        let cart = phone.collection("carts").document("c1")
        await #expect(throws: AbrovaSyncError.self) { try await cart.setData(["a": ["$bad": 1]], merge: true) }
        await #expect(throws: AbrovaSyncError.self) { try await cart.setData(["": 1], merge: true) }
        #expect(try await cart.getDocument(source: .cache).exists == false)
        #expect(await phone.pendingCount == 0)
        await phone.close()
    }
}

/// A value the resolver (any thread) sets and the test reads.
final class AbrovaSyncTestBox: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: AbrovaSync.Value?
    var value: AbrovaSync.Value? { lock.withLock { stored } }
    func set(_ value: AbrovaSync.Value?) { lock.withLock { stored = value } }
}
