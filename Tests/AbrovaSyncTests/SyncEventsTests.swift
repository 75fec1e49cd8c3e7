import Testing

@testable import AbrovaSync

/// The event hub and its adapters, without a server: what one emitted event reaches.
@Suite struct SyncEventsTests {
    static let rejection = DocumentRejection(
        documentId: "bad", collection: "carts", operation: .create,
        error: AbrovaSyncError(.refused, reason: .forbidden, message: "the rules refused it"))

    @MainActor @Test func oneRejectionReachesTheStreamTheCallbackTheListenerAndTheStatusOnceEach() async {
        let events = SyncEvents()
        let rejections = events.stream { if case .documentRejected(let rejection) = $0 { rejection } else { nil } }
        let called = Locked<[String]>([])
        events.updateCallbacks { $0.onDocumentRejected = { documentId, _, _ in called.update { $0.append(documentId) } } }
        let heard = Locked<[String]>([])
        let listener = LoggingListener(heard)
        events.addListener(listener)
        let status = SyncStatus(following: events)

        events.emit(.documentRejected(Self.rejection))
        events.finish()
        await events.delivered()

        #expect(await collect(rejections) == [Self.rejection])
        #expect(called.value == ["bad"])
        #expect(heard.value == ["rejected bad create 403"])
        #expect(await eventually { @MainActor in status.lastRejection == Self.rejection })
        withExtendedLifetime(listener) {}
    }

    @Test func aListenerTheAppDroppedOrRemovedIsNotCalled() async {
        let events = SyncEvents()
        let heard = Locked<[String]>([])
        var dropped: LoggingListener? = LoggingListener(heard, name: "dropped")
        weak let droppedWeakly = dropped
        let removed = LoggingListener(heard, name: "removed")
        let kept = LoggingListener(heard, name: "kept")
        for listener in [dropped!, removed, kept] { events.addListener(listener) }
        events.removeListener(removed)
        dropped = nil

        events.emit(.syncStarted)
        await events.delivered()

        #expect(droppedWeakly == nil, "the hub holds listeners weakly")
        #expect(heard.value == ["kept: started"])
        withExtendedLifetime((removed, kept)) {}
    }

    @Test func aStateThatDidNotChangeIsNotToldAgainWhileEveryCountIs() async {
        let events = SyncEvents()
        let states = events.stream { if case .syncState(let state) = $0 { state } else { nil } }
        let counts = events.stream { if case .pendingCount(let count) = $0 { count } else { nil } }
        let called = Locked<[SyncState]>([])
        events.updateCallbacks { $0.onSyncState = { state in called.update { $0.append(state) } } }

        for state in [SyncState.syncing, .syncing, .idle, .idle] { events.emit(.syncState(state)) }
        for count in [1, 1] { events.emit(.pendingCount(count)) }
        events.finish()
        await events.delivered()

        #expect(await collect(states) == [.idle, .syncing, .idle], "the first is the latest state, replayed")
        #expect(called.value == [.syncing, .idle])
        #expect(await collect(counts) == [1, 1])
    }

    @Test func aNewStreamStartsWithTheLatestStatesButWithNoEarlierEvent() async {
        let events = SyncEvents()
        let step = SyncProgress(pushedChanges: 2, pulledDocuments: 5, isPulling: true)
        events.emit(.syncState(.offline))
        events.emit(.connectionState(.disconnected))
        events.emit(.pendingCount(2))
        events.emit(.progress(step))
        events.emit(.documentRejected(Self.rejection))

        let states = events.stream { if case .syncState(let state) = $0 { state } else { nil } }
        let connections = events.stream { if case .connectionState(let state) = $0 { state } else { nil } }
        let counts = events.stream { if case .pendingCount(let count) = $0 { count } else { nil } }
        let steps = events.stream { if case .progress(let step) = $0 { step } else { nil } }
        let rejections = events.stream { if case .documentRejected(let rejection) = $0 { rejection } else { nil } }
        events.finish()

        #expect(await collect(states) == [.offline])
        #expect(await collect(connections) == [.disconnected])
        #expect(await collect(counts) == [2])
        #expect(await collect(steps) == [step])
        #expect(await collect(rejections).isEmpty)
        #expect(events.syncState == .offline)
    }

    @Test func eachEventReachesTheListenerMethodThatHearsItInOrder() async {
        let events = SyncEvents()
        let heard = Locked<[String]>([])
        let listener = LoggingListener(heard)
        events.addListener(listener)
        let conflict = ConflictInfo(documentId: "c1", collection: "carts", local: nil, server: nil, conflicts: [])

        events.emit(.syncStarted)
        events.emit(.syncState(.syncing))
        events.emit(.pendingCount(0))
        events.emit(.documentSynced(documentId: "c1", operation: .update))
        events.emit(.conflictDetected(conflict))
        events.emit(.documentRejected(Self.rejection))
        events.emit(.syncFailed(AbrovaSyncError(.unauthorized, reason: .unauthenticated, message: "expired")))
        events.emit(.syncCompleted(syncedCount: 1))
        await events.delivered()

        #expect(heard.value == ["started", "synced c1 update", "conflict c1", "rejected bad create 403", "failed 401", "completed 1"])
        withExtendedLifetime(listener) {}
    }

    @Test func aSecondCallbackReplacesTheFirst() async {
        let events = SyncEvents()
        let called = Locked<[String]>([])
        events.updateCallbacks { $0.onPendingCount = { count in called.update { $0.append("first \(count)") } } }
        events.updateCallbacks { $0.onPendingCount = { count in called.update { $0.append("second \(count)") } } }

        events.emit(.pendingCount(4))
        await events.delivered()

        #expect(called.value == ["second 4"])
    }

    @MainActor @Test func theStatusShowsEveryState() async {
        let events = SyncEvents()
        let status = SyncStatus(following: events)
        let step = SyncProgress(pushedChanges: 1, pulledDocuments: 0, isPulling: false)

        events.emit(.syncState(.syncing))
        events.emit(.connectionState(.connected))
        events.emit(.pendingCount(3))
        events.emit(.progress(step))

        #expect(
            await eventually(60) { @MainActor in
                status.syncState == .syncing && status.connectionState == .connected && status.pendingCount == 3 && status.progress == step
            })
    }
}

/// Everything a stream sent until it ended.
private func collect<Element>(_ stream: AsyncStream<Element>) async -> [Element] {
    var elements: [Element] = []
    for await element in stream { elements.append(element) }
    return elements
}

/// A listener that logs each call, prefixed by its name when it has one.
private final class LoggingListener: SyncEngine.SyncListener {
    let log: Locked<[String]>
    let name: String?

    init(_ log: Locked<[String]>, name: String? = nil) {
        self.log = log
        self.name = name
    }

    private func note(_ line: String) {
        MainActor.assertIsolated("listeners are called on the main actor")
        log.update { $0.append(name.map { "\($0): \(line)" } ?? line) }
    }

    func onSyncStarted() { note("started") }
    func onSyncCompleted(syncedCount: Int) { note("completed \(syncedCount)") }
    func onSyncFailed(error: Error) { note("failed \((error as? AbrovaSyncError)?.statusCode ?? 0)") }
    func onConflictDetected(conflict: ConflictInfo) { note("conflict \(conflict.documentId)") }
    func onDocumentSynced(documentId: String, operation: OperationType) { note("synced \(documentId) \(operation)") }
    func onDocumentRejected(documentId: String, operation: OperationType, error: Error) {
        note("rejected \(documentId) \(operation) \((error as? AbrovaSyncError)?.statusCode ?? 0)")
    }
}
