import AbrovaLocking
import Observation

// What each channel hears of the events `SyncEvents` fans out: the streams, the one-callback
// setters, the `SyncListener`s, the observable status and Combine. Each is a thin adapter over the
// hub; none is fed by hand.

// MARK: Streams

extension AbrovaSync {
    /// The sync state now and at every change; any number may listen.
    public var syncStateChanges: AsyncStream<SyncState> { events.stream { if case .syncState(let state) = $0 { state } else { nil } } }
    /// The number of writes waiting to be sent, now and at every change.
    public var pendingCountChanges: AsyncStream<Int> { events.stream { if case .pendingCount(let count) = $0 { count } else { nil } } }
    /// The connection state now and at every change.
    public var connectionStateChanges: AsyncStream<ConnectionState> {
        events.stream { if case .connectionState(let state) = $0 { state } else { nil } }
    }
    /// Queued writes the server refused when they were sent, from the moment of subscribing.
    public var documentRejections: AsyncStream<DocumentRejection> {
        events.stream { if case .documentRejected(let rejection) = $0 { rejection } else { nil } }
    }
    /// Every conflict the server settled (or, under `manual`, left to the resolver), with the
    /// fields, both values and the outcome, from the moment of subscribing: what
    /// `SyncListener.onConflictDetected` hears, for any number of subscribers.
    public var conflicts: AsyncStream<ConflictInfo> { events.stream { if case .conflictDetected(let info) = $0 { info } else { nil } } }
    /// The progress of sync runs: after each batch sent and each page pulled.
    public var syncProgressChanges: AsyncStream<SyncProgress> { events.stream { if case .progress(let step) = $0 { step } else { nil } } }

    /// The sync state now.
    public var syncState: SyncState { events.syncState }
}

// MARK: Callbacks

// Every setter is synchronous: it only stores what it is given, and the seed's sample calls
// `addSyncListener(_:)` without `await`, from code that need not be async. Callbacks are called on
// the main actor, so a `@MainActor` view model may set its properties in them.

extension AbrovaSync {
    /// Sets the one sync-state callback (a second call replaces the first).
    public func onSyncState(_ callback: @escaping @MainActor @Sendable (SyncState) -> Void) {
        events.updateCallbacks { $0.onSyncState = callback }
    }
    /// Sets the one pending-count callback (a second call replaces the first).
    public func onPendingCount(_ callback: @escaping @MainActor @Sendable (Int) -> Void) {
        events.updateCallbacks { $0.onPendingCount = callback }
    }
    /// Sets the one rejection callback (a second call replaces the first).
    public func onDocumentRejected(_ callback: @escaping @MainActor @Sendable (String, OperationType, AbrovaSyncError) -> Void) {
        events.updateCallbacks { $0.onDocumentRejected = callback }
    }
}

/// The seed's one-callback setters' callbacks, one each.
struct SyncCallbacks: Sendable {
    var onSyncState: (@MainActor @Sendable (SyncState) -> Void)?
    var onPendingCount: (@MainActor @Sendable (Int) -> Void)?
    var onDocumentRejected: (@MainActor @Sendable (String, OperationType, AbrovaSyncError) -> Void)?

    /// Whether a callback set hears `event`.
    func hears(_ event: SyncEvent) -> Bool {
        switch event {
        case .syncState: onSyncState != nil
        case .pendingCount: onPendingCount != nil
        case .documentRejected: onDocumentRejected != nil
        default: false
        }
    }

    /// Calls the callback that hears `event`, if one is set.
    @MainActor
    func call(with event: SyncEvent) {
        switch event {
        case .syncState(let state): onSyncState?(state)
        case .pendingCount(let count): onPendingCount?(count)
        case .documentRejected(let rejection): onDocumentRejected?(rejection.documentId, rejection.operation, rejection.error)
        case .connectionState, .progress, .syncStarted, .syncCompleted, .syncFailed, .documentSynced, .conflictDetected: break
        }
    }
}

// MARK: Listeners

extension AbrovaSync {
    /// Adds a listener (held weakly: keep a reference).
    public func addSyncListener(_ listener: any SyncEngine.SyncListener) { events.addListener(listener) }
    /// Removes a listener.
    public func removeSyncListener(_ listener: any SyncEngine.SyncListener) { events.removeListener(listener) }
}

extension SyncEngine.SyncListener {
    /// Calls the method that hears `event`, if there is one.
    @MainActor
    func hear(_ event: SyncEvent) {
        switch event {
        case .syncStarted: onSyncStarted()
        case .syncCompleted(let syncedCount): onSyncCompleted(syncedCount: syncedCount)
        case .syncFailed(let error): onSyncFailed(error: error)
        case .conflictDetected(let conflict): onConflictDetected(conflict: conflict)
        case .documentSynced(let documentId, let operation): onDocumentSynced(documentId: documentId, operation: operation)
        case .documentRejected(let rejection):
            onDocumentRejected(documentId: rejection.documentId, operation: rejection.operation, error: rejection.error)
        case .syncState, .connectionState, .pendingCount, .progress: break
        }
    }
}

// MARK: Observable status

