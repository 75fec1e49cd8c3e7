// swift-tools-version:6.0
import PackageDescription

// Modules, one job each; dependencies point one way:
// AbrovaCore (pure CRDT, no I/O) <- stores, codec <- client (AbrovaSync), server <- CLI.
let package = Package(
    name: "AbrovaSync",
    products: [
        .library(name: "AbrovaCore", targets: ["AbrovaCore"]),
        .library(name: "AbrovaTestSupport", targets: ["AbrovaTestSupport"]),
        .executable(name: "abrova-bench", targets: ["AbrovaBenchmarks"]),
    ],
    targets: [
        .target(name: "AbrovaCore"),
        .target(name: "AbrovaTestSupport", dependencies: ["AbrovaCore"]),
        .executableTarget(name: "AbrovaBenchmarks", dependencies: ["AbrovaCore", "AbrovaTestSupport"]),
        // Tests find Fixtures/ from their own #filePath, so SDKs in other languages share one copy.
        .testTarget(name: "AbrovaCoreTests", dependencies: ["AbrovaCore", "AbrovaTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
