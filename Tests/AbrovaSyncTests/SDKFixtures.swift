import AbrovaCore
import AbrovaServer
import AbrovaSync
import AbrovaTestSupport
import AbrovaWire
import Foundation

/// A transport over real HTTP that a test can cut, as if the network went away: while cut, every
/// request fails as unreachable without leaving the device.
final class CuttableTransport: SyncTransport {
    let inner: HTTPTransport
    private let cut = SharedFlag()
    private let pushes = SharedCounter()

    init(_ inner: HTTPTransport, isCut: Bool = false) {
        self.inner = inner
        cut.value = isCut
    }

    /// Whether the network is gone.
    var isCut: Bool {
        get { cut.value }
        set { cut.value = newValue }
    }

    /// How many pushes reached the server.
    var pushCount: Int { pushes.value }

    /// Whether the server's limits are passed on (else the SDK cuts batches by its defaults, as
    /// against a server that announces none).
    var announcesLimits: Bool {
        get { !hidesLimits.value }
        set { hidesLimits.value = !newValue }
    }
    private let hidesLimits = SharedFlag()

    func push(body: [UInt8], pullCursor: String?) async throws(TransportFailure) -> PushResponse {
        if isCut { throw .unreachable("the test cut the network") }
        pushes.increment()
        return try await inner.push(body: body, pullCursor: pullCursor)
    }

    func pull(cursor: String?, limit: Int, scope: SyncScope?) async throws(TransportFailure) -> PullResponse {
        if isCut { throw .unreachable("the test cut the network") }
        return try await inner.pull(cursor: cursor, limit: limit, scope: scope)
    }

    func document(_ key: DocumentKey) async throws(TransportFailure) -> ServerDocument? {
        if isCut { throw .unreachable("the test cut the network") }
        return try await inner.document(key)
    }

    func isReachable() async -> Bool {
        if isCut { return false }
        return await inner.isReachable()
    }

    func serverLimits() async throws(TransportFailure) -> ServerLimits? {
        if isCut { throw .unreachable("the test cut the network") }
        return announcesLimits ? try await inner.serverLimits() : nil
    }

    func sessionUser() async throws(TransportFailure) -> String?? {
        if isCut { throw .unreachable("the test cut the network") }
        return try await inner.sessionUser()
    }
}

/// Ana's instance on `live`, stored at `path`, sending batches of one change whose pushes each take
/// `pushDelay`: a run is still sending its queue while the test acts. Closed when `live` stops.
func slowPushingInstance(_ live: LiveSyncServer, storePath path: String, pushDelay: Duration) throws -> AbrovaSync {
    let sync = try AbrovaSync(
        config: try AbrovaSyncConfigBuilder(apiKey: LiveSyncServer.apiKey)
            .serverURL(live.url)
            .storePath(path)
            .authToken(LiveSyncServer.token(of: "ana"))
            .maximumBatchChanges(1)
            .transport { token in SlowTransport(live.makeTransport(as: nil, token: token), pushDelay: pushDelay) }
            .build())
    live.onStop { await sync.close() }
    return sync
}

/// A transport over real HTTP whose pushes and pulls take longer: a run is still going while the
/// test acts.
final class SlowTransport: SyncTransport {
    let inner: HTTPTransport
    let pushDelay: Duration
    let pullDelay: Duration

    init(_ inner: HTTPTransport, pushDelay: Duration = .zero, pullDelay: Duration = .zero) {
        self.inner = inner
        self.pushDelay = pushDelay
        self.pullDelay = pullDelay
    }

    func push(body: [UInt8], pullCursor: String?) async throws(TransportFailure) -> PushResponse {
        try? await Task.sleep(for: pushDelay)
        return try await inner.push(body: body, pullCursor: pullCursor)
    }

    func pull(cursor: String?, limit: Int, scope: SyncScope?) async throws(TransportFailure) -> PullResponse {
        try? await Task.sleep(for: pullDelay)
        return try await inner.pull(cursor: cursor, limit: limit, scope: scope)
    }

    func document(_ key: DocumentKey) async throws(TransportFailure) -> ServerDocument? { try await inner.document(key) }

    func isReachable() async -> Bool { await inner.isReachable() }

    func sessionUser() async throws(TransportFailure) -> String?? { try await inner.sessionUser() }
}

/// A transport that counts the pulls it has begun and ended, each pull taking `pullDelay`.
final class PullCountingTransport: SyncTransport {
    let inner: SlowTransport
    let begun = SharedCounter()
    let ended = SharedCounter()

    init(_ inner: SlowTransport) { self.inner = inner }

    func push(body: [UInt8], pullCursor: String?) async throws(TransportFailure) -> PushResponse {
        try await inner.push(body: body, pullCursor: pullCursor)
    }

