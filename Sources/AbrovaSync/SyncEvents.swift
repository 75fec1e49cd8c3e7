import AbrovaLocking
import Foundation

/// The one place the SDK tells the app anything. The engine and the instance emit each event once
/// (`emit(_:)`); the hub hands it to the streams subscribed, then the one-callback setters, then
/// the live `SyncListener`s (the observable status and Combine follow a stream). The adapters,
/// which say what each of them hears, are in `SyncEventAdapters.swift`.
///
/// The instance keeps one hub when it switches users (a new engine on another store), so a screen
/// subscribed once goes on hearing. Streams are fed in the emitter's context; callbacks and
/// listeners are called on the main actor, in the order of the events (`MainActorDeliveries`),
/// and `delivered()` waits for them.
final class SyncEvents: Sendable {
    private struct Subscriber: Sendable {
        let yield: @Sendable (SyncEvent) -> Void
        let finish: @Sendable () -> Void
    }

    /// Who hears one event, taken under the lock and called outside it.
    private struct Audience: Sendable {
        let subscribers: [Subscriber]
        let callbacks: SyncCallbacks
        let listeners: [any SyncEngine.SyncListener]
    }

    private struct State {
        var latest = LatestStates()
        var subscribers: [UUID: Subscriber] = [:]
        var callbacks = SyncCallbacks()
        /// Held weakly: a listener the app dropped is forgotten.
        var listeners: [ObjectIdentifier: WeakListener] = [:]
    }

    private let state = Protected(State())
    private let mainActor = MainActorDeliveries()

    /// The latest sync state.
    var syncState: SyncState { state.withLock { $0.latest.syncState } }
    /// The latest connection state.
    var connectionState: ConnectionState { state.withLock { $0.latest.connectionState } }

    /// Tells everyone of `event`, unless it is a state that did not change.
    func emit(_ event: SyncEvent) {
        let audience = state.withLock { state -> Audience? in
            guard state.latest.record(event) else { return nil }
            state.listeners = state.listeners.filter { $0.value.value != nil }
            return Audience(
                subscribers: Array(state.subscribers.values), callbacks: state.callbacks,
                listeners: state.listeners.values.compactMap(\.value))
        }
        guard let audience else { return }
        for subscriber in audience.subscribers { subscriber.yield(event) }
        guard audience.callbacks.hears(event) || !audience.listeners.isEmpty else { return }
        mainActor.enqueue {
            audience.callbacks.call(with: event)
            for listener in audience.listeners { listener.hear(event) }
        }
    }

    /// Returns once the callbacks and listeners have heard every event emitted before the call.
    func delivered() async { await mainActor.drained() }

    /// A stream of what `select` takes from the latest states (so a state's stream begins with its
    /// value now) and then from every event emitted; it ends with `finish()` or when its consumer
    /// stops. Any number may subscribe.
    func stream<Element: Sendable>(_ select: @escaping @Sendable (SyncEvent) -> Element?) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self)
        let id = UUID()
        let subscriber = Subscriber(
            yield: { event in if let element = select(event) { continuation.yield(element) } },
            finish: { continuation.finish() })
        // Replayed under the lock, so that no newer event overtakes the state it replaces.
        state.withLock { state in
            state.subscribers[id] = subscriber
            for event in state.latest.asEvents { subscriber.yield(event) }
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    /// Changes the one-callback setters' callbacks.
    func updateCallbacks(_ change: (inout SyncCallbacks) -> Void) {
        state.withLock { change(&$0.callbacks) }
    }

    /// Adds a listener, held weakly.
    func addListener(_ listener: any SyncEngine.SyncListener) {
        state.withLock { $0.listeners[ObjectIdentifier(listener)] = WeakListener(value: listener) }
    }

    func removeListener(_ listener: any SyncEngine.SyncListener) {
        _ = state.withLock { $0.listeners.removeValue(forKey: ObjectIdentifier(listener)) }
    }

    /// Ends every stream (the instance closed).
    func finish() {
        let subscribers = state.withLock { state in
            defer { state.subscribers = [:] }
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers { subscriber.finish() }
        mainActor.finish()
    }
}

/// The latest of each state: what a new stream starts with, and what tells a state that changed
/// from one told again.
private struct LatestStates {
    var syncState = SyncState.idle
    var connectionState = ConnectionState.connecting
    var pendingCount: Int?
    var progress: SyncProgress?

    /// Records `event`; returns whether it is news. A sync or connection state equal to the latest
    /// is not. Counts and progress always are: the store tells every change of its queue, and a
    /// run every batch and page, even when the figure stays.
    mutating func record(_ event: SyncEvent) -> Bool {
        switch event {
        case .syncState(let state):
            defer { syncState = state }
            return state != syncState
        case .connectionState(let state):
            defer { connectionState = state }
            return state != connectionState
        case .pendingCount(let count):
            pendingCount = count
        case .progress(let step):
            progress = step
        case .syncStarted, .syncCompleted, .syncFailed, .documentSynced, .documentRejected, .conflictDetected:
            break
        }
        return true
    }

    /// The states, as the events that told them.
    var asEvents: [SyncEvent] {
        var events: [SyncEvent] = [.syncState(syncState), .connectionState(connectionState)]
        if let pendingCount { events.append(.pendingCount(pendingCount)) }
        if let progress { events.append(.progress(progress)) }
        return events
    }
}

/// A listener held weakly.
private struct WeakListener: Sendable {
    weak var value: (any SyncEngine.SyncListener)?
}
