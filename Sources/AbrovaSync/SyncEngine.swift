import AbrovaCore
import AbrovaStore
import AbrovaWire
import Foundation

extension AbrovaSync {
    /// Whether the device is in sync: the seed's four states.
    public enum SyncState: String, Hashable, Sendable {
        /// Nothing to send, or everything sent.
        case idle
        /// A sync is running.
        case syncing
        /// The server cannot be reached, or the app called `disconnect()`: writes are queued.
        case offline
        /// Sync stopped on an error that waiting will not fix (a refused token, a failing store);
        /// `AbrovaSync.lastError` says which.
        case error
    }
}

/// `AbrovaSync.SyncState`, by its short name.
public typealias SyncState = AbrovaSync.SyncState

extension AbrovaSync {
    /// The connection to the server, as the SDK last saw it.
    public enum ConnectionState: String, Hashable, Sendable {
        /// Not known yet, or being probed.
        case connecting
        /// The server answered.
        case connected
        /// The server answered, and the SDK holds a watch: another device's change shows here as
        /// it happens (live updates, while a document or query listener is there).
        case live
        /// The server cannot be reached, or the app disconnected.
        case disconnected
        /// The server refused the credentials.
        case error
    }
}

/// `AbrovaSync.ConnectionState`, by its short name.
public typealias ConnectionState = AbrovaSync.ConnectionState

extension AbrovaSync {
    /// How far a sync run has come: the changes it sent and the documents it pulled so far.
    public struct SyncProgress: Hashable, Sendable {
        /// Changes sent and answered in this run.
        public var pushedChanges = 0
        /// Documents pulled in this run.
        public var pulledDocuments = 0
        /// Whether the server has more pages to pull.
        public var isPulling = false
    }
}

/// `AbrovaSync.SyncProgress`, by its short name.
public typealias SyncProgress = AbrovaSync.SyncProgress

extension AbrovaSync {
    /// A queued write the server refused when it was finally sent: it was dropped and its document
    /// rolled back to the server's version.
    public struct DocumentRejection: Hashable, Sendable {
        /// The document's id.
        public let documentId: String
        /// Its collection.
        public let collection: String
        /// What the write did.
        public let operation: OperationType
        /// The server's refusal (its `reason` is `forbidden` when the rules refused).
        public let error: AbrovaSyncError
    }
}

/// `AbrovaSync.DocumentRejection`, by its short name.
public typealias DocumentRejection = AbrovaSync.DocumentRejection

extension AbrovaSync {
    /// The seed's name for the listener protocol, `SyncEngine.SyncListener`: what apps see of the
    /// engine, which is the SDK's own (`SyncRunner`).
    public enum SyncEngine {
        /// Hears of sync events, on the main actor (a `@MainActor` class may be one and set its
        /// properties in its methods); every method has a default that does nothing, so an app
        /// implements only what it needs. Listeners are held weakly: keep a reference.
        public protocol SyncListener: AnyObject, Sendable {
            @MainActor func onSyncStarted()
            @MainActor func onSyncCompleted(syncedCount: Int)
            @MainActor func onSyncFailed(error: Error)
            @MainActor func onConflictDetected(conflict: ConflictInfo)
            @MainActor func onDocumentSynced(documentId: String, operation: OperationType)
            @MainActor func onDocumentRejected(documentId: String, operation: OperationType, error: Error)
        }
    }
}

/// `AbrovaSync.SyncEngine`, by its short name.
public typealias SyncEngine = AbrovaSync.SyncEngine

