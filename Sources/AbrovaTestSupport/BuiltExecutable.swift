import Foundation

/// The package's executables, for tests that run one as a process of its own (a server, a writer
/// that is killed). `swift build` puts them beside the test bundle; a test run from elsewhere
/// finds them under the package's `.build/debug`.
public enum BuiltExecutable {
    /// The executable named `name` (the product's name, such as `abrova`), or nil when it is not built.
    public static func url(named name: String) -> URL? {
        let candidates = [
            URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent(),
            // Sources/AbrovaTestSupport/BuiltExecutable.swift → the package's root.
            URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent(".build/debug"),
        ]
        return candidates.map { $0.appendingPathComponent(name) }.first { FileManager.default.isExecutableFile(atPath: $0.path) }
    }
}