    func pull(cursor: String?, limit: Int, scope: SyncScope?) async throws(TransportFailure) -> PullResponse {
        begun.increment()
        defer { ended.increment() }
        return try await inner.pull(cursor: cursor, limit: limit, scope: scope)
    }

    func document(_ key: DocumentKey) async throws(TransportFailure) -> ServerDocument? { try await inner.document(key) }

    func isReachable() async -> Bool { await inner.isReachable() }

    func sessionUser() async throws(TransportFailure) -> String?? { try await inner.sessionUser() }
}

final class SharedFlag: Sendable {
    private let storage = Locked(false)
    var value: Bool {
        get { storage.value }
        set { storage.update { $0 = newValue } }
    }
}

final class SharedCounter: Sendable {
    private let storage = Locked(0)
    var value: Int { storage.value }
    func increment() { storage.update { $0 += 1 } }
}

/// Rules whose write access a test changes at run time ("the rules changed meanwhile").
final class SwitchableRules: SecurityRules {
    private let refusing = SharedFlag()

    /// Whether writes are refused (403).
    var refusesWrites: Bool {
        get { refusing.value }
        set { refusing.value = newValue }
    }

    func allowsRead(_ document: StoredDocument, by caller: Caller) -> Bool { caller.userID != nil }
    func allowsWrite(before: StoredDocument?, after: StoredDocument, by caller: Caller) -> Bool { !refusesWrites && caller.userID != nil }
    func validate(_ document: StoredDocument) throws(Refusal) {
        if document.state.document?.mapValue?["invalid"] != nil {
            throw Refusal.invalid("field invalid is not allowed")
        }
    }
}

/// One device: an SDK instance on its own store, against a live server, over a transport the test
/// can cut.
struct Device {
    let sync: AbrovaSync
    let transport: CuttableTransport

    init(
        _ live: LiveSyncServer, user: String = "ana", folder: TemporaryFolder, name: String = "device", startsOffline: Bool = false,
        configure: (AbrovaSyncConfigBuilder) -> AbrovaSyncConfigBuilder = { $0 }
    ) throws {
        let made = Locked<CuttableTransport?>(nil)
        let builder = AbrovaSyncConfigBuilder(apiKey: LiveSyncServer.apiKey)
            .serverURL(live.url)
            .storePath(folder.path("\(name).sqlite"))
            .authToken(LiveSyncServer.token(of: user))
            .retryPolicy(RetryPolicy(initialDelay: .milliseconds(20), maximumDelay: .milliseconds(100)))
            .transport { token in
                let transport = CuttableTransport(live.makeTransport(as: nil, token: token), isCut: startsOffline)
                made.update { $0 = transport }
                return transport
            }
        sync = try AbrovaSync(config: try configure(builder).build())
        guard let transport = made.value else { throw AbrovaSyncError(.configuration, message: "no transport was made") }
        self.transport = transport
        // A device left running would probe the stopped server until the process ends.
        let sync = sync
        live.onStop { await sync.close() }
    }

    var carts: CollectionReference { sync.collection("carts") }
}

/// Waits (without blocking a thread) until `condition` holds, for at most `seconds`.
func eventually(_ seconds: Double = 10, _ condition: @Sendable () async -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1_000))
    while ContinuousClock.now < deadline {
        if await condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return await condition()
}

/// An instance as an app makes it, with the SDK's own transport straight to `url` (no test
/// wrapper, so it watches for live updates), signed in as `user`.
func appDevice(_ url: URL, user: String, storePath: String) throws -> AbrovaSync {
    try AbrovaSync(
        config: AbrovaSyncConfigBuilder(apiKey: LiveSyncServer.apiKey)
            .serverURL(url)
            .storePath(storePath)
            .authToken(LiveSyncServer.token(of: user))
            .retryPolicy(RetryPolicy(initialDelay: .milliseconds(20), maximumDelay: .milliseconds(200)))
            .build())
}

/// What a query listener has shown, newest last.
final class ShownSnapshots: Sendable {
    private let snapshots = Locked<[[DocumentSnapshot]]>([])
    func record(_ documents: [DocumentSnapshot]) { snapshots.update { $0.append(documents) } }
    var all: [[DocumentSnapshot]] { snapshots.value }
    /// The documents of the last snapshot that exist, by id.
    var latest: [String: Value] {
        Dictionary(uniqueKeysWithValues: (all.last ?? []).compactMap { snapshot in snapshot.data.map { (snapshot.key.id, $0) } })
    }
}

extension SyncTransport {
    /// A push as a device that never pulled sends it.
    func push(body: [UInt8]) async throws(TransportFailure) -> PushResponse { try await push(body: body, pullCursor: nil) }
}
