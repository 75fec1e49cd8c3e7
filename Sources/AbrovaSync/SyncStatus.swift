import Observation

/// The sync status for SwiftUI: an `@Observable` object on the main actor that follows the SDK's
/// streams, so a view that reads `syncState`, `pendingCount` or `progress` updates by itself.
///
///     @State private var status = AbrovaSync.shared.makeStatus()
///     Text(status.pendingCount == 0 ? "All synced" : "\(status.pendingCount) waiting")
@MainActor @Observable
public final class SyncStatus {
    /// The sync state.
    public private(set) var syncState: SyncState = .idle
    /// Writes waiting to be sent.
    public private(set) var pendingCount = 0
    /// The connection to the server.
    public private(set) var connectionState: ConnectionState = .connecting
    /// The latest queued write the server refused.
    public private(set) var lastRejection: DocumentRejection?
    /// How far the latest sync run has come: changes sent, documents pulled, whether more pages
    /// wait (an initial sync's progress bar).
    public private(set) var progress = SyncProgress()

    @ObservationIgnored private var followers: [Task<Void, Never>] = []

    init(following sync: AbrovaSync) {
        let states = sync.syncStateChanges
        let counts = sync.pendingCountChanges
        let connections = sync.connectionStateChanges
        let rejections = sync.documentRejections
        let steps = sync.syncProgressChanges
        followers = [
            Task { [weak self] in for await state in states { self?.syncState = state } },
            Task { [weak self] in for await count in counts { self?.pendingCount = count } },
            Task { [weak self] in for await state in connections { self?.connectionState = state } },
            Task { [weak self] in for await rejection in rejections { self?.lastRejection = rejection } },
            Task { [weak self] in for await step in steps { self?.progress = step } },
        ]
    }

    isolated deinit {
        for follower in followers { follower.cancel() }
    }
}

extension AbrovaSync {
    /// An observable status that follows this instance.
    @MainActor public func makeStatus() -> SyncStatus { SyncStatus(following: self) }
}

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
}
#endif
