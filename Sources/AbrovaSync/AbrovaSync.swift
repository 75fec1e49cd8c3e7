import AbrovaCore
import AbrovaLocking
import AbrovaStore
import AbrovaWire
import Foundation

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
    /// The current user's store and engine; replaced when the instance switches users.
    private let current: Guarded<UserSession>
    /// Every session the instance moves to, and `nil` when it closes: what streams that follow
    /// the current store wait on.
    private let sessions: Broadcaster<UserSession?>
    /// Switches run one after another.
    private let switches = Guarded<Task<Result<Void, AbrovaSyncError>, Never>?>(nil)
    /// The user of the store at `configuration.storePath`, once known: switching back to them
    /// opens that file again.
    private let configuredOwner = Guarded<String??>(nil)
    /// What the instance tells the app (streams, callbacks, listeners), kept across users.
    let events = SyncEvents()
    /// This instance, weakly, for the engines it makes (set once it is initialized).
    private let reference = Guarded(InstanceReference())
    private let transport: any SyncTransport
    private let token: Guarded<String?>
    private let pendingCounter: Task<Void, Never>
    /// The foreground and the network path, as engine events.
    private let platformSignals: PlatformSignals

    /// The current user's device store.
    var store: LocalStore { current.value.store }
    /// The engine that syncs it.
    var engine: SyncRunner { current.value.engine }

    private static let sharedInstance = Protected<AbrovaSync?>(nil)

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

    /// An independent instance on its own store: the configured user's (`userId(_:)`), else the
    /// one at the configured path. It starts a sync at once (sending writes queued in an earlier
    /// session, pulling what changed).
    ///
    /// - Throws: `AbrovaSyncError` `.storage` when the device store cannot be opened.
    public init(config: AbrovaSyncConfig) throws(AbrovaSyncError) {
        configuration = config
        let token = Guarded(config.authToken)
        self.token = token
        let readToken: @Sendable () -> String? = { token.value }
        transport =
            config.makeTransport?(readToken)
            ?? HTTPTransport(serverURL: config.serverURL, apiKey: config.apiKey, token: readToken, timeout: config.requestTimeout)
        // A configured user is named; without one the store's user is whoever it belongs to.
        let named: String?? = config.userId.map { .some($0) } ?? nil
        let store = try Self.openStore(for: named, configuration: config, configuredOwner: configuredOwner)
        let first = UserSession(store: store, engine: Self.makeEngine(store, transport, config, events, instance: reference))
        current = Guarded(first)
        sessions = Broadcaster(initial: first)
        // The pending count follows the current store's count of unsent writes, live and exact.
        pendingCounter = Task { [current, sessions, events] in
            for await count in await Self.following(current, sessions, { await $0.unsentWriteCounts() }) {
                events.emit(.pendingCount(count))
            }
        }
        platformSignals = PlatformSignals { [weak current] in current?.value.engine }
        reference.value = InstanceReference(value: self)
        let engine = first.engine
        Task { await engine.start() }
    }

    deinit {
        pendingCounter.cancel()
        platformSignals.cancel()
    }

    /// The store of `user` (`nil`: as configured, without a named user): the configured file
    /// when it is theirs or has no user yet (it takes them), else their own file beside it.
    private static func openStore(
        for user: String??, configuration: AbrovaSyncConfig,
        configuredOwner: Guarded<String??>
    ) throws(AbrovaSyncError) -> LocalStore {
        do {
            if configuredOwner.value == nil || user == nil || configuredOwner.value == user {
                let store = try LocalStore(path: configuration.storePath, claimingFor: user)
                if store.ownerAtOpen != nil { configuredOwner.value = store.ownerAtOpen }
                guard let user, store.ownerAtOpen != user else { return store }
                // Another user's: closed when released, before the user's own opens.
            }
            guard let user else { throw AbrovaSyncError(.storage, message: "no store for an unnamed user") }
            let store = try LocalStore(path: try configuration.storePath(ofAnotherUser: user), claimingFor: user)
            guard store.ownerAtOpen == user else {
                throw AbrovaSyncError(.storage, message: "the store of \(user ?? "the anonymous user") belongs to another user")
            }
            return store
        } catch {
            throw AbrovaSyncError.wrapping(error)
        }
    }

    private static func makeEngine(
        _ store: LocalStore, _ transport: any SyncTransport, _ configuration: AbrovaSyncConfig,
        _ events: SyncEvents, instance: Guarded<InstanceReference>
    ) -> SyncRunner {
        SyncRunner(
            store: store, transport: transport, configuration: configuration, events: events,
            tokenOfAnotherUser: { user in try? await instance.value.value?.switchUser(to: user) })
    }

    /// A stream that follows the current store: `subscribe` makes one on a store, and when that
    /// store closes because the instance moved to another user's, the stream goes on with the new
    /// store's. It ends when the instance closes. The first store is subscribed to before it
    /// returns, so that nothing written after the call is missed.
    static func following<Element: Sendable>(
        _ current: Guarded<UserSession>, _ sessions: Broadcaster<UserSession?>,
        _ subscribe: @escaping @Sendable (LocalStore) async -> AsyncStream<Element>
    ) async -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self)
        let first = current.value.store
        let firstStream = await subscribe(first)
        let task = Task {
            var (store, elements) = (first, firstStream)
            while !Task.isCancelled {
                for await element in elements { continuation.yield(element) }
                guard let next = await nextStore(after: store, sessions) else { break }
                (store, elements) = (next, await subscribe(next))
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    /// The store of the session after the one on `store`; `nil` when the instance closed.
    private static func nextStore(after store: LocalStore, _ sessions: Broadcaster<UserSession?>) async -> LocalStore? {
        for await session in sessions.subscribe() {
            guard let session else { return nil }
            if session.store !== store { return session.store }
        }
        return nil
    }

    /// A stream following the current store (see `following`).
    func followingStore<Element: Sendable>(_ subscribe: @escaping @Sendable (LocalStore) async -> AsyncStream<Element>) async
        -> AsyncStream<Element>
    {
        await Self.following(current, sessions, subscribe)
    }

    /// Stops syncing, ends the streams and closes the device store's file (it stays on disk; a
    /// new instance may open it). The instance cannot be used after.
    public func close() async {
        _ = await switches.value?.value
        platformSignals.cancel()
        let session = current.value
        sessions.send(nil)
        await session.engine.close()
        pendingCounter.cancel()
        events.finish()
        await session.store.close()
    }

    // MARK: Users

    /// Moves the instance to `user`'s own store (queue, cache, client id, cursor), unless it is on
    /// it, and puts `newToken` in place (`nil`: keeps the token): the current engine stops (a run
    /// in progress ends first, with the old token), the store closes, and the new user's store
    /// opens and syncs. Streams and listeners go on with the new store. A store that has no user
    /// yet takes `user` instead.
    private func switchUser(to user: String?, token newToken: String?? = nil) async throws(AbrovaSyncError) {
        let task = switches.update { chain -> Task<Result<Void, AbrovaSyncError>, Never> in
            let previous = chain
            let next = Task { [weak self] () -> Result<Void, AbrovaSyncError> in
                _ = await previous?.value
                guard let self else { return .success(()) }
                do throws(AbrovaSyncError) {
                    try await self.performSwitch(to: user, token: newToken)
                    return .success(())
                } catch {
                    return .failure(error)
                }
            }
            chain = next
            return next
        }
        try await task.value.get()
    }

    private func performSwitch(to user: String?, token newToken: String??) async throws(AbrovaSyncError) {
        let old = current.value
        let token = self.token
        let owner: String??
        do {
            owner = try await old.store.owner()
            if owner == nil {
                try await old.store.adoptOwner(user)
                if old.store.path == configuration.storePath { configuredOwner.value = .some(user) }
            }
        } catch {
            throw AbrovaSyncError.wrapping(error)
        }
        guard owner != nil, owner != .some(user) else {
            if let newToken { await old.engine.replaceToken { token.value = newToken } }
            return
        }
        if old.store.path == configuration.storePath { configuredOwner.value = owner }
        let store = try Self.openStore(for: .some(user), configuration: configuration, configuredOwner: configuredOwner)
        let session = UserSession(store: store, engine: Self.makeEngine(store, transport, configuration, events, instance: reference))
        // The old engine's last requests go out with the old token; the new engine's first with
        // the new one.
        await old.engine.close()
        if let newToken { token.value = newToken }
        current.value = session
        sessions.send(session)
        await old.store.close()
        let engine = session.engine
        Task { await engine.start() }
    }

    // MARK: Data

    /// A collection of documents.
    public func collection(_ name: String) -> CollectionReference { CollectionReference(name: name, sync: self) }

    // MARK: Sync

    /// Sends queued writes and pulls what changed now, without waiting (the seed's call, which
    /// compiles without `await` in async code too); `syncNow()` is the same run, awaited.
    public func forceSyncNow() {
        let engine = engine
        Task { await engine.sync() }
    }

    /// Sends queued writes and pulls what changed now, sharing a run that is starting; returns
    /// when it is done (or the server cannot be reached).
    public func syncNow() async {
        await engine.sync()
        await events.delivered()
    }

    /// Changes the collections the device keeps whole (`nil`: all the user may read), as
    /// `setSyncScope(_:)`.
    ///
    /// - Throws: `AbrovaSyncError` `.refused` (`invalid`) for a name that is no collection's, or
    ///   none or more than 100 of them; `.storage` when the store fails.
    public func setSyncScope(collections: [String]?) async throws(AbrovaSyncError) {
        try await setSyncScope(collections.map { $0.map(SyncScopeQuery.init) })
    }

    /// Changes what the device keeps (`nil`: all the user may read), until the next start (which
    /// applies the configured `syncScope`). Documents it no longer covers go at once (those with
    /// unsent writes once the writes are sent); what it adds is pulled whole by the sync this
    /// starts.
    ///
    ///     try await sync.setSyncScope([SyncScopeQuery(collection: "carts").whereField("owner", isEqualTo: userId)])
    ///
    /// - Throws: `AbrovaSyncError` `.refused` (`invalid`) for a scope that cannot be (see
    ///   `SyncScopeQuery`; 1 to 100 queries); `.storage` when the store fails.
    public func setSyncScope(_ queries: [SyncScopeQuery]?) async throws(AbrovaSyncError) {
        var scope: SyncScope?
        if let queries {
            do {
                scope = try SyncScopeQuery.scope(of: queries)
            } catch {
                throw AbrovaSyncError(.refused, reason: .invalid, message: error.message)
            }
        }
        await engine.applyConfiguredScope() // first, so that it never comes after this
        do {
            guard try await store.setSyncScope(scope) else { return }
        } catch {
            throw AbrovaSyncError.wrapping(error)
        }
        forceSyncNow()
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

    /// Replaces the token (sent with every request from now on); sync resumes if it stopped on a
    /// refused one. Before this store's queue goes out under it, the server says whose it is:
    /// another user's token moves the instance to that user's store, as
    /// `setAuthToken(_:userId:)` does at once.
    public func setAuthToken(_ token: String?) async {
        let current = self.token
        await engine.replaceToken { current.value = token }
    }

    /// Signs another user in (or the same one with a new token): the instance moves to `userId`'s
    /// own store (queue, cache, client id, cursor) before the call returns, so the previous
    /// user's documents are never shown and their queue is never sent under this token; it
    /// stays on the device and goes out when they sign in again. `nil` is the anonymous caller.
    ///
    /// - Throws: `AbrovaSyncError` `.storage` when the user's store cannot be opened (the
    ///   instance stays as it was, with the old token).
    public func setAuthToken(_ token: String?, userId: String?) async throws(AbrovaSyncError) {
        try await switchUser(to: userId, token: .some(token))
    }

    /// The error that stopped sync, while the state is `.error`.
    public var lastError: AbrovaSyncError? { get async { await engine.lastError } }

    /// The number of writes the server does not have yet: those waiting to be sent, and one for
    /// each conflict the manual resolver is deciding (its resolution is still to be sent).
    public var pendingCount: Int { get async { await store.unsentWriteCount } }

    // MARK: The seed's table

    /// One app write: to the server first when it can be reached (after older queued writes, and
    /// without waiting for the pulls of the run that sends it), and saved there as written (`body` is told whether the server answers); else saved on the
    /// device and queued, to be settled by the collection's strategy. A refusal throws and leaves
    /// nothing queued or changed; so does a write that cannot reach the server when offline
    /// persistence is off. The snapshot of a write the server saved lists the conflicts it settled.
    func write(
        _ key: DocumentKey,
        _ body: @Sendable (LocalStore, Bool) async throws -> (snapshot: DocumentSnapshot, receipt: WriteReceipt)
    ) async throws(AbrovaSyncError) -> DocumentSnapshot {
        let online = await engine.isOnline
        if !online && !configuration.offlineEnabled {
            throw AbrovaSyncError(.unreachable, message: "the server cannot be reached and offline persistence is off")
        }
        do {
            let (local, receipt) = try await body(store, online)
            guard online else { return local }
            let run = await engine.syncForWrite()
            let conflicts: [Conflict]
            switch run.answer(to: receipt, of: key) {
            case .rejected(let reason, let message)?:
                throw AbrovaSyncError(.refused, reason: reason, message: message)
            case .applied(_, _, let settled)?, .unresolved(_, let settled)?:
                conflicts = settled // the write's own change's
            case nil:
                // Without offline persistence the write fails and leaves nothing (its run put its
                // batch back unsent), unless another run has frozen it meanwhile.
                if !configuration.offlineEnabled, try await store.takeBack(receipt) {
                    let reason = await engine.lastError.map { ": \($0.message)" } ?? ""
                    throw AbrovaSyncError(
                        .unreachable, message: "the write could not be sent and offline persistence is off; nothing was saved\(reason)")
                }
                return local // queued: sent when the server is back
            }
            return try await store.document(key).withMetadata(
                SnapshotMetadata(hasPendingWrites: false, isFromCache: false, conflicts: conflicts))
        } catch {
            throw AbrovaSyncError.wrapping(error)
        }
    }

    /// An atomic group of writes (`WriteBatch.commit()`), as `write` says for one: to the server
    /// first when it can be reached, else queued whole. Throws the refusal of the write at fault.
    func writeGroup(_ writes: [(operation: WriteOperation, key: DocumentKey)]) async throws(AbrovaSyncError) {
        let online = await engine.isOnline
        if !online && !configuration.offlineEnabled {
            throw AbrovaSyncError(.unreachable, message: "the server cannot be reached and offline persistence is off")
        }
        do {
            let saved = try await store.writeGroup(writes, asWritten: online)
            guard online else { return }
            let run = await engine.syncForWrite()
            let answers = zip(saved, writes).map { saved, write in run.answer(to: saved.receipt, of: write.key) }
            guard answers.allSatisfy({ $0 != nil }) else {
                // Not sent: queued, unless offline persistence is off (then nothing stays).
                guard !configuration.offlineEnabled else { return }
                for (receipt, _) in zip(saved.map(\.receipt), writes).reversed() { _ = try await store.takeBack(receipt) }
                let reason = await engine.lastError.map { ": \($0.message)" } ?? ""
                throw AbrovaSyncError(
                    .unreachable, message: "the batch could not be sent and offline persistence is off; nothing was saved\(reason)")
            }
            let refusals: [(Refusal.Reason, String)] = answers.compactMap { answer in
                if case .rejected(let reason, let message)? = answer { (reason, message) } else { nil }
            }
            // The write at fault's refusal, not the others' "with its group".
            if let (reason, message) = refusals.first(where: { $0.0 != .groupFailed }) ?? refusals.first {
                throw AbrovaSyncError(.refused, reason: reason, message: message)
            }
        } catch {
            throw AbrovaSyncError.wrapping(error)
        }
    }

    /// A query's documents, as the seed's table says for `source`: the server's changes are pulled
    /// first (a run: queued writes go too), then the device answers with its pending edits
    /// overlaid; from the device alone when the source is `.cache`, or `.default` offline.
    func documents(matching query: DocumentQuery, source: Source) async throws(AbrovaSyncError) -> [DocumentSnapshot] {
        do {
            let online = await engine.isOnline
            if source == .cache || (source == .default && !online) {
                guard configuration.offlineEnabled || source == .cache else {
                    throw AbrovaSyncError(.unreachable, message: "the server cannot be reached and offline persistence is off")
                }
                return try await store.documents(matching: query)
            }
            let run = await engine.sync()
            guard run.outcome == .completed else {
                guard source == .default, configuration.offlineEnabled else {
                    // The run's own error when it has one (a refused token is not the network).
                    if run.outcome != .unreachable, let error = await engine.lastError { throw error }
                    let reason = await engine.lastError.map { ": \($0.message)" } ?? ""
                    throw AbrovaSyncError(.unreachable, message: "the server's documents could not be pulled\(reason)")
                }
                return try await store.documents(matching: query)
            }
            return try await store.documents(matching: query).map { snapshot in
                snapshot.withMetadata(
                    SnapshotMetadata(hasPendingWrites: snapshot.metadata.hasPendingWrites, isFromCache: false))
            }
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

/// The instance, held weakly by the engines it makes (which it holds).
struct InstanceReference: Sendable {
    weak var value: AbrovaSync?
}

/// One user's part of an instance: their device store and the engine that syncs it.
final class UserSession: Sendable {
    let store: LocalStore
    let engine: SyncRunner

    init(store: LocalStore, engine: SyncRunner) {
        self.store = store
        self.engine = engine
    }
}

extension AbrovaSync {
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
}

/// `AbrovaSync.Source`, by its short name.
public typealias Source = AbrovaSync.Source