/// Runs sync for one device store: pushes queued writes in batches (before pulling), pulls
/// pages, settles answers, tells listeners, and retries with backoff while the server cannot be
/// reached. Runs are single-flight: triggers that come while one is starting share it.
actor SyncRunner {

    /// How a run ended.
    enum RunOutcome: Equatable {
        case completed
        case unreachable
        case unauthorized
        case failed
        /// The token is another user's than the store's: nothing was sent, and the instance moves
        /// to that user's store.
        case anotherUser
    }

    /// A batch a run sent and what became of it.
    struct SettledBatch {
        let sequence: Int64
        let keys: Set<DocumentKey>
        /// The refusal of each document's last change in the batch (its newest write), if refused.
        let newestRejections: [DocumentKey: (reason: Refusal.Reason, message: String)]
        /// Documents whose refused change of several writes went back to the queue, write by write.
        let resent: Set<DocumentKey>
        /// The conflicts the server settled (or left to the resolver), by document.
        let conflicts: [DocumentKey: [Conflict]]
        /// The id of each change (`FrozenBatch.rows`) and the server's answer to it.
        let rows: [Int64]
        let results: [ChangeResult]
        /// Changes sent again write by write: their ids, and those of their writes' new changes.
        let resentRows: [Int64: [Int64]]
    }

    /// What a run did.
    struct RunResult {
        var outcome = RunOutcome.completed
        var settled: [SettledBatch] = []
        /// Whether the last batch settled took the server's cursor after it: the pull that
        /// follows the push would bring only what came after the answer, so the run skips it.
        var lastBatchTookCursor = false
    }

    private enum Phase {
        case starting
        case working
    }

    let store: LocalStore
    let transport: any SyncTransport
    let configuration: AbrovaSyncConfig

    /// What the instance tells the app, which outlives this engine when the instance switches
    /// users.
    let events: SyncEvents
    private var runProgress = SyncProgress()
    /// Whether the server must say whose the token is before this store's queue is sent under it:
    /// at the start, and after every new token.
    private var tokenGeneration = 0
    /// While set, no run starts (see `replaceToken`).
    private var isReplacingToken = false
    private var checkedTokenGeneration: Int?
    /// Called (in a task of its own) when the server says the token is another user's than the
    /// store's: the instance moves to that user's store, and this engine stops.
    private let tokenOfAnotherUser: @Sendable (String?) async -> Void
    private(set) var lastError: AbrovaSyncError?
    /// The decisions: states and what to do next (SyncDecisions, free of I/O).
    private var decisions: SyncDecisions
    private var current: (task: Task<RunResult, Never>, phase: Phase)?
    private var followUp: Task<RunResult, Never>?
    /// Online writes waiting for their push (`syncForWrite`): each is answered when a push round
    /// that began after it came has ended (its write was in the store before the round froze
    /// anything), with what the run has settled so far; pulls wait for them between pages.
    private var pushWaiters: [(after: Int, continuation: CheckedContinuation<RunResult, Never>)] = []
    /// Push rounds begun, in every run.
    private var pushRoundsBegun = 0
    private var probe: Task<Void, Never>?
    /// Documents whose kept conflict the app's resolver is deciding now.
    private var resolving: Set<DocumentKey> = []
    /// A run that failed is tried again after a backoff delay.
    private var retry: Task<Void, Never>?
    private var failedAttempts = 0
    /// What batches are cut by: the SDK's settings within the server's announced limits, made
    /// smaller while a run splits a batch the server refused as a whole.
    private var batchLimits = BatchLimits()
    private var random = SystemRandomNumberGenerator()
    /// How many runs started, for tests of single-flight.
    private(set) var runsStarted = 0
    /// The live-update watch's decisions (WatchDecisions, free of I/O), and its I/O: the watch
    /// out, the backoff after a failed one, the cursor the last answered watch was sent with, and
    /// the task that follows the store's count of listeners.
    private(set) var watch: WatchDecisions
    private var watchRequest: Task<Void, Never>?
    private var watchBackoff: Task<Void, Never>?
    private var watchedCursor: String?
    private var listenerFollower: Task<Void, Never>?

    init(
        store: LocalStore, transport: any SyncTransport, configuration: AbrovaSyncConfig, events: SyncEvents = SyncEvents(),
        tokenOfAnotherUser: @escaping @Sendable (String?) async -> Void = { _ in }
    ) {
        self.store = store
        self.transport = transport
        self.configuration = configuration
        self.events = events
        self.tokenOfAnotherUser = tokenOfAnotherUser
        decisions = SyncDecisions(syncOnReconnect: configuration.syncOnReconnect)
        watch = WatchDecisions(isEnabled: configuration.liveUpdates)
    }

    /// Starts the engine: follows the store's listeners for live updates, and runs sync at once
    /// (sending writes queued in an earlier session, pulling what changed).
    /// Applies the configured sync scope, once, before anything else sets one (`start()` and
    /// `AbrovaSync.setSyncScope` both wait for it). A failing store fails the first run, which says so.
    func applyConfiguredScope() async {
        if let applying = configuredScope { return await applying.value }
        let applying = Task { [store, configuration] in _ = try? await store.setSyncScope(configuration.scope) }
        configuredScope = applying
        await applying.value
        isConfiguredScopeApplied = true
    }

    /// The application of the configured scope, once started.
    private var configuredScope: Task<Void, Never>?
    private var isConfiguredScopeApplied = false

    func start() async {
        await applyConfiguredScope()
        if watch.isEnabled, listenerFollower == nil, watch.phase != .closed {
            // Holds the engine only between counts, so an engine the app dropped stops following.
            listenerFollower = Task { [weak self, store] in
                for await count in await store.liveListenerCounts() {
                    guard let self else { return }
                    await self.handleWatch(.listenersChanged(count))
                }
            }
        }
        await sync()
    }

    deinit {
        probe?.cancel()
        retry?.cancel()
        watchRequest?.cancel()
        watchBackoff?.cancel()
        listenerFollower?.cancel()
    }

    /// Whether requests should go to the server now.
    var isOnline: Bool { decisions.isOnline }

    /// Feeds an event to the decisions, publishes their states (the hub tells only those that
    /// changed) and carries out their actions.
    private func handle(_ event: SyncDecisions.Event) {
        let actions = decisions.handle(event)
        events.emit(.syncState(decisions.syncState))
        updateWatchConditions()
        events.emit(.connectionState(watch.shown(decisions.connection)))
        for action in actions {
            switch action {
            case .sync: Task { await self.sync() }
            case .startProbing: startProbing()
            case .stopProbing:
                probe?.cancel()
                probe = nil
            case .resetBackoff:
                failedAttempts = 0
                retry?.cancel()
                retry = nil
            case .retryLater: scheduleRetry()
            case .probeNow:
                probe?.cancel()
                probe = nil
                failedAttempts = 0
                startProbing(checkingFirst: true)
            }
        }
    }

    // MARK: Runs

    /// Runs sync, or joins the run that is starting; a trigger that comes while a run is already
    /// working gets the next run (shared by all such triggers), which sees everything written
    /// before the trigger.
    @discardableResult
    func sync() async -> RunResult {
        // A run pulls the configured scope, even one asked for before `start()` came to apply it.
        if !isConfiguredScopeApplied { await applyConfiguredScope() }
        guard decisions.mayRun, !isReplacingToken else { return RunResult(outcome: .unreachable) }
        if let current {
            if current.phase == .starting { return await current.task.value }
            if let followUp { return await followUp.value }
            let previous = current.task
            let next = Task { [weak self] () -> RunResult in
                // The run going may still freeze what the caller just wrote (it pushes until nothing
                // is unsent), so its batches count as the caller's too.
                let earlier = await previous.value
                guard let self else { return RunResult(outcome: .failed) }
                var result = await self.startRun()
                result.settled = earlier.settled + result.settled
                return result
            }
            followUp = next
            return await next.value
        }
        return await startRun()
    }

    /// The run an online write waits on, for its push only: the run going (which pushes it
    /// between two pulled pages, if it is pulling), or a new one. Pulls are not waited for.
    func syncForWrite() async -> RunResult {
        guard decisions.mayRun, !isReplacingToken else { return RunResult(outcome: .unreachable) }
        if current == nil { _ = beginRun() }
        return await withCheckedContinuation { continuation in
            pushWaiters.append((after: pushRoundsBegun, continuation: continuation))
        }
    }

    private func startRun() async -> RunResult {
        // A run begun since (by an online write, while a follow-up waited for the run before)
        // sees everything written before the trigger: joined, not run beside.
        if let current { return await current.task.value }
        return await beginRun().value
    }

    /// Starts a run; it is `current` until it ends (`run` clears it, in the same step as it
    /// answers the writes still waiting, so none waits on a run that has ended).
    private func beginRun() -> Task<RunResult, Never> {
        followUp = nil
        let task = Task { [weak self] () -> RunResult in
            guard let self else { return RunResult(outcome: .failed) }
            return await self.run()
        }
        current = (task, .starting)
        return task
    }

    private func run() async -> RunResult {
        runsStarted += 1
        current?.phase = .working
        runProgress = SyncProgress()
        handleWatch(.runStarted)
        handle(.runStarted)
        events.emit(.syncStarted)
        var result = RunResult()
        var syncedCount = 0
        do {
            if try await tokenIsTheStoreUsers(&result) { try await pushRound(into: &result, syncedCount: &syncedCount) }
            if !decisions.mayRun { result.outcome = .unreachable } // disconnected by the app meanwhile: no pull
            if result.outcome == .completed, !result.lastBatchTookCursor {
                try await pullAll(into: &result, syncedCount: &syncedCount)
                if result.outcome != .completed, hasWaitingWrites {
                    // A pull that failed does not leave the writes waiting for it without an
                    // attempt of their own, as a run of their own would have made one.
                    var own = RunResult(settled: result.settled)
                    try await pushRound(into: &own, syncedCount: &syncedCount)
                    result.settled = own.settled
                }
            }
            // Writes that came during the last page.
            while result.outcome == .completed, decisions.mayRun, hasWaitingWrites {
                try await pushRound(into: &result, syncedCount: &syncedCount)
            }
        } catch {
            result.outcome = .failed
            fail(AbrovaSyncError.wrapping(error))
        }
        switch result.outcome {
        case .completed:
            lastError = nil
            handle(.runEnded(.completed))
            events.emit(.syncCompleted(syncedCount: syncedCount))
        case .unreachable:
            handle(.runEnded(.unreachable))
        case .unauthorized, .failed, .anotherUser:
            break // told already, with the error (unauthorized(_:), fail(_:)), or moving to another store
        }
        // In one step with nothing awaited before: no write can come to wait on a run that has ended.
        current = nil
        answerWaitingWrites(upTo: .max, with: result)
        handleWatch(.runEnded)
        return result
    }

    /// Asks the server whose the token is before anything of this store goes out under it (at the
    /// start and after each new token): a store without a user takes the token's; a store of
    /// another user is left as it is, and the instance moves to that user's store. Returns
    /// whether the run may go on.
    private func tokenIsTheStoreUsers(_ result: inout RunResult) async throws -> Bool {
        let generation = tokenGeneration
        guard checkedTokenGeneration != generation else { return true }
        let named: String??
        do {
            named = try await transport.sessionUser()
        } catch {
            endRun(on: error, &result)
            return false
        }
        if let user = named {
            markReachable()
            switch try await store.owner() {
            case nil:
                try await store.adoptOwner(user)
            case .some(let owner) where owner == user:
                break
            case .some:
                result.outcome = .anotherUser
                Task { [tokenOfAnotherUser] in await tokenOfAnotherUser(user) }
                return false
            }
        }
        // A token replaced while the server was asked is asked about at the next run.
        if generation == tokenGeneration { checkedTokenGeneration = generation }
        return true
    }

    /// Whether an online write waits for a push round that has not begun yet.
    private var hasWaitingWrites: Bool { pushWaiters.contains { $0.after >= pushRoundsBegun } }

    /// One round of pushes, and then the answer to the writes that were waiting when it began.
    private func pushRound(into result: inout RunResult, syncedCount: inout Int) async throws {
        pushRoundsBegun += 1
        let round = pushRoundsBegun
        try await pushAll(into: &result, syncedCount: &syncedCount)
        answerWaitingWrites(upTo: round, with: result)
    }

    /// Answers the writes that came before round `round` began.
    private func answerWaitingWrites(upTo round: Int, with result: RunResult) {
        let (answered, waiting) = (pushWaiters.filter { $0.after < round }, pushWaiters.filter { $0.after >= round })
        pushWaiters = waiting
        for waiter in answered { waiter.continuation.resume(returning: result) }
    }

    /// Sends batches until nothing is unsent.
    private func pushAll(into result: inout RunResult, syncedCount: inout Int) async throws {
        try await resolveKeptConflicts() // left by a process that ended while its resolver decided
        let configuration = configuration
        if batchLimits.needsAnnouncement, await store.unsentWriteCount > 0 {
            do {
                batchLimits.announce(try await transport.serverLimits())
            } catch {
                return endRun(on: error, &result)
            }
        }
        batchLimits.endSplit()
        // A batch in flight is answered; once the app has disconnected, no other is frozen: its
        // writes wait for reconnect() (disconnect() promises that), even in a run begun before.
        while decisions.mayRun,
            let frozen = try await store.freezeBatch(
                maximumChanges: batchLimits.changes(configuration.maximumBatchChanges),
                maximumBytes: batchLimits.bytes,
                strategyOf: { configuration.strategy(for: $0.collection) })
        {
            // The strategies were frozen with the batch: its body is the same at every retry.
            let strategy = frozen.batch.changes.first?.strategy ?? configuration.conflictStrategy
            let body = PushRequest(batch: frozen.batch, strategy: strategy).body
            let answer: [ChangeResult]
            let pullCursor = try await store.pullCursor()
            var cursorAfter: CursorAdvance?
            do {
                let response = try await transport.push(body: body, pullCursor: pullCursor)
                answer = response.results
                cursorAfter = response.cursor.map { CursorAdvance(from: pullCursor, to: $0) }
            } catch {
                if case .unreachable = error, !configuration.offlineEnabled {
                    // Without offline persistence nothing waits in a batch: its writes fail (and are
                    // taken back) or stay pending, to be frozen again.
                    try await store.unfreezeBatch()
                }
                switch BatchRefusal(error, units: frozen.batch.units.count) {
                case .endRun:
                    // Not the changes' fault (unreachable, a refused route, client id or batch
                    // number): the queue stays, and the run is tried again.
                    return endRun(on: error, &result)
                case .split:
                    // Refused for its size or for one of its changes, before any was applied: sent
                    // again in halves until the change at fault stands alone.
                    markReachable()
                    try await store.unfreezeBatch()
                    batchLimits.split(changes: frozen.batch.changes.count, bytes: body.count)
                    continue
                case .rejectChange(let reason, let message):
                    // A group goes as one: the first change takes the refusal, the others go with it.
                    answer = frozen.batch.changes.indices.map { index in
                        index == 0
                            ? .rejected(reason: reason, message: message)
                            : .rejected(reason: .groupFailed, message: "not applied: the batch of writes was refused whole (\(message))")
                    }
                }
            }
            markReachable()
            try await settle(
                frozen.batch, rows: frozen.rows, answer: answer, cursor: cursorAfter, into: &result, syncedCount: &syncedCount)
        }
    }

    /// Settles one batch's answer and tells the app what became of each change.
    private func settle(
        _ batch: Batch, rows: [Int64], answer: [ChangeResult], cursor: CursorAdvance?, into result: inout RunResult,
        syncedCount: inout Int
    ) async throws {
        let report = try await store.settle(batch: batch.sequence, results: answer, advancing: cursor)
        result.lastBatchTookCursor = report.tookCursor
        runProgress.pushedChanges += batch.changes.count
        events.emit(.progress(runProgress))
        var newestRejections: [DocumentKey: (reason: Refusal.Reason, message: String)] = [:]
        for (change, outcome) in zip(batch.changes, answer) {
            guard case .rejected(let reason, let message) = outcome else {
                newestRejections[change.key] = nil
                continue
            }
            newestRejections[change.key] = (reason, message)
        }
        result.settled.append(
            SettledBatch(
                sequence: batch.sequence, keys: Set(batch.changes.map(\.key)), newestRejections: newestRejections,
                resent: report.resent, conflicts: report.conflicts.merging(report.unresolved, uniquingKeysWith: +),
                rows: rows, results: answer, resentRows: report.resentRows))
        for (change, outcome) in zip(batch.changes, answer) {
            guard case .applied = outcome else { continue }
            syncedCount += 1
            let operation = OperationType(change.delta)
            events.emit(.documentSynced(documentId: change.key.id, operation: operation))
        }
        for rejection in report.rejections {
            let error = AbrovaSyncError(.refused, reason: rejection.reason, message: rejection.message)
            events.emit(
                .documentRejected(
                    DocumentRejection(
                        documentId: rejection.key.id, collection: rejection.key.collection,
                        operation: rejection.operation, error: error)))
        }
        for (key, conflicts) in report.conflicts.sorted(by: { $0.key < $1.key }) {
            let server = try await store.document(key).data?.mapValue
            let info = ConflictInfo(documentId: key.id, collection: key.collection, local: nil, server: server, conflicts: conflicts)
            events.emit(.conflictDetected(info))
        }
        // The store keeps each conflict left to the resolver, with the device's document as the
        // app had it, until the resolution is written.
        let kept = Dictionary(try await store.unresolvedConflicts().map { ($0.key, $0) }, uniquingKeysWith: { $1 })
        for (key, conflicts) in report.unresolved.sorted(by: { $0.key < $1.key }) {
            let server = try await store.document(key).data?.mapValue
            let info = ConflictInfo(
                documentId: key.id, collection: key.collection, local: kept[key]?.local?.mapValue, server: server,
                conflicts: conflicts)
            events.emit(.conflictDetected(info))
        }
        if !report.unresolved.isEmpty { try await resolveKeptConflicts() }
    }

    /// Asks the resolver about every conflict the store keeps that it is not deciding already:
    /// those of this run, and any that an earlier process left when it ended before the
    /// resolution was written. Each is asked in a task of its own, so that a resolver waiting for
    /// the user holds back only its own document (whose changes wait in the store meanwhile),
    /// never a run or another write. The resolution is written before the document's waiting
    /// changes, as a change on top of the server's document, and the conflict forgotten with it
    /// (`LocalStore.resolveConflict`); the run it starts sends it. The resolver is shown the
    /// server's document as this device last confirmed it; should a newer one arrive before the
    /// resolution is written, the resolver is asked again, with the newer one.
    private func resolveKeptConflicts() async throws {
        guard let resolver = configuration.conflictResolver else { return }
        for conflict in try await store.unresolvedConflicts() where !resolving.contains(conflict.key) {
            let key = conflict.key
            resolving.insert(key)
            let server: (data: Value?, version: Version)
            do {
                // The list may predate a resolution written since, by a run that asked for it.
                guard await store.isConflictKept(key) else {
                    resolving.remove(key)
                    continue
                }
                server = try await store.confirmedDocument(key)
            } catch {
                resolving.remove(key)
                throw error
            }
            let info = ConflictInfo(
                documentId: key.id, collection: key.collection, local: conflict.local?.mapValue, server: server.data?.mapValue,
                conflicts: conflict.conflicts)
            Task { [weak self] in
                let resolution = await resolver(info)
                await self?.write(resolution, of: key, local: info.local, seenVersion: server.version)
            }
        }
    }

    /// Writes the resolver's answer for a kept conflict and sends it; on a failure the conflict
    /// stays kept, and the next run asks again.
    private func write(_ resolution: ConflictResolution, of key: DocumentKey, local: [String: Value]?, seenVersion: Version) async {
        let operation: WriteOperation? =
            switch resolution {
            case .useServer: nil
            case .useLocal: local.map { .set($0) } ?? .delete
            case .use(let data): .set(data)
            case .delete: .delete
            }
        let written = try? await store.resolveConflict(key, with: operation, seenVersion: seenVersion)
        resolving.remove(key)
        switch written {
        case true?: Task { await self.sync() }
        case false?: try? await resolveKeptConflicts()
        case nil: break
        }
    }

    /// Pulls pages until the server has no more. The next page is asked for as soon as a page's
    /// cursor is known, so the server makes it (and the transport reads it) while this device
    /// saves the page before: on an initial sync the two take turns otherwise.
    private func pullAll(into result: inout RunResult, syncedCount: inout Int) async throws {
        var resynced = false
        let (scope, widening) = try await store.syncScopeAndWidening()
        guard try await pullScopeWidening(widening, into: &result) else { return }
        try await store.beginPullFromTheBeginning()
        var cursor = try await store.pullCursor()
        var request = fetchPage(after: cursor, of: scope)
        // A page fetched ahead is not needed once the run ends another way.
        defer { request.cancel() }
        while true {
            let page: PullResponse
            switch await request.value {
            case .success(let answer):
                page = answer
            case .failure(.refused(let reason, _)) where !resynced && (reason == .resyncRequired || (reason == .invalid && cursor != nil)):
                // Deletes after our cursor are no longer kept, the read rules changed (both
                // resyncRequired), or the server does not know the cursor (invalid: its database
                // was replaced, or the cursor is another user's): pull everything again, and drop what it does not
                // bring. Unsent changes stay; pulled states join the confirmed ones.
                resynced = true
                try await store.beginResync()
                cursor = nil
                request = fetchPage(after: nil, of: scope)
                continue
            case .failure(let error):
                guard case .refused(let reason, let message) = error else { return endRun(on: error, &result) }
                result.outcome = .failed
                fail(AbrovaSyncError(.refused, reason: reason, message: "pull refused: \(message)"))
                return
            }
            markReachable()
            cursor = page.cursor
            if page.hasMore { request = fetchPage(after: page.cursor, of: scope) }
            try await store.applyPulledPage(
                pulled: page.documents.map { (key: $0.key, state: $0.pulled) }, cursor: page.cursor, left: page.left)
            runProgress.pulledDocuments += page.documents.count
            runProgress.isPulling = page.hasMore
            events.emit(.progress(runProgress))
            if !page.hasMore {
                try await store.endOfPull()
                return
            }
            // An online write made meanwhile goes out now, not after the last page.
            if hasWaitingWrites {
                try await pushRound(into: &result, syncedCount: &syncedCount)
                guard result.outcome == .completed else { return }
            }
        }
    }

    /// Pulls whole, from the beginning, the part a widened scope added that the cursor has not
    /// brought (`LocalStore.scopeWidening()`); the cursor stays as it is. Returns whether the run
    /// goes on.
    private func pullScopeWidening(_ widening: ScopeWidening?, into result: inout RunResult) async throws -> Bool {
        guard let widening else { return true }
        var cursor: String?
        while true {
            let page: PullResponse
            do {
                page = try await transport.pull(cursor: cursor, limit: 500, scope: widening.scope)
            } catch {
                endRun(on: error, &result)
                return false
            }
            markReachable()
            // Its `left` is not taken: it names what this part no longer covers, which another
            // part may; the pull from the cursor after it names what the whole scope does not.
            try await store.applyPulledPage(pulled: page.documents.map { (key: $0.key, state: $0.pulled) }, cursor: nil)
            runProgress.pulledDocuments += page.documents.count
            events.emit(.progress(runProgress))
            guard page.hasMore else { break }
            cursor = page.cursor
        }
        try await store.finishScopeWidening(widening)
        return true
    }

    /// Starts fetching the page after `cursor` (`nil`: from the beginning) of `scope` (`nil`: all).
    private func fetchPage(after cursor: String?, of scope: SyncScope?) -> Task<Result<PullResponse, TransportFailure>, Never> {
        Task { [transport] in
            do throws(TransportFailure) {
                return .success(try await transport.pull(cursor: cursor, limit: 500, scope: scope))
            } catch {
                return .failure(error)
            }
        }
    }

    /// Ends a run on a failure that waiting (unreachable) or a new token (unauthorized) fixes.
    private func endRun(on failure: TransportFailure, _ result: inout RunResult) {
        switch failure {
        case .unreachable:
            result.outcome = .unreachable
        case .unauthorized(let message):
            result.outcome = .unauthorized
            unauthorized(message)
        case .refused(let reason, let message):
            result.outcome = .failed
            fail(AbrovaSyncError(.refused, reason: reason, message: message))
        }
    }

    // MARK: Connection

    private func markReachable() { handle(.runReachedServer) }

    /// Tells the engine that a request outside a run could not reach the server.
    func noteUnreachable() { handle(.requestUnreachable) }

    /// Tells the engine that a request outside a run got through.
    func noteReachable() { handle(.requestGotThrough) }

    private func startProbing(checkingFirst: Bool = false) {
        guard probe == nil, decisions.mayRun else { return }
        // Holds the engine only between its own calls, so an engine the app dropped stops probing.
        probe = Task { [weak self, clock = configuration.clock, transport] in
            var sleeps = !checkingFirst
            while !Task.isCancelled {
                if sleeps {
                    guard let delay = await self?.nextDelay() else { return }
                    do { try await clock.sleep(for: delay) } catch { return }
                }
                sleeps = true
                guard self != nil, !Task.isCancelled else { return }
                if await transport.isReachable() {
                    await self?.probeSucceeded()
                    return
                }
            }
        }
    }

    /// Runs sync again after the next backoff delay (a run failed on something waiting may fix:
    /// a refusal of the whole request, a failing store).
    private func scheduleRetry() {
        retry?.cancel()
        retry = Task { [weak self, clock = configuration.clock] in
            guard let delay = await self?.nextDelay() else { return }
            do { try await clock.sleep(for: delay) } catch { return }
            guard !Task.isCancelled else { return }
            await self?.sync()
        }
    }

    private func nextDelay() -> Duration {
        failedAttempts += 1
        return configuration.retryPolicy.delay(attempt: failedAttempts, random: &random)
    }

    private func probeSucceeded() {
        probe?.cancel() // a probe restarted by `probeNow` may still be running
        probe = nil
        handle(.probeFoundServer)
    }

    private func unauthorized(_ message: String) {
        let error = AbrovaSyncError(.unauthorized, reason: .unauthenticated, message: message)
        lastError = error
        handle(.runEnded(.unauthorized))
        events.emit(.syncFailed(error))
    }

    private func fail(_ error: AbrovaSyncError) {
        lastError = error
        handle(.runEnded(.failed))
        events.emit(.syncFailed(error))
    }

    /// The app went offline on purpose: writes queue until `reconnect()`.
    func disconnect() {
        retry?.cancel()
        retry = nil
        handle(.disconnect)
    }

    /// The app is back online: sync at once when `syncOnReconnect`, else probe only.
    func reconnect() { handle(.reconnect) }

    /// The device's network came up or went away (from a path monitor).
    func networkChanged(available: Bool) { handle(available ? .networkAvailable : .networkLost) }

    /// The app came to the foreground: sync as at start, and watch again.
    func cameToForeground() {
        handleWatch(.foreground)
        handle(.foreground)
    }

    /// The app went to the background: no watch until it comes back.
    func wentToBackground() { handleWatch(.background) }

    /// A new token came: sync runs again (a run already working used the old token, so this is
    /// a new run), which resumes sync if it had stopped on a refused token.
    func tokenReplaced() {
        tokenGeneration += 1
        handleWatch(.tokenReplaced)
        handle(.tokenReplaced)
    }

    /// Replaces the token between runs: `apply` puts it in place once the run in progress has
    /// ended (no new one starts meanwhile), so that no request of a run checked for one user goes
    /// out under another's token; then a run starts, asking first whose the new token is.
    func replaceToken(_ apply: @Sendable () -> Void) async {
        isReplacingToken = true
        updateWatchConditions() // the watch out carries the old token
        if let followUp { _ = await followUp.value }
        if let current { _ = await current.task.value }
        apply()
        isReplacingToken = false
        tokenReplaced()
    }

    /// Stops probing and lets a run in progress end (the instance ends the streams).
    func close() async {
        handleWatch(.close)
        listenerFollower?.cancel()
        listenerFollower = nil
        handle(.close) // no new runs, no probing
        retry?.cancel()
        retry = nil
        if let followUp { _ = await followUp.value }
        if let current { _ = await current.task.value }
    }
}

