// swift-tools-version:6.0
import PackageDescription

// Modules, one job each; dependencies point one way:
// AbrovaCore (pure CRDT, no I/O) <- stores, codec <- client (AbrovaSync), server <- CLI.
let package = Package(
    name: "AbrovaSync",
    products: [
        .library(name: "AbrovaCore", targets: ["AbrovaCore"]),
        .library(name: "AbrovaStore", targets: ["AbrovaStore"]),
        .library(name: "AbrovaTestSupport", targets: ["AbrovaTestSupport"]),
        .executable(name: "abrova-bench", targets: ["AbrovaBenchmarks"]),
        .executable(name: "abrova-store-writer", targets: ["AbrovaStoreWriter"]),
    ],
    targets: [
        .target(name: "AbrovaCore"),
        // SQLite from Debian's libsqlite3-dev, shared by the device store and the server's store.
        .systemLibrary(name: "CSQLite", path: "Sources/CSQLite"),
        .target(name: "AbrovaSQLite", dependencies: ["CSQLite"]),
        .target(name: "AbrovaStore", dependencies: ["AbrovaCore", "AbrovaSQLite"]),
        .target(name: "AbrovaTestSupport", dependencies: ["AbrovaCore"]),
        // The wire: the protocol's JSON bodies and zstd (Spec/protocol.md).
        .systemLibrary(name: "CZstd", path: "Sources/CZstd"),
        .target(name: "AbrovaWire", dependencies: ["AbrovaCore", "CZstd"]),
        // The sync server: service, rules, stores (Spec/protocol.md).
        .target(name: "AbrovaServer", dependencies: ["AbrovaCore", "AbrovaSQLite", "AbrovaWire"]),
        .executableTarget(name: "AbrovaBenchmarks", dependencies: ["AbrovaCore", "AbrovaSQLite", "AbrovaStore", "AbrovaTestSupport"]),
        // Writes to a store until killed: the crash-safety test runs it.
        .executableTarget(name: "AbrovaStoreWriter", dependencies: ["AbrovaCore", "AbrovaStore"]),
        // Tests find Fixtures/ from their own #filePath, so SDKs in other languages share one copy.
        .testTarget(name: "AbrovaCoreTests", dependencies: ["AbrovaCore", "AbrovaTestSupport"]),
        .testTarget(name: "AbrovaWireTests", dependencies: ["AbrovaWire", "CZstd", "AbrovaTestSupport"]),
        .testTarget(name: "AbrovaServerTests", dependencies: ["AbrovaServer", "AbrovaWire", "AbrovaTestSupport"]),
        .testTarget(name: "AbrovaStoreTests", dependencies: ["AbrovaStore", "AbrovaSQLite", "AbrovaTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
