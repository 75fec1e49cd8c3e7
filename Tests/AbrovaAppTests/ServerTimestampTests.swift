import AbrovaSync
import Foundation
import Testing

/// `FieldValue.serverTimestamp()` as an app uses it, against `abrova serve`: the device shows its
/// own clock's time until the write is sent, then the server's time of applying it, the same on
/// every device.
@Suite(.timeLimit(.minutes(2))) struct ServerTimestampTests {
    @Test func anOfflineWriteShowsAnEstimateThenTheServersTime() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        let message = phone.collection("messages").document("m1")
        try await message.setData(["text": "hi"])
        await phone.syncNow()
        await phone.disconnect()

        let before = Date()
        let pending = try await message.updateData(["seenAt": .serverTimestamp(), "text": "hi!"])
        let estimate = try #require(pending.get("seenAt")?.dateValue)
        #expect(abs(estimate.timeIntervalSince(before)) < 5)
        #expect(pending.metadata.hasPendingWrites)

        // The write reaches the server a second and more later: its time, not the estimate, stays.
        try await Task.sleep(for: .milliseconds(1_200))
        await phone.reconnect()
        await phone.syncNow()
        let confirmed = try await message.getDocument(source: .cache)
        let stamped = try #require(confirmed.get("seenAt")?.dateValue)
        #expect(stamped.timeIntervalSince(estimate) >= 1)
        #expect(!confirmed.metadata.hasPendingWrites)
        #expect(confirmed.get("text")?.stringValue == "hi!")

        let tablet = try server.device("tablet")
        let seen = try await tablet.collection("messages").document("m1").getDocument(source: .server)
        #expect(seen.get("seenAt")?.dateValue == stamped)
        await phone.close()
        await tablet.close()
    }

    @Test func setDataTakesServerTimestampsAndRefusesUpdateOnlySentinels() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        let name = "ana"
        let created = try await phone.collection("messages").document("m1").setData(["by": name, "at": .serverTimestamp()])
        #expect(created.get("at")?.dateValue != nil && created.get("by")?.stringValue == "ana")
        let merged = try await phone.collection("messages").document("m1").setData(["editedAt": .serverTimestamp()], merge: true)
        #expect(merged.get("by")?.stringValue == "ana" && merged.get("editedAt")?.dateValue != nil)
        await phone.syncNow()
        let onServer = try await phone.collection("messages").document("m1").getDocument(source: .server)
        #expect(onServer.get("at")?.dateValue != nil && onServer.get("editedAt")?.dateValue != nil)

        let other = phone.collection("messages").document("m2")
        for sentinel: AbrovaSync.FieldValue in [.delete(), .arrayUnion(["x"]), .arrayRemove(["x"])] {
            await #expect(throws: AbrovaSyncError.self) { try await other.setData(["tags": sentinel, "by": name]) }
        }
        #expect(try await other.getDocument(source: .cache).exists == false)
        await phone.close()
    }
}
