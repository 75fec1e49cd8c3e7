import AbrovaLocking
import Foundation

/// Sends each value to every subscriber's `AsyncStream`; any number may subscribe, and ending one
/// affects no other. A new subscriber first gets the latest value (the instance's current session).
final class Broadcaster<Element: Sendable>: Sendable {
    private struct State {
        var subscribers: [UUID: AsyncStream<Element>.Continuation] = [:]
        var latest: Element?
    }

    private let state: Protected<State>

    init(initial: Element? = nil) {
        state = Protected(State(latest: initial))
    }

    /// A stream of the latest value (when there is one) and every value sent from now on.
    func subscribe() -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self)
        let id = UUID()
        let latest = state.withLock { state in
            state.subscribers[id] = continuation
            return state.latest
        }
        if let latest { continuation.yield(latest) }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    /// Sends `element` to every subscriber.
    func send(_ element: Element) {
        let subscribers = state.withLock { state in
            state.latest = element
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers { subscriber.yield(element) }
    }

    /// Ends every stream.
    func finish() {
        let subscribers = state.withLock { state in
            defer { state.subscribers = [:] }
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers { subscriber.finish() }
    }
}

/// A `Sendable` value behind a lock, read and set as a property.
final class Guarded<Value: Sendable>: Sendable {
    private let mutex: Protected<Value>

    init(_ value: Value) { mutex = Protected(value) }

    var value: Value {
        get { mutex.withLock { $0 } }
        set { mutex.withLock { $0 = newValue } }
    }

    /// Changes the value in place, under the lock.
    func update<Result>(_ body: (inout Value) -> Result) -> Result {
        mutex.withLock { body(&$0) }
    }
}