// MARK: Live updates

extension SyncRunner {
    /// Whether the engine may talk to the server for a watch: online, the token not refused and
    /// not being replaced.
    private var isServerAvailableForWatch: Bool { decisions.isOnline && decisions.connection != .error && !isReplacingToken }

    /// Tells the watch's decisions when the engine's say otherwise about the server.
    fileprivate func updateWatchConditions() {
        let available = isServerAvailableForWatch
        guard available != watch.isServerAvailable else { return }
        handleWatch(.serverAvailable(available))
    }

    /// Feeds an event to the watch's decisions, tells the connection state (`live` or not) and
    /// carries out their actions.
    func handleWatch(_ event: WatchDecisions.Event) {
        let actions = watch.handle(event)
        events.emit(.connectionState(watch.shown(decisions.connection)))
        for action in actions {
            switch action {
            case .watch(let number): sendWatch(number)
            case .cancelWatch:
                watchRequest?.cancel()
                watchRequest = nil
            case .pull: pullForWatch()
            case .backOff(let attempt): backOffWatch(attempt)
            case .cancelBackoff:
                watchBackoff?.cancel()
                watchBackoff = nil
            }
        }
    }

    /// Sends watch `number` from the store's cursor; its answer goes to the decisions (which drop
    /// it if the watch was cancelled meanwhile).
    private func sendWatch(_ number: Int) {
        watchRequest?.cancel()
        watchRequest = Task { [weak self, store, transport] in
            let cursor: String?
            let scope: SyncScope?
            do {
                cursor = try await store.pullCursor()
                // A change to a collection of the scope wakes a watch, covered or not (it may
                // have left the scope), so the collections say as much as the whole scope.
                scope = try await store.syncScope().map { scope in (try? SyncScope(collections: scope.collections)) ?? scope }
            } catch {
                await self?.watchAnswered(number, .failed(.unreachable("the cursor could not be read: \(error)")), cursor: nil)
                return
            }
            let outcome: WatchDecisions.Outcome
            do throws(TransportFailure) {
                outcome = try await transport.watch(cursor: cursor, scope: scope) ? .changed : .unchanged
            } catch {
                outcome = .failed(error)
            }
            await self?.watchAnswered(number, outcome, cursor: cursor)
        }
    }

