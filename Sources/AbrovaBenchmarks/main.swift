// abrova-bench: figures as ratios against baselines measured in the same run, because these
// machines are shared and noisy and only ratios hold. Build it in release:
//
//     swift build -c release && .build/release/abrova-bench [--json results.json] [--quick] [--only TEXT]
//
// (`swift build` builds `abrova` too, which the server-process figures start.)

import Foundation

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == InitialSyncDevice.flag { await InitialSyncDevice.run(Array(arguments.dropFirst())) }
if arguments.first == InitialSyncBaselineDevice.flag { InitialSyncBaselineDevice.run(Array(arguments.dropFirst())) }
let options = BenchmarkOptions(arguments: arguments)

print("# abrova-bench")
print("")
print(
    "machine: \(ProcessInfo.processInfo.activeProcessorCount) cores, \(ProcessInfo.processInfo.physicalMemory >> 30) GiB; \(options.isQuick ? "quick run" : "full run")"
)
print("")

var report = BenchmarkReport()
CoreBenchmarks(options: options).run(into: &report)
// Off the main actor, as an app's data layer would call the store: on Linux a hop from the main
// actor to another actor costs about 18 µs, from a background task about 0.1 µs.
let storeReport = report
report = await Task.detached { await StoreBenchmarks(options: options).run(adding: storeReport) }.value
if options.runs("cart workload") {
    let cartReport = report
    report = await Task.detached { await CartWorkloadBenchmarks(options: options).run(adding: cartReport) }.value
}
ServerBenchmarks(options: options).run(into: &report)
#if ABROVA_SYSTEM_ZSTD
    ZstdBenchmarks(options: options).run(into: &report)
#endif
WatchBenchmarks(options: options).run(into: &report)
let syncReport = report
report = await Task.detached { await SyncBenchmarks(options: options).run(adding: syncReport) }.value
report.printTable()
print("\nload average at the end: \(BenchmarkReport.loadAverage ?? "unknown") (1, 5, 15 minutes)")
do {
    try report.writeJSON(to: options.jsonPath)
    print("\nwrote \(options.jsonPath)")
    if let path = options.markdownPath {
        try report.writeMarkdown(to: path, isQuick: options.isQuick)
        print("wrote \(path)")
    }
} catch {
    print("\ncould not write \(options.jsonPath): \(error)")
    exit(1)
}
