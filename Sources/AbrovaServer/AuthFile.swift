import AbrovaCore
import AbrovaLocking
import AbrovaWire
import Foundation

/// The credentials of an auth configuration file (`ConfiguredAuthenticator`), read again when the
/// file changes: a token taken out of it stops working within `checkInterval`, without a restart.
///
/// A request looks at the file's identity (`FileStamp`: device, inode, size, modification and status
/// times) at most once a `checkInterval`, and reads the file again when it differs; `reload()` reads it at once (the
/// server calls it on SIGHUP). A file that cannot be read or is malformed keeps the credentials in
/// force, and is logged: an editor's half-written save must not lock every user out, nor let
/// anyone in.
public final class AuthFile: Authenticator {
    private struct Loaded {
        var authenticator: ConfiguredAuthenticator
        /// The stamp of the file the credentials came from.
        var stamp: FileStamp?
        /// The stamp of the last version that could not be read, so that it is logged once: it is
        /// tried again at every check until a version reads (a permission fixed changes no stamp
        /// of its content).
        var failedStamp: FileStamp??
        var checkedAt: Date
    }

    public let path: String
    private let checkInterval: TimeInterval
    private let clock: @Sendable () -> Date
    private let log: @Sendable (String) -> Void
    private let loaded: Protected<Loaded>

    /// Reads the file.
    ///
    /// - Throws: `Refusal` `.invalid` when the file cannot be read or is malformed.
    public init(
        path: String, checkInterval: TimeInterval = 1, clock: @escaping @Sendable () -> Date = Date.init,
        log: @escaping @Sendable (String) -> Void = { _ in }
    ) throws(Refusal) {
        self.path = path
        self.checkInterval = checkInterval
        self.clock = clock
        self.log = log
        let stamp = FileStamp(path: path)
        let authenticator = try Self.read(path, clock: clock)
        loaded = Protected(Loaded(authenticator: authenticator, stamp: stamp, failedStamp: nil, checkedAt: clock()))
    }

    /// Reads the file again now. Returns whether its credentials are now in force; on failure the
    /// earlier ones stay, and the reason is logged.
    @discardableResult
    public func reload() -> Bool {
        let stamp = FileStamp(path: path)
        do {
            let authenticator = try Self.read(path, clock: clock)
            loaded.withLock { $0 = Loaded(authenticator: authenticator, stamp: stamp, failedStamp: nil, checkedAt: clock()) }
            log("auth: read \(path) again (\(authenticator.apiKeys.count) API keys, \(authenticator.grants.count) tokens)")
            return true
        } catch {
            let isNew = loaded.withLock { loaded in
                defer { loaded.failedStamp = .some(stamp) }
                return loaded.failedStamp != .some(stamp)
            }
            if isNew { log("auth: \(path) not read again, the credentials before stay in force: \(error.message)") }
            return false
        }
    }

    public func authenticate(apiKey: String?, bearerToken: String?) throws(Refusal) -> Caller {
        try current().authenticate(apiKey: apiKey, bearerToken: bearerToken)
    }

    /// The credentials in force, after reading the file again if it changed since it was last looked at.
    private func current() -> ConfiguredAuthenticator {
        let now = clock()
        let (authenticator, isDue, stamp) = loaded.withLock { loaded in
            let isDue = now.timeIntervalSince(loaded.checkedAt) >= checkInterval
            if isDue { loaded.checkedAt = now }
            return (loaded.authenticator, isDue, loaded.stamp)
        }
        guard isDue, FileStamp(path: path) != stamp else { return authenticator }
        reload()
        return loaded.withLock { $0.authenticator }
    }

    private static func read(_ path: String, clock: @escaping @Sendable () -> Date) throws(Refusal) -> ConfiguredAuthenticator {
        guard let data = FileManager.default.contents(atPath: path) else { throw Refusal.invalid("cannot read \(path)") }
        return try ConfiguredAuthenticator(json: data, clock: clock)
    }
}

/// What tells one version of a file from the next without reading it: an editor that writes in
/// place changes the size or the time, one that saves by renaming changes the inode, and a change
/// of owner or mode the status time.
struct FileStamp: Hashable, Sendable {
    var device: UInt64
    var inode: UInt64
    var size: Int64
    var modifiedSeconds: Int
    var modifiedNanoseconds: Int
    var changedSeconds: Int
    var changedNanoseconds: Int

    /// The file's stamp, `nil` when it cannot be looked at.
    init?(path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
        size = Int64(info.st_size)
        #if canImport(Darwin)
            modifiedSeconds = info.st_mtimespec.tv_sec
            modifiedNanoseconds = info.st_mtimespec.tv_nsec
            changedSeconds = info.st_ctimespec.tv_sec
            changedNanoseconds = info.st_ctimespec.tv_nsec
        #else
            modifiedSeconds = info.st_mtim.tv_sec
            modifiedNanoseconds = info.st_mtim.tv_nsec
            changedSeconds = info.st_ctim.tv_sec
            changedNanoseconds = info.st_ctim.tv_nsec
        #endif
    }
}