    private func watchAnswered(_ number: Int, _ outcome: WatchDecisions.Outcome, cursor: String?) {
        guard watch.phase == .watching(number: number) else { return }
        watchedCursor = cursor
        watchRequest = nil
        handleWatch(.answered(number: number, outcome))
    }

    /// Runs sync for a wake (joining or following a run going, as every trigger does), then
    /// tells whether it moved the cursor past the watch's.
    private func pullForWatch() {
        Task { [weak self] in
            guard let self else { return }
            let result = await self.sync()
            await self.watchPullEnded(completed: result.outcome == .completed)
        }
    }

    private func watchPullEnded(completed: Bool) async {
        let cursor = try? await store.pullCursor()
        handleWatch(.pullEnded(advanced: completed && cursor != watchedCursor))
    }

    /// Waits the retry policy's delay for `attempt` on the engine's clock, then watches again.
    private func backOffWatch(_ attempt: Int) {
        let delay = configuration.retryPolicy.delay(attempt: attempt, random: &random)
        watchBackoff?.cancel()
        watchBackoff = Task { [weak self, clock = configuration.clock] in
            do { try await clock.sleep(for: delay) } catch { return }
            guard !Task.isCancelled else { return }
            await self?.handleWatch(.backoffEnded(attempt: attempt))
        }
    }
}

