import AbrovaServer
import AbrovaTestSupport
import Testing

@testable import AbrovaSync

/// The instance's setters against a real server: each reaches the event hub, and each event is
/// heard once per channel.
@Suite struct InstanceEventTests {
    let folder = TemporaryFolder()

    @Test func aQueuedWriteRefusedWhenSentReachesTheStreamTheCallbackAndTheListenerOnceEach() async throws {
        let live = try LiveSyncServer(rules: RuleBook(collections: ["carts": SwitchableRules()]))
        let device = try Device(live, folder: folder)
        await device.sync.syncNow()
        await device.sync.disconnect()
        try await device.carts.document("bad").setData(["invalid": true]) // the validation rules refuse it
        let streamed = Locked<[String]>([])
        let stream = device.sync.documentRejections
        let collector = Task {
            for await rejection in stream {
                streamed.update { $0.append("\(rejection.documentId) \(rejection.operation) \(rejection.error.statusCode ?? 0)") }
            }
        }
        let called = Locked<[String]>([])
        device.sync.onDocumentRejected { documentId, operation, error in
            called.update { $0.append("\(documentId) \(operation) \(error.statusCode ?? 0)") }
        }
        let listener = RecordingListener()
        device.sync.addSyncListener(listener)

        await device.sync.reconnect()
        #expect(await eventually { streamed.value == ["bad create 400"] && called.value == ["bad create 400"] })
        #expect(listener.rejected.value == ["bad create 400"])
        await device.sync.syncNow() // nothing is left to refuse, and nothing is told again
        #expect(streamed.value.count == 1 && called.value.count == 1 && listener.rejected.value.count == 1)
        collector.cancel()
        await live.stop()
    }

    @Test func theStateAndCountCallbacksHearEveryChangeAndARemovedListenerNothing() async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder)
        await device.sync.syncNow()
        let states = Locked<[SyncState]>([])
        device.sync.onSyncState { state in states.update { $0.append(state) } }
        let counts = Locked<[Int]>([])
        device.sync.onPendingCount { count in counts.update { $0.append(count) } }
        let removed = RecordingListener()
        device.sync.addSyncListener(removed)
        device.sync.removeSyncListener(removed)

        await device.sync.disconnect()
        try await device.carts.document("c1").setData(["n": 1])
        // Heard while it stands (a count that stands for less than 10 ms may be skipped).
        #expect(await eventually { counts.value.last == 1 }, "\(counts.value)")
        await device.sync.reconnect()
        #expect(await eventually { states.value.last == .idle && counts.value.last == 0 })
        #expect(states.value.first == .offline && states.value.contains(.syncing), "\(states.value)")
        #expect(removed.completed.value.isEmpty)
        await live.stop()
    }
}
