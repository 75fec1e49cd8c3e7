// swift-tools-version:6.1
import PackageDescription

// Modules, one job each; dependencies point one way:
// AbrovaCore (pure CRDT, no I/O) <- stores, codec <- client (AbrovaSync), server <- demo <- CLI.

/// libzstd, for the targets that use it when the SystemZstd trait is on (Linux only).
var systemZstd: Target.Dependency { .target(name: "CZstd", condition: .when(platforms: [.linux], traits: ["SystemZstd"])) }
/// `#if ABROVA_SYSTEM_ZSTD` in the targets that use libzstd, exactly when they link it.
var systemZstdSettings: [SwiftSetting] { [.define("ABROVA_SYSTEM_ZSTD", .when(platforms: [.linux], traits: ["SystemZstd"]))] }

let package = Package(
    name: "AbrovaSync",
    // The SDK's floor: locks are AbrovaLocking's (os_unfair_lock), not Synchronization's Mutex
    // (iOS 18); the `@Observable` status needs iOS 17 / macOS 14 and says so.
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .watchOS(.v9), .visionOS(.v1)],
    products: [
        .library(name: "AbrovaSync", targets: ["AbrovaSync"]),
        .library(name: "AbrovaCore", targets: ["AbrovaCore"]),
        .library(name: "AbrovaTestSupport", targets: ["AbrovaTestSupport"]),
        .library(name: "AbrovaServer", targets: ["AbrovaServer"]),
        .executable(name: "abrova", targets: ["AbrovaCLI"]),
        .executable(name: "abrova-bench", targets: ["AbrovaBenchmarks"]),
        .executable(name: "abrova-store-writer", targets: ["AbrovaStoreWriter"]),
        .executable(name: "abrova-fuzz", targets: ["AbrovaFuzz"]),
        .executable(name: "abrova-chaos-client", targets: ["AbrovaChaosClient"]),
    ],
    // SystemZstd (on by default): on Linux the wire's zstd is the system's libzstd. Off
    // (`--disable-default-traits`), and always on Apple platforms, whose SDKs have no libzstd, it
    // is the package's own pure-Swift codec (AbrovaZstd); the two read each other's frames.
    traits: [
        .trait(name: "SystemZstd", description: "zstd from the system's libzstd on Linux, not the pure-Swift codec"),
        .default(enabledTraits: ["SystemZstd"]),
    ],
    targets: [
        .target(name: "AbrovaCore"),
        // A lock every module shares: Mutex's job on every system the SDK supports.
        .target(name: "AbrovaLocking"),
        // SQLite from Debian's libsqlite3-dev, shared by the device store and the server's store.
        .systemLibrary(name: "CSQLite", path: "Sources/CSQLite"),
        // A VFS that writes each WAL frame in one call, for the device store's one-page commits.
        .target(name: "CSQLiteFrames", linkerSettings: [.linkedLibrary("sqlite3")]),
        .target(name: "AbrovaSQLite", dependencies: ["CSQLite", "CSQLiteFrames"]),
        .target(name: "AbrovaStore", dependencies: ["AbrovaCore", "AbrovaSQLite"]),
        // libpq from Debian's libpq-dev, for servers that share one PostgreSQL database.
        .systemLibrary(name: "CLibPQ", path: "Sources/CLibPQ"),
        .target(name: "AbrovaPostgres", dependencies: ["CLibPQ"]),
        .target(name: "AbrovaTestSupport", dependencies: ["AbrovaLocking", "AbrovaCore", "AbrovaPostgres"]),
        // zstd in pure Swift (RFC 8878), decoder and encoder: the wire's codec where libzstd is not.
        .target(name: "AbrovaZstd"),
        // The wire: the protocol's JSON bodies and zstd (Spec/protocol.md).
        .systemLibrary(name: "CZstd", path: "Sources/CZstd"),
        .target(
            name: "AbrovaWire", dependencies: ["AbrovaCore", "AbrovaZstd", systemZstd], swiftSettings: systemZstdSettings),
        // libmicrohttpd from Debian's libmicrohttpd-dev, behind a tiny C target because
        // MHD_start_daemon is variadic and some of its enums do not import by name.
        .target(name: "CMicroHTTPD", linkerSettings: [.linkedLibrary("microhttpd")]),
        // A small HTTP/1.1 server that knows nothing of sync.
        .target(name: "AbrovaHTTP", dependencies: ["AbrovaLocking", "CMicroHTTPD"]),
        // The sync server: service, rules, stores and its HTTP routes (Spec/protocol.md).
        .target(
            name: "AbrovaServer",
            dependencies: ["AbrovaLocking", "AbrovaCore", "AbrovaSQLite", "AbrovaPostgres", "AbrovaWire", "AbrovaHTTP"]),
        // libcurl from Debian's libcurl4-openssl-dev, behind a tiny C target because
        // curl_easy_setopt and curl_easy_getinfo are variadic. Linux only: the client's HTTP there.
        .target(name: "CCurl", linkerSettings: [.linkedLibrary("curl")]),
        // The client SDK, the seed's iOS API: configuration, the data API, the sync engine and its
        // HTTP transport (URLSession on Apple platforms, libcurl on Linux).
        .target(
            name: "AbrovaSync",
            dependencies: [
                "AbrovaLocking",
                "AbrovaCore", "AbrovaStore", "AbrovaWire",
                .target(name: "CCurl", condition: .when(platforms: [.linux])),
            ]),
        // The shopping-cart story of `abrova demo`: the server and two SDK instances in one process.
        .target(name: "AbrovaDemo", dependencies: ["AbrovaLocking", "AbrovaSync", "AbrovaServer", "AbrovaHTTP"]),
        // `abrova serve` and `abrova demo`.
        .executableTarget(
            name: "AbrovaCLI",
            dependencies: ["AbrovaServer", "AbrovaStore", "AbrovaHTTP", "AbrovaWire", "AbrovaSQLite", "AbrovaSync", "AbrovaDemo"]),
        .executableTarget(
            name: "AbrovaBenchmarks",
            dependencies: [
                "AbrovaLocking",
                "AbrovaCore", "AbrovaSQLite", "AbrovaStore", "AbrovaTestSupport",
                "AbrovaServer", "AbrovaHTTP", "AbrovaWire", "AbrovaSync", "AbrovaPostgres", "AbrovaZstd", systemZstd,
            ],
            swiftSettings: systemZstdSettings),
        // Writes to a store until killed: the crash-safety test runs it.
        .executableTarget(name: "AbrovaStoreWriter", dependencies: ["AbrovaCore", "AbrovaStore"]),
        // One device of the long-run convergence test, in its own process: random writes through
        // the public SDK, each logged, until killed (LongRunConvergenceTests starts and kills it).
        .executableTarget(name: "AbrovaChaosClient", dependencies: ["AbrovaSync", "AbrovaTestSupport"]),
        // Fuzz targets over the wire decoders, zstd and the server's HTTP handling, with their
        // oracles and a seeded mutator; `abrova-fuzz` runs them, or is a libFuzzer binary when built
        // with -DLIBFUZZER (it then calls libFuzzer's driver, declared by CLibFuzzer).
        .target(
            name: "AbrovaFuzzing",
            dependencies: [
                "AbrovaLocking", "AbrovaCore", "AbrovaWire", "AbrovaZstd", "AbrovaHTTP", "AbrovaServer", "AbrovaTestSupport",
            ],
            swiftSettings: systemZstdSettings),
        .target(name: "CLibFuzzer"),
        .executableTarget(name: "AbrovaFuzz", dependencies: ["AbrovaFuzzing", "CLibFuzzer"]),
        // Tests find Fixtures/ from their own #filePath, so SDKs in other languages share one copy.
        .testTarget(name: "AbrovaCoreTests", dependencies: ["AbrovaCore", "AbrovaTestSupport"]),
        .testTarget(name: "AbrovaWireTests", dependencies: ["AbrovaWire", "AbrovaTestSupport"]),
        // The pure-Swift codec, against libzstd where the build has it (differential properties).
        .testTarget(
            name: "AbrovaZstdTests", dependencies: ["AbrovaZstd", "AbrovaTestSupport", systemZstd], swiftSettings: systemZstdSettings),
        .testTarget(name: "AbrovaHTTPTests", dependencies: ["AbrovaLocking", "AbrovaHTTP", "AbrovaTestSupport"]),
        .testTarget(
            name: "AbrovaServerTests",
            dependencies: ["AbrovaLocking", "AbrovaServer", "AbrovaPostgres", "AbrovaWire", "AbrovaHTTP", "AbrovaTestSupport"]),
        .testTarget(name: "AbrovaStoreTests", dependencies: ["AbrovaStore", "AbrovaSQLite", "AbrovaTestSupport"]),
        // The SDK against the real server on loopback (LiveSyncServer) and scripted servers.
        .testTarget(
            name: "AbrovaSyncTests",
            dependencies: [
                "AbrovaLocking",
                "AbrovaSync", "AbrovaServer", "AbrovaPostgres", "AbrovaHTTP", "AbrovaWire",
                "AbrovaTestSupport",
            ]),
        // Seeded random mutations of every fuzz target, and mutated raw requests to a live server.
        .testTarget(
            name: "AbrovaFuzzingTests", dependencies: ["AbrovaFuzzing", "AbrovaServer", "AbrovaHTTP", "AbrovaWire", "AbrovaTestSupport"]),
        // The demo's story, run in-process.
        .testTarget(name: "AbrovaDemoTests", dependencies: ["AbrovaLocking", "AbrovaDemo", "AbrovaSync"]),
        // Imports the SDK as an app does (no @testable, no SPI): the documentation's examples compile.
        // The example app's model (Examples/ShoppingCart): built and tested here; its SwiftUI
        // screen (Examples/ShoppingCart/App) is for Apple platforms and is not a target.
        .target(name: "ShoppingCartExample", dependencies: ["AbrovaSync"], path: "Examples/ShoppingCart/Model"),
        .testTarget(name: "AbrovaAppTests", dependencies: ["AbrovaSync", "AbrovaTestSupport", "ShoppingCartExample"]),
    ],
    swiftLanguageModes: [.v6]
)
