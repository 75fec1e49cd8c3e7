import AbrovaCore
import AbrovaServer
import AbrovaSync
import AbrovaTestSupport
import Foundation
import Testing

/// Live updates end to end: real SDK instances with their own HTTP transport, the real server over
/// loopback (in process, and two `abrova serve` processes on one PostgreSQL database). Nobody
/// calls anything on the device that is told.
@Suite struct LiveSyncEndToEndTests {
    let folder = TemporaryFolder()
    static let rules = RuleBook(collections: ["board": PresetRules.anyAuthenticatedUser], fallback: PresetRules.ownerOnly)

    func device(_ url: URL, user: String, name: String) throws -> AbrovaSync {
        try appDevice(url, user: user, storePath: folder.path("\(name).sqlite"))
    }

    /// Whether `sync` has said it is live, from its connection state stream.
    static func becomesLive(_ sync: AbrovaSync) async -> Bool {
        let states = sync.connectionStateChanges
        let watcher = Task {
            for await state in states where state == .live { return true }
            return false
        }
        let timeout = Task {
            try? await Task.sleep(for: .seconds(30))
            watcher.cancel()
        }
        defer { timeout.cancel() }
        return await watcher.value
    }

    @Test func anotherDevicesWriteReachesAQueryListenerWithoutACallAndAStoppedListenerStopsTheWatch() async throws {
        let live = try LiveSyncServer(rules: Self.rules)
        let ana = try device(live.url, user: "ana", name: "ana")
        let ben = try device(live.url, user: "ben", name: "ben")
        let shown = ShownSnapshots()
        let registration = await ben.collection("board").addSnapshotListener { shown.record($0) }
        #expect(await eventually(30) { live.service.watchCount == 1 }, "Ben's device holds no watch")
        #expect(await Self.becomesLive(ben))

        let written = ContinuousClock.now
        try await ana.collection("board").document("b1").setData(["note": "milk"])
        #expect(await eventually(30) { shown.latest["b1"] == ["note": "milk"] }, "Ben's listener never showed Ana's write: \(shown.all)")
        print("live update: shown on the other device \(ContinuousClock.now - written) after the write")
        // Each snapshot shows something new: none repeats the one before.
        #expect(zip(shown.all, shown.all.dropFirst()).allSatisfy { $0.0 != $0.1 }, "\(shown.all)")

        registration.remove()
        // Well within the watch's idle time (25 s): the server saw the connection close.
        #expect(await eventually(10) { live.service.watchCount == 0 }, "the server still holds the watch")
        await ana.close()
        await ben.close()
        await live.stop()
    }

    @Test func aListenerOnACollectionTheUserMayNotReadNeverShowsAnything() async throws {
        let live = try LiveSyncServer(rules: Self.rules)
        let ana = try device(live.url, user: "ana", name: "ana")
        let ben = try device(live.url, user: "ben", name: "ben")
        let shown = ShownSnapshots()
        let registration = await ben.collection("diary").addSnapshotListener { shown.record($0) }
        #expect(await eventually(30) { live.service.watchCount == 1 })
        try await ana.collection("diary").document("d1").setData(["secret": "x"])
        try await ana.collection("board").document("b1").setData(["note": "y"])
        try await Task.sleep(for: .seconds(1))
        #expect(shown.all.allSatisfy { $0.isEmpty }, "\(shown.all)")
        registration.remove()
        await ana.close()
        await ben.close()
        await live.stop()
    }

    @Test func aWatchCutByTheNetworkRecoversByItself() async throws {
        let live = try LiveSyncServer(rules: Self.rules)
        let proxy = try FaultProxy(upstreamPort: UInt16(live.url.port ?? 0))
        let ana = try device(live.url, user: "ana", name: "ana")
        let ben = try device(try #require(URL(string: "http://127.0.0.1:\(proxy.port)")), user: "ben", name: "ben")
        let shown = ShownSnapshots()
        let registration = await ben.collection("board").addSnapshotListener { shown.record($0) }
        #expect(await eventually(30) { live.service.watchCount == 1 })
        proxy.fault = .reset
        proxy.resetConnections()
        try await Task.sleep(for: .milliseconds(300))
        proxy.fault = .none
        try await ana.collection("board").document("b2").setData(["note": "after the cut"])
        #expect(await eventually(30) { shown.latest["b2"] == ["note": "after the cut"] }, "\(shown.all)")
        registration.remove()
        await ana.close()
        await ben.close()
        await live.stop()
    }

    @Test(.enabled(if: PostgresTestDatabase.isAvailable, Comment(rawValue: PostgresTestDatabase.skipReason)))
    func aWriteThroughOneServerProcessReachesAListenerOnAnother() async throws {
        let database = try PostgresTestDatabase()
        let first = try await ServerProcess.start(databaseURL: database.url, name: "live-first", folder: folder)
        let second = try await ServerProcess.start(databaseURL: database.url, name: "live-second", folder: folder)
        let phone = try device(first.url, user: "ana", name: "phone")
        let laptop = try device(second.url, user: "ana", name: "laptop")
        let shown = ShownSnapshots()
        let registration = await laptop.collection("carts").addSnapshotListener { shown.record($0) }
        #expect(await Self.becomesLive(laptop), "the laptop holds no watch: \(second.log)")
        let written = ContinuousClock.now
        try await phone.collection("carts").document("c1").setData(["milk": 2])
        #expect(await eventually(30) { shown.latest["c1"] == ["milk": 2] }, "the laptop never showed the phone's write: \(shown.all)")
        print("live update across server processes: shown \(ContinuousClock.now - written) after the write")
        registration.remove()
        await phone.close()
        await laptop.close()
        await first.stop()
        await second.stop()
    }
}
