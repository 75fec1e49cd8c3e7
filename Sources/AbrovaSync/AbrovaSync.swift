@_exported import AbrovaCore
@_exported import AbrovaStore
import AbrovaWire
import Foundation
import Synchronization

/// The SDK's entry point: one per device store. `AbrovaSync.initialize(config:)` makes the shared
/// one; `AbrovaSync(config:)` makes independent ones (two devices in one test process).
///
///     let config = try AbrovaSyncConfigBuilder(apiKey: "YOUR_API_KEY").offlineEnabled(true).build()
///     try AbrovaSync.initialize(config: config)
///     let doc = try await AbrovaSync.shared.collection("tasks").add(data: ["task": "Buy milk"])
///
/// While the server answers, writes go to it first (after any older queued writes) and reads come
/// from it; while it cannot be reached, or after `disconnect()`, writes are saved on the device
/// and queued, and reads come from the device. A refusal fails the call with `AbrovaSyncError`
/// (its `statusCode`), and nothing is queued or changed.
public final class AbrovaSync: Sendable {
    /// The settings it was made with.
    public let configuration: AbrovaSyncConfig
    let store: LocalStore
    let engine: SyncEngine
    private let token: Guarded<String?>
    private let pendingCounter: Task<Void, Never>
    private let pendingCounts = Broadcaster<Int>()
    private let onPendingCountCallback = Guarded<(@Sendable (Int) -> Void)?>(nil)
    /// The foreground and the network path, as engine events.
    private let platformSignals: PlatformSignals

    private static let sharedInstance = Mutex<AbrovaSync?>(nil)

    /// Makes the shared instance (replacing an earlier one).
    ///
    /// - Throws: `AbrovaSyncError` `.storage` when the device store cannot be opened.
    @discardableResult
    public static func initialize(config: AbrovaSyncConfig) throws(AbrovaSyncError) -> AbrovaSync {
        let instance = try AbrovaSync(config: config)
        let previous = sharedInstance.withLock { shared in
            defer { shared = instance }
            return shared
        }
        if let previous { Task { await previous.close() } }
        return instance
    }

    /// The instance made by `initialize(config:)`. Calling it before is a programming error.
    public static var shared: AbrovaSync {
        guard let instance = sharedInstance.withLock({ $0 }) else {
            preconditionFailure("AbrovaSync.initialize(config:) must be called before AbrovaSync.shared")
        }
        return instance
    }

    /// An independent instance on its own store. It starts a sync at once (sending writes queued
    /// in an earlier session, pulling what changed).
    ///
    /// - Throws: `AbrovaSyncError` `.storage` when the device store cannot be opened.
    public init(config: AbrovaSyncConfig) throws(AbrovaSyncError) {
        configuration = config
        do {
            store = try LocalStore(path: config.storePath)
        } catch {
            throw AbrovaSyncError.wrapping(error)
        }
        let token = Guarded(config.authToken)
        self.token = token
        let readToken: @Sendable () -> String? = { token.value }
        let transport = config.makeTransport?(readToken)
            ?? HTTPTransport(serverURL: config.serverURL, apiKey: config.apiKey, token: readToken, timeout: config.requestTimeout)
        engine = SyncEngine(store: store, transport: transport, configuration: config)
        // The pending count follows the store's count of unsent writes, live and exact.
        let counts = pendingCounts
        let callback = onPendingCountCallback
        let store = self.store
        pendingCounter = Task {
            for await count in await store.unsentWriteCounts() {
                counts.send(count)
                callback.value?(count)
            }
        }
        platformSignals = PlatformSignals(engine: engine)
        let engine = self.engine
        Task { await engine.sync() }
    }

    deinit {
        pendingCounter.cancel()
        platformSignals.cancel()
    }

    /// Stops syncing, ends the streams and closes the device store's file (it stays on disk; a
    /// new instance may open it). The instance cannot be used after.
    public func close() async {
        platformSignals.cancel()
        await engine.close()
        pendingCounter.cancel()
        pendingCounts.finish()
        await store.close()
    }

    // MARK: Data

    /// A collection of documents.
    public func collection(_ name: String) -> CollectionReference { CollectionReference(name: name, sync: self) }

    // MARK: Sync

    /// Sends queued writes and pulls what changed now, sharing a run that is starting; returns
    /// when it is done (or the server cannot be reached).
    public func forceSyncNow() async {
        await engine.sync()
    }

    /// Sends queued writes now, without waiting (the seed's call form).
    public func forceSyncNow() {
        let engine = engine
        Task { await engine.sync() }
    }

    /// Goes offline on purpose: writes are queued and reads come from the device until
    /// `reconnect()`.
    public func disconnect() async { await engine.disconnect() }
    /// Comes back online: queued writes are sent at once when `syncOnReconnect` is on.
    public func reconnect() async { await engine.reconnect() }
    /// Same as `disconnect()`.
    public func goOffline() async { await disconnect() }
    /// Same as `reconnect()`.
    public func goOnline() async { await reconnect() }

    /// Replaces the user's token (sent with every request from now on); sync resumes if it
    /// stopped on a refused one.
    public func setAuthToken(_ token: String?) async {
        self.token.value = token
        await engine.tokenReplaced()
    }

    /// The error that stopped sync, while the state is `.error`.
    public var lastError: AbrovaSyncError? { get async { await engine.lastError } }

    // MARK: Streams and callbacks