extension SyncEngine.SyncListener {
    public func onSyncStarted() {}
    public func onSyncCompleted(syncedCount: Int) {}
    public func onSyncFailed(error: Error) {}
    public func onConflictDetected(conflict: ConflictInfo) {}
    public func onDocumentSynced(documentId: String, operation: OperationType) {}
    public func onDocumentRejected(documentId: String, operation: OperationType, error: Error) {}
}

extension SyncRunner.RunResult {
    /// What the server answered to the change that held the write of `receipt`, if this run
    /// settled it: `nil` when the write was not sent.
    ///
    /// The change is found by its id in the batches frozen from the write on, followed when a
    /// refused change went back to the queue write by write (to the write's own), so that an
    /// earlier write of the document sent again in a later batch is never taken for it.
    func answer(to receipt: WriteReceipt, of key: DocumentKey) -> ChangeResult? {
        guard receipt.row != 0 else { return answerByDocument(key, inBatchFrom: receipt.batchFrom) }
        var (row, part) = (receipt.row, receipt.part)
        for batch in settled where batch.sequence >= receipt.batchFrom {
            guard let position = batch.rows.firstIndex(of: row), batch.results.indices.contains(position) else { continue }
            guard let parts = batch.resentRows[row] else { return batch.results[position] }
            guard parts.indices.contains(part) else { return nil }
            (row, part) = (parts[part], 0)
        }
        return nil
    }

    /// For a change stored before changes had ids: the first batch from `sequence` on that held
    /// the document and settled it, by its newest change there.
    private func answerByDocument(_ key: DocumentKey, inBatchFrom sequence: Int64) -> ChangeResult? {
        guard let batch = settled.first(where: { $0.sequence >= sequence && $0.keys.contains(key) && !$0.resent.contains(key) }) else {
            return nil
        }
        if let rejection = batch.newestRejections[key] { return .rejected(reason: rejection.reason, message: rejection.message) }
        return .applied(version: .zero, state: nil, conflicts: batch.conflicts[key] ?? [])
    }
}
