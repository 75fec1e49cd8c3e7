import Foundation

#if canImport(Network)
    import Network
#endif

/// What the platform says about the app and the network, turned into engine events: the app
/// coming to the foreground or going to the background (notifications the app framework posts),
/// and, where the Network
/// framework exists, the device's network path coming up or going away.
///
/// Unchecked because `NWPathMonitor` is: its handler and `cancel()` are safe from any thread.
final class PlatformSignals: @unchecked Sendable {
    /// The notification the app framework posts when the app comes back to the foreground.
    /// UIKit's and AppKit's names, spelled out so this file needs neither framework.
    /// The notification posted when the app goes to the background (on macOS, when it is hidden:
    /// a Mac app that is merely not frontmost still shows its windows).
    #if os(macOS)
        static let foregroundNotification = Notification.Name("NSApplicationWillBecomeActiveNotification")
        static let backgroundNotification = Notification.Name("NSApplicationDidHideNotification")
    #else
        static let foregroundNotification = Notification.Name("UIApplicationWillEnterForegroundNotification")
        static let backgroundNotification = Notification.Name("UIApplicationDidEnterBackgroundNotification")
    #endif

    private let foregroundObserver: ObserverToken
    private let backgroundObserver: ObserverToken
    #if canImport(Network)
        private let pathMonitor: NWPathMonitor
    #endif

    /// Signals for the engine `engine` gives (the instance's current one; `nil` once it is gone).
    init(engine: @escaping @Sendable () -> SyncRunner?, notificationCenter: NotificationCenter = .default) {
        let token = notificationCenter.addObserver(forName: Self.foregroundNotification, object: nil, queue: nil) { _ in
            guard let engine = engine() else { return }
            Task { await engine.cameToForeground() }
        }
        foregroundObserver = ObserverToken(token, center: notificationCenter)
        let background = notificationCenter.addObserver(forName: Self.backgroundNotification, object: nil, queue: nil) { _ in
            guard let engine = engine() else { return }
            Task { await engine.wentToBackground() }
        }
        backgroundObserver = ObserverToken(background, center: notificationCenter)
        #if canImport(Network)
            // Satisfied means some interface can route; the probe still decides whether the server
            // answers. The first update only reports the path as it is at start.
            pathMonitor = NWPathMonitor()
            pathMonitor.pathUpdateHandler = { path in
                guard let engine = engine() else { return }
                let available = path.status == .satisfied
                Task { await engine.networkChanged(available: available) }
            }
            pathMonitor.start(queue: DispatchQueue(label: "AbrovaSync.networkPath"))
        #endif
    }

    /// Stops listening.
    func cancel() {
        foregroundObserver.remove()
        backgroundObserver.remove()
        #if canImport(Network)
            pathMonitor.cancel()
        #endif
    }
}

/// A notification observer's token, removed once. The token is an opaque object the center
/// hands back; only `remove()` uses it, under the lock.
private final class ObserverToken: @unchecked Sendable {
    private let lock = NSLock()
    private var token: (any NSObjectProtocol)?
    private let center: NotificationCenter

    init(_ token: any NSObjectProtocol, center: NotificationCenter) {
        self.token = token
        self.center = center
    }

    func remove() {
        lock.lock()
        defer { lock.unlock() }
        if let token { center.removeObserver(token) }
        token = nil
    }
}
