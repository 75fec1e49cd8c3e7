import AbrovaCore
import Foundation

extension AbrovaSync {
    /// What a manual resolver is given: the document as this device wants it, the server's, and the
    /// fields in conflict.
    public struct ConflictInfo: Sendable {
        /// The document's id.
        public let documentId: String
        /// Its collection.
        public let collection: String
        /// The document as this device had it, for the manual resolver (`nil`: deleted on the device;
        /// also `nil` for conflicts the strategy settled, whose outcome is already applied).
        public let local: [String: Value]?
        /// The document on the server (`nil`: deleted or never there).
        public let server: [String: Value]?
        /// The fields in conflict, each with both values and how it was settled (`unresolved` under
        /// the manual strategy).
        public let conflicts: [Conflict]
    }
}

/// `AbrovaSync.ConflictInfo`, by its short name.
public typealias ConflictInfo = AbrovaSync.ConflictInfo

extension AbrovaSync {
    /// A manual resolver's decision. It is written on top of the server's document, as a new change.
    public enum ConflictResolution: Sendable, Equatable {
        /// Keep the server's document: the device's change is dropped.
        case useServer
        /// Write the device's document over the server's.
        case useLocal
        /// Write this document.
        case use([String: Value])
        /// Delete the document.
        case delete
    }
}

/// `AbrovaSync.ConflictResolution`, by its short name.
public typealias ConflictResolution = AbrovaSync.ConflictResolution

/// Makes a transport from the reader of the current token.
package typealias TransportMaker = @Sendable (_ token: @escaping @Sendable () -> String?) -> any SyncTransport

/// Decides conflicts under the manual strategy.
public typealias ConflictResolver = AbrovaSync.ConflictResolver

extension AbrovaSync {
    /// How long the SDK waits between attempts when the server cannot be reached: exponential
    /// backoff with full jitter, capped. Retries never stop.
    public struct RetryPolicy: Hashable, Sendable {
        /// The first delay.
        public var initialDelay: Duration
        /// The longest delay.
        public var maximumDelay: Duration

        /// A policy; by default 1 s doubling up to 60 s.
        public init(initialDelay: Duration = .seconds(1), maximumDelay: Duration = .seconds(60)) {
            self.initialDelay = initialDelay
            self.maximumDelay = maximumDelay
        }

        /// The delay before attempt `attempt` (1 for the first retry): a random point in
        /// [0, min(maximum, initial · 2^(attempt-1))] ("full jitter", so devices that failed together
        /// do not retry together), never less than a tenth of the initial delay.
        public func delay(attempt: Int, random: inout some RandomNumberGenerator) -> Duration {
            let cap = min(maximumDelay, initialDelay * Double(1 << min(max(attempt - 1, 0), 30)))
            let floor = initialDelay / 10
            return max(floor, cap * Double.random(in: 0...1, using: &random))
        }
    }
}

/// `AbrovaSync.RetryPolicy`, by its short name.
public typealias RetryPolicy = AbrovaSync.RetryPolicy

/// The clock the SDK waits on, injected so that tests move time instead of sleeping.
package protocol SyncClock: Sendable {
    /// Returns after `duration`, or throws `CancellationError` when the task is cancelled.
    func sleep(for duration: Duration) async throws
}

/// The real clock.
package struct ContinuousSyncClock: SyncClock {
    package init() {}
    package func sleep(for duration: Duration) async throws { try await Task.sleep(for: duration) }
}

