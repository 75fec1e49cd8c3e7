/// The live-update watch's decisions, apart from its I/O: whether the SDK holds a watch
/// (`GET /v1/watch`) and what it does with each answer. A value type, so tests drive it event by
/// event without a network; `SyncRunner` feeds it and carries out its actions.
///
/// A watch is wanted while live updates are on, at least one document or query listener is
/// there, the app is in the foreground and the engine may talk to the server (not disconnected,
/// not unreachable, not refused its token, not replacing it). A watch starts only between runs,
/// so it goes out from the cursor the last run saved; one already out stays through a run.
struct WatchDecisions: Equatable {
    /// Where the watch is.
    enum Phase: Equatable {
        /// No watch: none is wanted now, or a run is going and one will start when it ends.
        case idle
        /// Watch number `number` is out, waiting for the server's news.
        case watching(number: Int)
        /// The server said something changed (or that the cursor needs a resync): a run pulls,
        /// then a watch goes out from the cursor it saved.
        case pulling
        /// The last watch failed: another goes out after the backoff delay of attempt `attempt`.
        case backingOff(attempt: Int)
        /// The server has no watch route (404): not asked again by this engine.
        case noRoute
        /// The server refused the token: no watch until a new one.
        case unauthorized
        /// The SDK closed.
        case closed
    }

    /// What a watch came back with.
    enum Outcome: Equatable {
        case changed
        case unchanged
        case failed(TransportFailure)
    }

    /// What happened.
    enum Event: Equatable {
        /// The number of document and query listeners is now this.
        case listenersChanged(Int)
        /// The app came to the foreground.
        case foreground
        /// The app went to the background.
        case background
        /// Whether the engine may talk to the server now (it changed).
        case serverAvailable(Bool)
        /// A run started working.
        case runStarted
        /// The run ended (no run is going).
        case runEnded
        /// Watch number `number` came back so.
        case answered(number: Int, Outcome)
        /// The run a `.pull` asked for ended: `advanced` when it completed and moved the cursor
        /// past the one the watch was sent with.
        case pullEnded(advanced: Bool)
        /// The backoff delay of attempt `attempt` passed.
        case backoffEnded(attempt: Int)
        /// The app gave a new token.
        case tokenReplaced
        /// The SDK is closing.
        case close
    }

    /// What the engine does next.
    enum Action: Equatable {
        /// Send watch number `number` from the store's cursor.
        case watch(number: Int)
        /// Cancel the watch out (which closes its request); its answer is ignored.
        case cancelWatch
        /// Run sync (single-flight: a burst of wakes while a run is going gets one follow-up run),
        /// then tell `.pullEnded`.
        case pull
        /// Wait the retry policy's delay for attempt `attempt`, then tell `.backoffEnded`.
        case backOff(attempt: Int)
        /// Stop waiting (no watch is wanted any more).
        case cancelBackoff
    }

    /// Live updates are on (`AbrovaSyncConfigBuilder.liveUpdates(_:)`).
    let isEnabled: Bool
    private(set) var phase = Phase.idle
    private(set) var listeners = 0
    /// The SDK takes the app to be in the foreground until told otherwise.
    private(set) var isInForeground = true
    private(set) var isServerAvailable = true
    private(set) var isRunning = false
    /// Failures since a watch was last answered: the backoff's attempt.
    private(set) var failures = 0
    private var watchesSent = 0

    init(isEnabled: Bool) {
        self.isEnabled = isEnabled
    }

    /// Whether a watch is wanted now.
    var isWanted: Bool { isEnabled && listeners > 0 && isInForeground && isServerAvailable }

    /// Whether a watch is out: the device hears of the server's changes as they happen.
    var isLive: Bool {
        if case .watching = phase { return true }
        return false
    }

    /// The connection state the app sees: `live` while connected with a watch out.
    func shown(_ connection: ConnectionState) -> ConnectionState {
        connection == .connected && isLive ? .live : connection
    }

    mutating func handle(_ event: Event) -> [Action] {
        switch event {
        case .listenersChanged(let count):
            listeners = count
            return reconsider()
        case .foreground:
            isInForeground = true
            return reconsider()
        case .background:
            isInForeground = false
            return reconsider()
        case .serverAvailable(let available):
            let cameBack = available && !isServerAvailable
            isServerAvailable = available
            // A watch waiting out a long backoff goes now that the server is back.
            if cameBack, isWanted, case .backingOff = phase { return [.cancelBackoff] + startWatch() }
            return reconsider()
        case .runStarted:
            isRunning = true
            return []
        case .runEnded:
            isRunning = false
            return reconsider()
        case .answered(let number, let outcome):
            guard phase == .watching(number: number) else { return [] } // cancelled: its answer is stale
            return answered(outcome)
        case .pullEnded(let advanced):
            guard phase == .pulling else { return [] }
            guard isWanted else {
                phase = .idle
                return []
            }
            // A run that failed, or left the cursor where the watch was (the server would answer
            // the next watch at once), waits before the next watch: no loop of requests.
            return advanced ? startWatch() : backOff()
        case .backoffEnded(let attempt):
            guard phase == .backingOff(attempt: attempt) else { return [] }
            return isWanted ? startWatch() : goIdle()
        case .tokenReplaced:
            switch phase {
            case .unauthorized:
                phase = .idle
                return reconsider()
            case .watching:
                // The watch out carries the old token: one under the new token replaces it.
                return [.cancelWatch] + startWatch()
            default:
                return []
            }
        case .close:
            let actions: [Action] =
                switch phase {
                case .watching: [.cancelWatch]
                case .backingOff: [.cancelBackoff]
                default: []
                }
            phase = .closed
            return actions
        }
    }

    /// What each answer does: news is pulled, quiet is watched again, a server without the route
    /// is not asked again, a stale cursor is resynced by a run, a refused token waits for a new
    /// one, and anything else (unreachable, 429, 5xx) backs off as the probe does.
    private mutating func answered(_ outcome: Outcome) -> [Action] {
        switch outcome {
        case .changed:
            failures = 0
            phase = .pulling
            return [.pull]
        case .unchanged:
            failures = 0
            return isWanted ? startWatch() : goIdle()
        case .failed(.refused(reason: .notFound, _)):
            phase = .noRoute
            return []
        case .failed(.refused(reason: .invalid, _)), .failed(.refused(reason: .resyncRequired, _)):
            phase = .pulling // the run's pull is refused alike, and resyncs
            return [.pull]
        case .failed(.unauthorized):
            phase = .unauthorized
            return []
        case .failed:
            return isWanted ? backOff() : goIdle()
        }
    }

    /// Starts or stops the watch as the conditions now say.
    private mutating func reconsider() -> [Action] {
        switch phase {
        case .idle where isWanted: startWatch()
        case .watching where !isWanted:
            goIdle() + [.cancelWatch]
        case .backingOff where !isWanted:
            goIdle() + [.cancelBackoff]
        default: []
        }
    }

    private mutating func startWatch() -> [Action] {
        guard !isRunning else { return goIdle() } // from the cursor the run will save, when it ends
        watchesSent += 1
        phase = .watching(number: watchesSent)
        return [.watch(number: watchesSent)]
    }

    private mutating func backOff() -> [Action] {
        failures += 1
        phase = .backingOff(attempt: failures)
        return [.backOff(attempt: failures)]
    }

    private mutating func goIdle() -> [Action] {
        phase = .idle
        return []
    }
}
