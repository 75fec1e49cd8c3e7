import AbrovaCore
import Foundation

/// Command-line options.
struct BenchmarkOptions {
    /// Where the figures are written as JSON (`--json FILE`; `abrova-bench.json` by default).
    var jsonPath = "abrova-bench.json"
    /// Fewer repetitions and smaller sizes, for a smoke run.
    var isQuick = false
    /// Runs only the figures whose names contain this text (`--only store`).
    var only: String?
    /// Where the table is written as a markdown page, if anywhere (`--markdown Docs/benchmarks-latest.md`).
    var markdownPath: String?

    /// Whether the figure named `name` runs.
    func runs(_ name: String) -> Bool { only.map { name.contains($0) } ?? true }

    init(arguments: [String]) {
        var remaining = arguments[...]
        while let argument = remaining.popFirst() {
            switch argument {
            case "--json": jsonPath = remaining.popFirst() ?? jsonPath
            case "--quick": isQuick = true
            case "--only": only = remaining.popFirst()
            case "--markdown": markdownPath = remaining.popFirst()
            default: print("ignoring unknown argument \(argument)")
            }
        }
    }
}

/// One row of the report: a figure, its baseline, their ratio, and the goal if there is one.
struct BenchmarkRow {
    var name: String
    var figure: String
    var baseline: String
    var ratio: Double
    var goal: String
    var isGoalMet: Bool?
}

extension BenchmarkRow {
    /// Memory per item (a waiting request, say) against a target of at most `target` bytes.
    static func memory(_ name: String, bytesEach: Int, target: Int) -> BenchmarkRow {
        let ratio = Double(bytesEach) / Double(target)
        return BenchmarkRow(
            name: name, figure: String(format: "%.1f kB", Double(bytesEach) / 1_000),
            baseline: "\(target / 1_000) kB (target)", ratio: ratio, goal: "≤ 1×", isGoalMet: ratio <= 1)
    }
}

/// The rows collected in a run.
struct BenchmarkReport {
    var rows: [BenchmarkRow] = []

    mutating func add(_ row: BenchmarkRow) {
        rows.append(row)
        let verdict = row.isGoalMet.map { $0 ? "met" : "NOT met" } ?? "-"
        print("- \(row.name): \(row.figure) vs \(row.baseline) = \(String(format: "%.2f", row.ratio))× (goal \(row.goal): \(verdict))")
    }

    func printTable() {
        print("")
        print(table)
    }

    /// The rows as a markdown table.
    var table: String {
        var lines = ["| figure | ours | baseline | ratio | goal | met |", "| --- | --- | --- | --- | --- | --- |"]
        for row in rows {
            let verdict = row.isGoalMet.map { $0 ? "yes" : "no" } ?? "-"
            lines.append(
                "| \(row.name) | \(row.figure) | \(row.baseline) | \(String(format: "%.2f", row.ratio))× | \(row.goal) | \(verdict) |")
        }
        return lines.joined(separator: "\n")
    }

    /// The table as a page of its own, with when and where it was measured: what
    /// `abrova-bench --markdown FILE` writes.
    func writeMarkdown(to path: String, isQuick: Bool) throws {
        let page = """
            # abrova-bench: the latest figures

            Written by `abrova-bench --markdown \(path)`\(isQuick ? " --quick" : "") on \(ISO8601DateFormatter().string(from: Date())), \
            \(ProcessInfo.processInfo.activeProcessorCount) cores, \(ProcessInfo.processInfo.physicalMemory >> 30) GiB, \
            load average at the end \(Self.loadAverage ?? "unknown"). Each ratio is against a baseline measured in the same run; \
            Docs/BENCHMARKS.md says what each figure measures, and its history.

            \(table)

            """
        try Data(page.utf8).write(to: URL(fileURLWithPath: path))
    }

    func writeJSON(to path: String) throws {
        let rows: [Value] = rows.map { row in
            [
                "name": .string(row.name), "figure": .string(row.figure), "baseline": .string(row.baseline),
                "ratio": .double(row.ratio), "goal": .string(row.goal),
                "goalMet": row.isGoalMet.map(Value.bool) ?? .null,
            ]
        }
        let machine: Value = [
            "cores": .int(Int64(ProcessInfo.processInfo.activeProcessorCount)),
            "memoryGiB": .int(Int64(ProcessInfo.processInfo.physicalMemory >> 30)),
            "loadAverageAtEnd": .string(Self.loadAverage ?? "unknown"),
            "finished": .string(ISO8601DateFormatter().string(from: Date())),
        ]
        try Data(Value.map(["machine": machine, "rows": .array(rows)]).canonicalJSON.utf8).write(to: URL(fileURLWithPath: path))
    }

    /// The 1, 5 and 15 minute load averages (Linux), which say how shared the machine was.
    static var loadAverage: String? {
        guard let text = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8) else { return nil }
        return text.split(separator: " ").prefix(3).joined(separator: " ")
    }
}

/// Times `body` (which does `operations` operations) and returns operations per second: the median
/// of `repetitions` runs.
func operationsPerSecond(operations: Int, repetitions: Int, _ body: () -> Void) -> Double {
    let clock = ContinuousClock()
    var rates: [Double] = []
    for _ in 0..<repetitions {
        let elapsed = clock.measure(body)
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        rates.append(Double(operations) / max(seconds, 1e-9))
    }
    return rates.sorted()[rates.count / 2]
}

/// Measures ours and the baseline alternately, so that both see the same machine load.
func compare(operations: Int, repetitions: Int, ours: () -> Void, baseline: () -> Void) -> (ours: Double, baseline: Double) {
    var oursRates: [Double] = []
    var baselineRates: [Double] = []
    for _ in 0..<repetitions {
        baselineRates.append(operationsPerSecond(operations: operations, repetitions: 1, baseline))
        oursRates.append(operationsPerSecond(operations: operations, repetitions: 1, ours))
    }
    return (oursRates.sorted()[repetitions / 2], baselineRates.sorted()[repetitions / 2])
}

func formatRate(_ rate: Double, _ unit: String) -> String {
    rate >= 1e6
        ? String(format: "%.2fM %@/s", rate / 1e6, unit)
        : String(format: rate >= 1e4 ? "%.0fk %@/s" : "%.1fk %@/s", rate / 1e3, unit)
}

/// Keeps a value alive so that the optimizer cannot drop the work that made it.
@inline(never)
func blackHole<T>(_ value: T) {
    withExtendedLifetime(value) {}
}