/// The SDK's settings, made by `AbrovaSyncConfigBuilder`.
public struct AbrovaSyncConfig: Sendable {
    /// The API key, sent with every request.
    public let apiKey: String
    /// The sync server, e.g. `http://127.0.0.1:8080`.
    public let serverURL: URL
    /// Whether documents are kept on the device and writes queued while the server cannot be
    /// reached. Without it, such calls fail with `.unreachable`.
    public let offlineEnabled: Bool
    /// Whether queued writes are sent when the connection comes back (otherwise only on
    /// `forceSyncNow()`).
    public let syncOnReconnect: Bool
    /// The strategy of collections without one of their own.
    public let conflictStrategy: ConflictStrategy
    /// Strategies of single collections.
    public let collectionStrategies: [String: ConflictStrategy]
    /// Decides conflicts under `manual`.
    public let conflictResolver: ConflictResolver?
    /// Where the device store lives (a SQLite file).
    public let storePath: String
    /// The signed-in user, when the app names them: the default store is then theirs alone.
    public let userId: String?
    /// The user's token, sent as `Authorization: Bearer`; replaceable with
    /// `AbrovaSync.setAuthToken(_:)`.
    public let authToken: String?
    /// Reserved; not used by the SDK (the seed says so).
    public let offlineCacheSizeMb: Int?
    /// Deprecated; has no effect: queued writes are retried until they go through.
    public let maxSyncRetries: Int?
    /// Waits between attempts when the server cannot be reached.
    public let retryPolicy: RetryPolicy
    /// The clock those waits run on.
    package let clock: any SyncClock
    /// Makes how requests reach the server, given the current token's reader; `nil`: HTTP
    /// (`HTTPTransport`: URLSession on Apple platforms, libcurl on Linux). Tests put others here.
    package let makeTransport: TransportMaker?
    /// The most changes sent in one push.
    public let maximumBatchChanges: Int
    /// How long a request may take before the server counts as unreachable.
    public let requestTimeout: Duration
    /// Whether the SDK holds a watch on the server while a document or query listener is there,
    /// so that another device's change shows at once (else only at the next sync).
    public let liveUpdates: Bool

    /// Whether the app chose `storePath` (else it is the default of `userId`).
    var choseStorePath = false
    /// The collections the device keeps from the start, all or part of each (`nil`: every one
    /// the user may read); `AbrovaSync.setSyncScope(_:)` changes it while the app runs.
    public var syncScope: [String]? { scope?.collections }
    /// What the device keeps from the start (`nil`: everything the user may read).
    var scope: SyncScope?

    /// The store of a user other than the configured store's: beside a chosen path,
    /// `<name>~<user>.sqlite`; else the user's default store. The anonymous caller's is
    /// `~anonymous` (a user id never makes a name starting so).
    ///
    /// - Throws: `AbrovaSyncError` `.configuration` when the default folder cannot be made.
    func storePath(ofAnotherUser user: String?) throws(AbrovaSyncError) -> String {
        let name = user.map(AbrovaSyncConfigBuilder.fileName) ?? "~anonymous"
        guard choseStorePath else {
            return try AbrovaSyncConfigBuilder.defaultStoreFolder(apiKey: apiKey).appendingPathComponent(name + ".sqlite").path
        }
        let chosen = URL(fileURLWithPath: storePath)
        let stem = chosen.pathExtension.isEmpty ? chosen.lastPathComponent : chosen.deletingPathExtension().lastPathComponent
        return chosen.deletingLastPathComponent().appendingPathComponent(stem + "~" + name + ".sqlite").path
    }

    /// The strategy of `collection`.
    public func strategy(for collection: String) -> ConflictStrategy {
        collectionStrategies[collection] ?? conflictStrategy
    }
}

/// Builds an `AbrovaSyncConfig`, as in the seed:
///
///     let config = try AbrovaSyncConfigBuilder(apiKey: "YOUR_API_KEY")
///         .serverURL(URL(string: "https://sync.example.com")!)
///         .offlineEnabled(true)
///         .conflictStrategy(.merge)
///         .build()
public struct AbrovaSyncConfigBuilder: Sendable {
    private var apiKey: String
    private var serverURL = URL(string: "http://127.0.0.1:8080")!
    private var offlineEnabled = true
    private var syncOnReconnect = true
    private var conflictStrategy = ConflictStrategy.serverWins
    private var collectionStrategies: [String: ConflictStrategy] = [:]
    private var conflictResolver: ConflictResolver?
    private var storePath: String?
    private var userId: String?
    private var authToken: String?
    private var offlineCacheSizeMb: Int?
    private var maxSyncRetries: Int?
    private var retryPolicy = RetryPolicy()
    private var clock: any SyncClock = ContinuousSyncClock()
    private var makeTransport: TransportMaker?
    private var maximumBatchChanges = 500
    private var requestTimeout = Duration.seconds(30)
    private var liveUpdates = true
    private var syncScope: [SyncScopeQuery]?

    /// A builder with the defaults: offline persistence on, sync on reconnect, `serverWins`.
    public init(apiKey: String) { self.apiKey = apiKey }

    private func with(_ change: (inout AbrovaSyncConfigBuilder) -> Void) -> AbrovaSyncConfigBuilder {
        var copy = self
        change(&copy)
        return copy
    }

