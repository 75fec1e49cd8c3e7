import AbrovaStore

/// Something the SDK tells the app, emitted once into `SyncEvents`, which hands it to every
/// stream, callback, listener and the observable status (`SyncEventAdapters.swift`).
///
/// The first four are states: the latest of each is replayed to a new stream, so a screen opened
/// late shows it. The others are events, heard from the moment of subscribing.
enum SyncEvent: Sendable {
    /// The sync state now (told only when it changed).
    case syncState(SyncState)
    /// The connection state now (told only when it changed).
    case connectionState(ConnectionState)
    /// The writes waiting to be sent, at every change of the store's queue.
    case pendingCount(Int)
    /// How far the run has come, after each batch sent and each page pulled.
    case progress(SyncProgress)
    /// A run started.
    case syncStarted
    /// A run completed, having sent `syncedCount` changes the server applied.
    case syncCompleted(syncedCount: Int)
    /// A run stopped on an error that waiting will not fix.
    case syncFailed(AbrovaSyncError)
    /// The server applied a change of this document.
    case documentSynced(documentId: String, operation: OperationType)
    /// The server refused a queued write when it was sent; it was rolled back.
    case documentRejected(DocumentRejection)
    /// The server settled a conflict (or left it to the resolver).
    case conflictDetected(ConflictInfo)
}
