import AbrovaTestSupport
import Foundation

/// A seeded run of random mutations against one target: the seeds as they are, then `count`
/// mutated inputs, each made from its own seed so that one can be made again alone.
///
///     let report = MutationRun(target: try FuzzTargets.make("push"), count: 100_000, seed: 42).run()
///     if let finding = report.finding { print(finding) }
public struct MutationRun {
    /// What is run.
    public var target: any FuzzTarget
    /// How many mutated inputs.
    public var count: Int
    /// The run's seed: the same seed makes the same inputs (for a stateless target, the same run).
    public var seed: UInt64
    /// The longest input made.
    public var maximumSize: Int
    /// An input that takes longer is a finding: a hang in the making.
    public var slowInputLimit: Duration
    /// Where each input is named (its case seed, or which seed it is) before it runs, so that a
    /// crash, which ends the process before any report, leaves it behind; removed after the run.
    public var lastInputFile: String?

    /// A run; nothing happens until `run()`.
    public init(
        target: any FuzzTarget, count: Int, seed: UInt64, maximumSize: Int = 1 << 21,
        slowInputLimit: Duration = .seconds(5), lastInputFile: String? = nil
    ) {
        self.target = target
        self.count = count
        self.seed = seed
        self.maximumSize = maximumSize
        self.slowInputLimit = slowInputLimit
        self.lastInputFile = lastInputFile
    }

    /// The mutated input a case seed makes.
    public func input(caseSeed: UInt64) -> [UInt8] {
        var random = SplitMix64(seed: caseSeed)
        return Mutator(corpus: target.seeds, dictionary: target.dictionary, maximumSize: maximumSize).input(using: &random)
    }

    /// Runs the seeds, then the mutated inputs, until the first finding; then checks that the
    /// target still works.
    ///
    /// - Parameter progress: called about every two seconds with the inputs run so far.
    public func run(progress: (Int) -> Void = { _ in }) -> MutationReport {
        let mutator = Mutator(corpus: target.seeds, dictionary: target.dictionary, maximumSize: maximumSize)
        let clock = ContinuousClock()
        let start = clock.now
        var lastProgress = start
        var report = MutationReport(target: target.name, seed: seed)
        let record = lastInputFile.flatMap { LastInputRecord(path: $0) }
        defer { record?.remove() }

        func attempt(_ input: [UInt8], caseSeed: UInt64?) -> Bool {
            record?.note(
                caseSeed.map { "abrova-fuzz \(target.name) --case-seed \($0)" }
                    ?? "seed-\(String(report.inputs + 1000).dropFirst()) of abrova-fuzz seeds \(target.name) DIR")
            let began = clock.now
            let problem = target.check(input)
            let took = clock.now - began
            report.inputs += 1
            report.bytes += input.count
            if took > report.slowest { report.slowest = took }
            if let problem {
                report.finding = FuzzFinding(target: target.name, message: problem, input: input)
            } else if took > slowInputLimit {
                report.finding = FuzzFinding(target: target.name, message: "one input took \(took) (limit \(slowInputLimit))", input: input)
            }
            report.findingCaseSeed = report.finding == nil ? nil : caseSeed
            if clock.now - lastProgress > .seconds(2) {
                lastProgress = clock.now
                progress(report.inputs)
            }
            return report.finding == nil
        }

        runAll: do {
            for input in target.seeds where !attempt(input, caseSeed: nil) { break runAll }
            var mixer = SplitMix64(seed: seed)
            for _ in 0..<count {
                let caseSeed = mixer.next()
                var random = SplitMix64(seed: caseSeed)
                if !attempt(mutator.input(using: &random), caseSeed: caseSeed) { break runAll }
            }
        }
        if report.finding == nil, let problem = target.checkStillWorks() {
            report.finding = FuzzFinding(target: target.name, message: "after the run: \(problem)", input: [])
        }
        report.elapsed = clock.now - start
        report.peakResidentBytes = peakResidentBytes()
        return report
    }
}

/// What a `MutationRun` did.
public struct MutationReport: Sendable, CustomStringConvertible {
    /// The target's name.
    public var target: String
    /// The run's seed.
    public var seed: UInt64
    /// Inputs run: the seeds and the mutated ones.
    public var inputs = 0
    /// Their total size.
    public var bytes = 0
    /// How long the run took.
    public var elapsed: Duration = .zero
    /// The slowest input's time.
    public var slowest: Duration = .zero
    /// The process's peak resident memory at the end of the run (0 where it cannot be read).
    public var peakResidentBytes = 0
    /// The first finding, when there was one.
    public var finding: FuzzFinding?
    /// The case seed of the finding's input (nil for a seed input or a finding after the run).
    public var findingCaseSeed: UInt64?

    /// A report with nothing run yet.
    public init(target: String, seed: UInt64) {
        self.target = target
        self.seed = seed
    }

    /// Inputs per second.
    public var inputsPerSecond: Double {
        elapsed.seconds > 0 ? Double(inputs) / elapsed.seconds : 0
    }

    public var description: String {
        let outcome = finding.map { "FINDING \($0)" } ?? "no finding"
        return "\(target): \(inputs) inputs (\(bytes / 1024) KiB) in \(String(format: "%.1f", elapsed.seconds)) s, "
            + "\(Int(inputsPerSecond)) inputs/s, slowest \(String(format: "%.1f", slowest.seconds * 1000)) ms, "
            + "peak RSS \(peakResidentBytes >> 20) MiB, seed \(seed): \(outcome)"
    }
}

/// A file that names the input about to run, rewritten in place before each one: one small
/// write, so that it costs little beside an input.
final class LastInputRecord {
    private let path: String
    private let descriptor: Int32

    init?(path: String) {
        let descriptor = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0o644)
        guard descriptor >= 0 else { return nil }
        self.path = path
        self.descriptor = descriptor
    }

    /// Writes `line`, padded so that it covers the line before it.
    func note(_ line: String) {
        let bytes = Array((line.padding(toLength: max(line.count, 79), withPad: " ", startingAt: 0) + "\n").utf8)
        _ = bytes.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }
    }

    /// Closes and deletes the file.
    func remove() {
        close(descriptor)
        unlink(path)
    }
}

/// The process's peak resident set size, from getrusage.
func peakResidentBytes() -> Int {
    var usage = rusage()
    #if canImport(Darwin)
        guard getrusage(RUSAGE_SELF, &usage) == 0 else { return 0 }
        return Int(usage.ru_maxrss) // bytes on Darwin
    #else
        guard getrusage(RUSAGE_SELF.rawValue, &usage) == 0 else { return 0 }
        return Int(usage.ru_maxrss) * 1024 // KiB on Linux
    #endif
}

extension Duration {
    /// The duration in seconds.
    var seconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