    /// The sync server's base URL.
    public func serverURL(_ url: URL) -> Self { with { $0.serverURL = url } }
    /// Keep documents on the device and queue writes while offline (default true).
    public func offlineEnabled(_ enabled: Bool) -> Self { with { $0.offlineEnabled = enabled } }
    /// Send queued writes when the connection comes back (default true).
    public func syncOnReconnect(_ enabled: Bool) -> Self { with { $0.syncOnReconnect = enabled } }
    /// The strategy of every collection without one of its own (default `serverWins`).
    public func conflictStrategy(_ strategy: ConflictStrategy) -> Self { with { $0.conflictStrategy = strategy } }
    /// The strategy of one collection.
    public func conflictStrategy(_ strategy: ConflictStrategy, for collection: String) -> Self {
        with { $0.collectionStrategies[collection] = strategy }
    }
    /// The resolver of the manual strategy (required when any collection uses it).
    public func conflictResolver(_ resolver: @escaping ConflictResolver) -> Self { with { $0.conflictResolver = resolver } }
    /// The device store's file (default: the app's and the user's own, see `userId(_:)`); give
    /// each instance of one app its own. Another user signed in with
    /// `AbrovaSync.setAuthToken(_:userId:)` gets `<name>~<user>.sqlite` beside it.
    public func storePath(_ path: String) -> Self { with { $0.storePath = path } }
    /// The user's token.
    public func authToken(_ token: String?) -> Self { with { $0.authToken = token } }
    /// Names the signed-in user, so that the default store (queue, cache, client id, cursor) is
    /// theirs alone: another user on the same device gets another store. Without it the default
    /// store is the app's, for one user.
    public func userId(_ id: String?) -> Self { with { $0.userId = id } }
    /// Reserved; not used by the SDKs.
    public func offlineCacheSizeMb(_ size: Int) -> Self { with { $0.offlineCacheSizeMb = size } }
    /// Deprecated: queued writes are retried until they go through.
    @available(*, deprecated, message: "Queued writes are retried until they go through; this setting has no effect.")
    public func maxSyncRetries(_ count: Int) -> Self { with { $0.maxSyncRetries = count } }
    /// The backoff between attempts while the server cannot be reached.
    public func retryPolicy(_ policy: RetryPolicy) -> Self { with { $0.retryPolicy = policy } }
    /// The clock of those waits (tests move a manual one).
    package func clock(_ clock: any SyncClock) -> Self { with { $0.clock = clock } }
    /// How requests reach the server (default: `HTTPTransport`), made from the reader of
    /// the current token (which `AbrovaSync.setAuthToken(_:)` replaces).
    package func transport(_ make: @escaping TransportMaker) -> Self { with { $0.makeTransport = make } }
    /// How long a request may take before the server counts as unreachable (default 30 s).
    public func requestTimeout(_ timeout: Duration) -> Self { with { $0.requestTimeout = timeout } }
    /// The most changes in one push (default 500, the server's limit is 1,000).
    public func maximumBatchChanges(_ count: Int) -> Self { with { $0.maximumBatchChanges = count } }
    /// Live updates (default true): while a document or query listener is there, the app is in
    /// the foreground and not disconnected, the SDK holds one long poll on the server
    /// (`GET /v1/watch`) and pulls as soon as it says something changed; the connection state is
    /// then `live`. Off, listeners hear of other devices' changes at the next sync only.
    ///
    ///     let config = try AbrovaSyncConfigBuilder(apiKey: "YOUR_API_KEY").liveUpdates(false).build()
    public func liveUpdates(_ enabled: Bool) -> Self { with { $0.liveUpdates = enabled } }
    /// Keeps only these collections on the device (partial sync): pulls, live updates and the
    /// initial sync bring only them, and documents of other collections leave the device (those
    /// with unsent writes once the writes are sent). Writes to any collection still go out. By
    /// default every collection the user may read; applied at every start.
    ///
    ///     let config = try AbrovaSyncConfigBuilder(apiKey: "YOUR_API_KEY").syncScope(collections: ["carts"]).build()
    public func syncScope(collections: [String]) -> Self { with { $0.syncScope = collections.map(SyncScopeQuery.init) } }

    /// Keeps only what these queries cover on the device (partial sync): as
    /// `syncScope(collections:)`, with equality filters on fields where a query has them. A
    /// document that stops matching leaves the device at the next pull.
    ///
    ///     let config = try AbrovaSyncConfigBuilder(apiKey: "YOUR_API_KEY")
    ///         .syncScope([SyncScopeQuery(collection: "carts").whereField("owner", isEqualTo: userId)])
    ///         .build()
    public func syncScope(_ queries: [SyncScopeQuery]) -> Self { with { $0.syncScope = queries } }

