import AbrovaLocking

/// Runs work on the main actor, one item at a time, in the order it was given: how the one-callback
/// setters and the `SyncListener`s hear events, as Firestore's callbacks come on the main queue.
///
/// `drained()` waits until everything given before it has run, so that a caller awaiting a sync run
/// finds its events heard when the run returns. Nothing is queued (and nothing waits) when no
/// callback or listener is set.
final class MainActorDeliveries: Sendable {
    private enum Item: Sendable {
        case work(@MainActor @Sendable () -> Void)
        case barrier(CheckedContinuation<Void, Never>)
    }

    private let queue: AsyncStream<Item>.Continuation
    private let progress = Progress()

    init() {
        let (stream, queue) = AsyncStream.makeStream(of: Item.self)
        self.queue = queue
        Task { @MainActor [progress] in
            for await item in stream {
                switch item {
                case .work(let work):
                    work()
                    progress.state.withLock { $0.waiting -= 1 }
                case .barrier(let continuation):
                    continuation.resume()
                }
            }
            // After `finish()`, what was queued has run: callers that came too late for the queue wake.
            let late = progress.state.withLock { state in
                state.isDone = true
                defer { state.lateCallers = [] }
                return state.lateCallers
            }
            for caller in late { caller.resume() }
        }
    }

    /// Runs `work` on the main actor after everything given before it.
    func enqueue(_ work: @escaping @MainActor @Sendable () -> Void) {
        progress.state.withLock { $0.waiting += 1 }
        if case .terminated = queue.yield(.work(work)) { progress.state.withLock { $0.waiting -= 1 } }
    }

    /// Returns once everything given before the call has run (at once when nothing waits).
    func drained() async {
        guard progress.state.withLock({ $0.waiting > 0 }) else { return }
        await withCheckedContinuation { continuation in
            guard case .terminated = queue.yield(.barrier(continuation)) else { return }
            let isDone = progress.state.withLock { state in
                if !state.isDone { state.lateCallers.append(continuation) }
                return state.isDone
            }
            if isDone { continuation.resume() }
        }
    }

    /// Runs what is queued, then stops.
    func finish() { queue.finish() }
}

/// What the task that runs the queue shares with its callers.
private final class Progress: Sendable {
    struct State {
        /// Work items given and not yet run.
        var waiting = 0
        /// Whether the queue has ended and everything in it has run.
        var isDone = false
        /// Callers of `drained()` after `finish()`, woken when the queue has run out.
        var lateCallers: [CheckedContinuation<Void, Never>] = []
    }

    let state = Protected(State())
}
