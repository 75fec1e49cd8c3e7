import Foundation

/// A fresh folder for one test, removed when the value is released (kept when the environment sets
/// `ABROVA_KEEP_TEST_FOLDERS`, so that a failing run's stores and logs can be read afterwards).
public final class TemporaryFolder: Sendable {
    /// Where the folder is.
    public let url: URL

    /// Makes a new, empty folder under the system's temporary directory.
    public init() {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("abrova-\(UUID().uuidString)")
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit {
        guard ProcessInfo.processInfo.environment["ABROVA_KEEP_TEST_FOLDERS"] == nil else { return }
        try? FileManager.default.removeItem(at: url)
    }

    /// The path of `name` inside the folder.
    public func path(_ name: String) -> String { url.appendingPathComponent(name).path }
}