/// What a status object shows, and how each event changes it: one value for the `@Observable`
/// status and, where Observation is missing (before iOS 17), the `ObservableObject` one.
struct ShownStatus: Equatable, Sendable {
    var syncState: SyncState = .idle
    var pendingCount = 0
    var connectionState: ConnectionState = .connecting
    var lastRejection: DocumentRejection?
    var progress = SyncProgress()

    /// Whether `event` changes what a status shows: only those cross to the main actor (not every
    /// document synced).
    static func shows(_ event: SyncEvent) -> Bool {
        switch event {
        case .syncState, .pendingCount, .connectionState, .documentRejected, .progress: true
        case .syncStarted, .syncCompleted, .syncFailed, .documentSynced, .conflictDetected: false
        }
    }

    mutating func show(_ event: SyncEvent) {
        switch event {
        case .syncState(let state): syncState = state
        case .pendingCount(let count): pendingCount = count
        case .connectionState(let state): connectionState = state
        case .documentRejected(let rejection): lastRejection = rejection
        case .progress(let step): progress = step
        case .syncStarted, .syncCompleted, .syncFailed, .documentSynced, .conflictDetected: break
        }
    }
}

/// The task that feeds a status object, cancelled when the object goes (from a `deinit` that is
/// not isolated, which needs no newer runtime).
final class StatusFollower: Sendable {
    private let task = Protected<Task<Void, Never>?>(nil)

    func start(_ task: Task<Void, Never>) { self.task.withLock { $0 = task } }

    deinit { task.withLock { $0?.cancel() } }
}

extension AbrovaSync {
    /// The sync status for SwiftUI: an `@Observable` object on the main actor that follows the SDK's
    /// events, so a view that reads `syncState`, `pendingCount` or `progress` updates by itself.
    /// (Before iOS 17 and macOS 14, `makeStatusObject()` gives an `ObservableObject`.)
    ///
    ///     @State private var status = AbrovaSync.shared.makeStatus()
    ///     Text(status.pendingCount == 0 ? "All synced" : "\(status.pendingCount) waiting")
    @available(macOS 14, iOS 17, tvOS 17, watchOS 10, *)
    @MainActor @Observable
    public final class SyncStatus {
        private var shown = ShownStatus()
        /// The sync state.
        public var syncState: SyncState { shown.syncState }
        /// Writes waiting to be sent.
        public var pendingCount: Int { shown.pendingCount }
        /// The connection to the server.
        public var connectionState: ConnectionState { shown.connectionState }
        /// The latest queued write the server refused.
        public var lastRejection: DocumentRejection? { shown.lastRejection }
        /// How far the latest sync run has come: changes sent, documents pulled, whether more pages
        /// wait (an initial sync's progress bar).
        public var progress: SyncProgress { shown.progress }

        @ObservationIgnored private let follower = StatusFollower()

        init(following events: SyncEvents) {
            let shown = events.stream { ShownStatus.shows($0) ? $0 : nil }
            follower.start(Task { [weak self] in for await event in shown { self?.shown.show(event) } })
        }
    }
}

/// `AbrovaSync.SyncStatus`, by its short name.
@available(macOS 14, iOS 17, tvOS 17, watchOS 10, *)
public typealias SyncStatus = AbrovaSync.SyncStatus

extension AbrovaSync {
    /// An observable status that follows this instance.
    @available(macOS 14, iOS 17, tvOS 17, watchOS 10, *)
    @MainActor public func makeStatus() -> SyncStatus { SyncStatus(following: events) }
}

// MARK: Combine

#if canImport(Combine)
    import Combine

    extension AbrovaSync {
        /// The sync state as a Combine publisher (the seed's `syncStatePublisher`).
        public var syncStatePublisher: AnyPublisher<SyncState, Never>? {
            let subject = CurrentValueSubject<SyncState, Never>(syncState)
            let states = syncStateChanges
            let task = Task { for await state in states { subject.send(state) } }
            return subject.handleEvents(receiveCancel: { task.cancel() }).eraseToAnyPublisher()
        }

        /// The sync status as an `ObservableObject`, for apps before iOS 17 and macOS 14 (where
        /// Observation is missing): the same figures as `makeStatus()`, published on the main actor.
        ///
        ///     @StateObject private var status = AbrovaSync.shared.makeStatusObject()
        @MainActor public func makeStatusObject() -> SyncStatusObject { SyncStatusObject(following: events) }
    }

    /// The sync status as an `ObservableObject` (see `AbrovaSync.makeStatusObject()`).
    @MainActor
    public final class SyncStatusObject: ObservableObject {
        @Published private var shown = ShownStatus()
        /// The sync state.
        public var syncState: SyncState { shown.syncState }
        /// Writes waiting to be sent.
        public var pendingCount: Int { shown.pendingCount }
        /// The connection to the server.
        public var connectionState: ConnectionState { shown.connectionState }
        /// The latest queued write the server refused.
        public var lastRejection: DocumentRejection? { shown.lastRejection }
        /// How far the latest sync run has come.
        public var progress: SyncProgress { shown.progress }

        private let follower = StatusFollower()

        init(following events: SyncEvents) {
            let shown = events.stream { ShownStatus.shows($0) ? $0 : nil }
            follower.start(Task { [weak self] in for await event in shown { self?.shown.show(event) } })
        }
    }
#endif
