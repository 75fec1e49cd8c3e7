/// The sync engine's decisions, apart from its I/O: given what happened, the states the app sees
/// and what the engine does next. A value type, so tests drive it event by event without a
/// network; `SyncRunner` feeds it and carries out its actions.
struct SyncDecisions: Equatable {
    /// What happened.
    enum Event: Equatable {
        /// A run began working.
        case runStarted
        /// A run ended so.
        case runEnded(SyncRunner.RunOutcome)
        /// A run's request reached the server.
        case runReachedServer
        /// A request outside a run (an online read) reached the server.
        case requestGotThrough
        /// A request outside a run could not reach the server (an online read).
        case requestUnreachable
        /// The probe found the server answering again.
        case probeFoundServer
        /// The app called `disconnect()`.
        case disconnect
        /// The app called `reconnect()`.
        case reconnect
        /// The app gave a new token.
        case tokenReplaced
        /// The device's network came up (a path monitor saw it; Apple platforms only).
        case networkAvailable
        /// The device's network went away (a path monitor saw it; Apple platforms only).
        case networkLost
        /// The app came to the foreground.
        case foreground
        /// The SDK is closing.
        case close
    }

    /// What the engine does next.
    enum Action: Equatable {
        /// Run sync (single-flight: it joins or follows a run in progress).
        case sync
        /// Probe the server with backoff until it answers.
        case startProbing
        /// Stop probing.
        case stopProbing
        /// Start the backoff from its first delay (the server answered a whole run).
        case resetBackoff
        /// Probe the server at once, then with backoff from its first delay (the network just
        /// came up: a probe sleeping through a long backoff would come back late).
        case probeNow
        /// Run sync again after the next backoff delay (the run failed on something the server
        /// or the device may get over: a refusal of the whole request, a failing store).
        case retryLater
    }

    /// Send queued writes when the server comes back.
    let syncOnReconnect: Bool
    private(set) var syncState = SyncState.idle
    private(set) var connection = ConnectionState.connecting
    /// The app went offline on purpose (or the SDK closed): no runs until `reconnect`.
    private(set) var isDisconnectedByApp = false
    /// The last request could not reach the server; a probe watches for it.
    private(set) var isUnreachable = false

    init(syncOnReconnect: Bool) {
        self.syncOnReconnect = syncOnReconnect
    }

    /// Whether requests should go to the server now (else writes queue and reads use the device).
    var isOnline: Bool { !isDisconnectedByApp && !isUnreachable }

    /// Whether a run may start.
    var mayRun: Bool { !isDisconnectedByApp }

    mutating func handle(_ event: Event) -> [Action] {
        switch event {
        case .runStarted:
            syncState = .syncing
            return []
        case .runEnded(.completed):
            isUnreachable = false
            connection = .connected
            syncState = .idle
            return [.resetBackoff]
        case .runEnded(.unreachable):
            return wentUnreachable()
        case .runEnded(.unauthorized):
            connection = .error
            syncState = .error
            return []
        case .runEnded(.failed):
            syncState = .error
            return isDisconnectedByApp ? [] : [.retryLater]
        case .runEnded(.anotherUser):
            return [] // the engine stops: the instance moves to the token user's store
        case .runReachedServer:
            let wasUnreachable = isUnreachable
            isUnreachable = false
            if connection != .error { connection = .connected }
            return wasUnreachable ? [.stopProbing] : []
        case .requestGotThrough:
            if isUnreachable {
                isUnreachable = false
                connection = .connected
                return cameBack()
            }
            if connection != .error { connection = .connected }
            return []
        case .requestUnreachable:
            guard !isUnreachable, !isDisconnectedByApp else { return [] }
            return wentUnreachable()
        case .probeFoundServer:
            guard isUnreachable, !isDisconnectedByApp else { return [] }
            isUnreachable = false
            connection = .connected
            return cameBack()
        case .disconnect, .close:
            isDisconnectedByApp = true
            connection = .disconnected
            syncState = .offline
            return [.stopProbing]
        case .reconnect:
            guard isDisconnectedByApp else { return [] }
            isDisconnectedByApp = false
            isUnreachable = false
            connection = .connecting
            if syncOnReconnect { return [.sync] }
            syncState = .idle
            return []
        case .tokenReplaced:
            if connection == .error { connection = .connecting }
            return isDisconnectedByApp ? [] : [.sync]
        case .networkAvailable:
            guard isUnreachable, !isDisconnectedByApp else { return [] }
            return [.probeNow]
        case .networkLost:
            // Without a network every request would fail after its timeout; go offline now.
            guard !isUnreachable, !isDisconnectedByApp else { return [] }
            return wentUnreachable()
        case .foreground:
            // Like a start: send what was queued and pull what changed while in the background
            // (a run that cannot reach the server leaves the probe to it).
            return isDisconnectedByApp ? [] : [.sync]
        }
    }

    /// The server could not be reached: writes queue, and a probe watches for it to come back.
    private mutating func wentUnreachable() -> [Action] {
        if isDisconnectedByApp {
            syncState = .offline
            return []
        }
        isUnreachable = true
        connection = .disconnected
        syncState = .offline
        return [.startProbing]
    }

    /// The server is back: send the queue when the app wants that, else just say so.
    private mutating func cameBack() -> [Action] {
        if syncOnReconnect { return [.sync] }
        if syncState != .error { syncState = .idle }
        return []
    }
}