    /// The configuration.
    ///
    /// - Throws: `AbrovaSyncError` `.configuration` when the manual strategy has no resolver, or
    ///   a setting is out of range.
    public func build() throws(AbrovaSyncError) -> AbrovaSyncConfig {
        let usesManual = conflictStrategy == .manual || collectionStrategies.values.contains(.manual)
        if usesManual && conflictResolver == nil {
            throw AbrovaSyncError(.configuration, message: "the manual conflict strategy needs a conflictResolver")
        }
        guard !apiKey.isEmpty else { throw AbrovaSyncError(.configuration, message: "the API key is empty") }
        guard requestTimeout > .zero else { throw AbrovaSyncError(.configuration, message: "requestTimeout must be positive") }
        guard (1...1_000).contains(maximumBatchChanges) else {
            throw AbrovaSyncError(.configuration, message: "maximumBatchChanges must be 1 to 1,000")
        }
        let path: String
        if let storePath { path = storePath } else { path = try Self.defaultStorePath(apiKey: apiKey, userId: userId) }
        var config = AbrovaSyncConfig(
            apiKey: apiKey, serverURL: serverURL, offlineEnabled: offlineEnabled, syncOnReconnect: syncOnReconnect,
            conflictStrategy: conflictStrategy, collectionStrategies: collectionStrategies,
            conflictResolver: conflictResolver, storePath: path, userId: userId, authToken: authToken,
            offlineCacheSizeMb: offlineCacheSizeMb, maxSyncRetries: maxSyncRetries, retryPolicy: retryPolicy,
            clock: clock, makeTransport: makeTransport, maximumBatchChanges: maximumBatchChanges,
            requestTimeout: requestTimeout, liveUpdates: liveUpdates)
        config.choseStorePath = storePath != nil
        if let syncScope {
            do {
                config.scope = try SyncScopeQuery.scope(of: syncScope)
            } catch {
                throw AbrovaSyncError(.configuration, message: "syncScope: \(error.message)")
            }
        }
        return config
    }

    /// The store of this app (its API key) and this user: `AbrovaSync/<key>/<user>.sqlite` in
    /// Application Support on Apple platforms, in `$XDG_DATA_HOME` (else `~/.local/share`)
    /// elsewhere; the folders are made when missing.
    ///
    /// - Throws: `AbrovaSyncError` `.configuration` when the folder cannot be made.
    static func defaultStorePath(apiKey: String, userId: String?) throws(AbrovaSyncError) -> String {
        try defaultStoreFolder(apiKey: apiKey).appendingPathComponent(fileName(userId ?? "default") + ".sqlite").path
    }

    /// The folder of this app's default stores (see `defaultStorePath`), made when missing.
    ///
    /// - Throws: `AbrovaSyncError` `.configuration` when it cannot be made.
    static func defaultStoreFolder(apiKey: String) throws(AbrovaSyncError) -> URL {
        let base: URL
        #if canImport(Darwin)
            base =
                FileManager.default.urls(for: .applicationSupportDirectory, in: .userDomainMask).first
                ?? FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent("Library/Application Support")
        #else
            let data = ProcessInfo.processInfo.environment["XDG_DATA_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
            base =
                data.map { URL(fileURLWithPath: $0) }
                ?? FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".local/share")
        #endif
        let folder = base.appendingPathComponent("AbrovaSync").appendingPathComponent(fileName(apiKey))
        do {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        } catch {
            throw AbrovaSyncError(
                .configuration, message: "the store's folder \(folder.path) cannot be made: \(error.localizedDescription)")
        }
        return folder
    }

    /// `text` as a file name: letters, digits, `-` and `_` as they are, any other byte as `~XX`
    /// (so two names never share a file); a long one is cut, with a hash of the whole.
    static func fileName(_ text: String) -> String {
        var name = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "_"):
                name.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                name += "~" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        guard name.count > 160 else { return name.isEmpty ? "~" : name }
        // FNV-1a, 64 bits: names this long differ in what was cut.
        let hash = text.utf8.reduce(UInt64(0xcbf2_9ce4_8422_2325)) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 }
        return String(name.prefix(140)) + "~~" + String(hash, radix: 16)
    }
}

private extension String {
    func leftPadded(to width: Int) -> String { count >= width ? self : String(repeating: "0", count: width - count) + self }
}