    /// The sync state now and at every change; any number may listen.
    public var syncStateChanges: AsyncStream<SyncState> { engine.syncStates.subscribe() }
    /// The number of writes waiting to be sent, now and at every change.
    public var pendingCountChanges: AsyncStream<Int> { pendingCounts.subscribe() }
    /// The connection state now and at every change.
    public var connectionStateChanges: AsyncStream<ConnectionState> { engine.connectionStates.subscribe() }
    /// Queued writes the server refused when they were sent, from the moment of subscribing.
    public var documentRejections: AsyncStream<DocumentRejection> { engine.rejections.subscribe() }
    /// Every conflict the server settled (or, under `manual`, left to the resolver), with the
    /// fields, both values and the outcome, from the moment of subscribing: what
    /// `SyncListener.onConflictDetected` hears, for any number of subscribers.
    public var conflicts: AsyncStream<ConflictInfo> { engine.conflicts.subscribe() }
    /// The progress of sync runs: after each batch sent and each page pulled.
    public var syncProgressChanges: AsyncStream<SyncProgress> { engine.progress.subscribe() }

    /// The sync state now.
    public var syncState: SyncState { engine.syncStates.latest ?? .idle }
    /// The number of writes waiting to be sent now.
    public var pendingCount: Int { get async { await store.unsentWriteCount } }

    /// Sets the one sync-state callback (a second call replaces the first).
    public func onSyncState(_ callback: @escaping @Sendable (SyncState) -> Void) async { await engine.setOnSyncState(callback) }
    /// Sets the one pending-count callback (a second call replaces the first).
    public func onPendingCount(_ callback: @escaping @Sendable (Int) -> Void) { onPendingCountCallback.value = callback }
    /// Sets the one rejection callback (a second call replaces the first).
    public func onDocumentRejected(_ callback: @escaping @Sendable (String, OperationType, AbrovaSyncError) -> Void) async {
        await engine.setOnDocumentRejected(callback)
    }

    /// Adds a listener (held weakly: keep a reference).
    public func addSyncListener(_ listener: any SyncEngine.SyncListener) async { await engine.addListener(listener) }
    /// Removes a listener.
    public func removeSyncListener(_ listener: any SyncEngine.SyncListener) async { await engine.removeListener(listener) }

    // MARK: The seed's table

    /// One app write: to the server first when it can be reached (after older queued writes), else
    /// saved on the device and queued. A refusal throws and leaves nothing queued or changed; so
    /// does a write that cannot reach the server when offline persistence is off.
    func write(_ key: DocumentKey,
               _ body: @Sendable (LocalStore) async throws -> (snapshot: DocumentSnapshot, receipt: WriteReceipt)) async throws(AbrovaSyncError) -> DocumentSnapshot {
        let online = await engine.isOnline
        if !online && !configuration.offlineEnabled {
            throw AbrovaSyncError(.unreachable, message: "the server cannot be reached and offline persistence is off")
        }
        do {
            let (local, receipt) = try await body(store)
            let batchFrom = receipt.batchFrom
            guard online else { return local }
            let run = await engine.sync()
            if let rejection = run.rejection(of: key, inBatchFrom: batchFrom) {
                throw AbrovaSyncError(.refused, statusCode: rejection.statusCode, message: rejection.message)
            }
            guard run.sent(key, inBatchFrom: batchFrom) else {
                // Without offline persistence the write fails and leaves nothing (its run put its
                // batch back unsent), unless another run has frozen it meanwhile.
                if !configuration.offlineEnabled, try await store.takeBack(receipt) {
                    let reason = await engine.lastError.map { ": \($0.message)" } ?? ""
                    throw AbrovaSyncError(.unreachable, message: "the write could not be sent and offline persistence is off; nothing was saved\(reason)")
                }
                return local  // queued: sent when the server is back
            }
            return try await store.document(key).withMetadata(SnapshotMetadata(hasPendingWrites: false, isFromCache: false))
        } catch {
            throw AbrovaSyncError.wrapping(error)
        }
    }

    /// One read, as the seed's table says for `source`.
    func read(_ key: DocumentKey, source: Source) async throws(AbrovaSyncError) -> DocumentSnapshot {
        do {
            let online = await engine.isOnline
            if source == .cache || (source == .default && !online) {
                guard configuration.offlineEnabled || source == .cache else {
                    throw AbrovaSyncError(.unreachable, message: "the server cannot be reached and offline persistence is off")
                }
                return try await store.document(key)
            }
            let document: ServerDocument?
            do {
                document = try await engine.transport.document(key)
            } catch {
                guard case .unreachable(let reason) = error else { throw AbrovaSyncError(error) }
                await engine.noteUnreachable()
                guard source == .default, configuration.offlineEnabled else {
                    throw AbrovaSyncError(.unreachable, message: "the server cannot be reached: \(reason)")
                }
                return try await store.document(key)
            }
            await engine.noteReachable()
            // The server's document joins the device's (pending local edits stay overlaid).
            if let document { try await store.applyPulledPage([(key: key, state: document.state)], cursor: nil) }
            let local = try await store.document(key)
            if document == nil && !local.metadata.hasPendingWrites {
                return DocumentSnapshot(key: key, data: nil, metadata: SnapshotMetadata(hasPendingWrites: false, isFromCache: false))
            }
            return local.withMetadata(SnapshotMetadata(hasPendingWrites: local.metadata.hasPendingWrites, isFromCache: false))
        } catch {
            throw AbrovaSyncError.wrapping(error)
        }
    }
}

/// Where a read comes from.
public enum Source: Sendable {
    /// The server when it can be reached (with the device's pending edits overlaid), else the
    /// device.
    case `default`
    /// The server only: fails when it cannot be reached.
    case server
    /// The device only.
    case cache
}
