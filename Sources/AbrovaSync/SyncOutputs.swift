import AbrovaStore

/// What an instance tells the app: the streams, the `SyncListener`s and the seed's one-callback
/// setters. The instance keeps them when it switches users (a new engine on another store), so a
/// screen subscribed once goes on hearing.
final class SyncOutputs: Sendable {
    let syncStates = Broadcaster<SyncState>(initial: .idle)
    let connectionStates = Broadcaster<ConnectionState>(initial: .connecting)
    let rejections = Broadcaster<DocumentRejection>(replaysLatest: false)
    let conflicts = Broadcaster<ConflictInfo>(replaysLatest: false)
    let progress = Broadcaster<SyncProgress>()
    let onSyncState = Guarded<(@Sendable (SyncState) -> Void)?>(nil)
    let onDocumentRejected = Guarded<(@Sendable (String, OperationType, AbrovaSyncError) -> Void)?>(nil)
    /// Held weakly: a listener the app dropped is forgotten.
    private let listeners = Guarded<[ObjectIdentifier: WeakListener]>([:])

    func addListener(_ listener: any SyncEngine.SyncListener) {
        listeners.update { $0[ObjectIdentifier(listener)] = WeakListener(value: listener) }
    }

    func removeListener(_ listener: any SyncEngine.SyncListener) {
        listeners.update { $0[ObjectIdentifier(listener)] = nil }
    }

    /// The listeners still held by the app.
    func liveListeners() -> [any SyncEngine.SyncListener] {
        listeners.update { listeners in
            listeners = listeners.filter { $0.value.value != nil }
            return listeners.values.compactMap(\.value)
        }
    }

    /// Ends every stream.
    func finish() {
        syncStates.finish()
        connectionStates.finish()
        rejections.finish()
        conflicts.finish()
        progress.finish()
    }
}

/// A listener held weakly.
struct WeakListener: Sendable {
    weak var value: (any SyncEngine.SyncListener)?
}
