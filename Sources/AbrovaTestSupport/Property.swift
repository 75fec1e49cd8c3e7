import Foundation

/// Property-based testing without a framework: a seeded, repeatable generator, shrinking, replay.
///
/// Generators draw from `Choices`. A case is the sequence of raw draws, so a failing case can be
/// shrunk by shortening that sequence and lowering its numbers (a draw past the end reads 0, and
/// generators map 0 to the simplest thing), then replayed from its seed.
///
///     let failure = await Property.check("join is commutative", generate: { choices in
///         (makeState(&choices), makeState(&choices))
///     }, property: { pair in
///         pair.0.merging(pair.1) == pair.1.merging(pair.0) ? nil : "not commutative"
///     })
///
/// Environment: `ABROVA_PROPERTY_SEED=<seed>` runs only that case; `ABROVA_PROPERTY_CASES=<n>`
/// changes the number of cases; `ABROVA_PROPERTY_BASE_SEED=<n>` fixes the run's seeds.
public enum Property {
    /// Cases per property unless the environment says otherwise. The issue asks for at least 2,000.
    public static let defaultCases = 2_000

    /// A failing case, shrunk.
    public struct Failure: Error, CustomStringConvertible {
        /// The property's name.
        public let name: String
        /// The seed that generates the original failing case: replay it with ABROVA_PROPERTY_SEED.
        public let seed: UInt64
        /// The smallest failing input found, described.
        public let smallestCase: String
        /// What the property said about the smallest case.
        public let message: String
        /// How many shrinking steps succeeded.
        public let shrinkSteps: Int

        public var description: String {
            """
            property "\(name)" failed; replay with ABROVA_PROPERTY_SEED=\(seed)
            smallest failing case (after \(shrinkSteps) shrink steps): \(smallestCase)
            \(message)
            """
        }
    }

    /// `check` for a property that may throw: an error it throws fails the case, named.
    public static func checkCatching<Input>(
        _ name: String, cases: Int = defaultCases,
        generate: (inout Choices) -> Input,
        property: (Input) async throws -> String?
    ) async -> Failure? {
        await check(name, cases: cases, generate: generate) { input in
            do {
                return try await property(input)
            } catch {
                return "threw \(error)"
            }
        }
    }

    /// How many cases `check` runs when asked for `cases`: one when replaying a seed, else what the
    /// environment says. Tests that also check how often a shape came up scale their bar by it.
    public static func plannedCases(_ cases: Int = defaultCases) -> Int {
        let environment = Environment.current
        return environment.replaySeed != nil ? 1 : environment.cases ?? cases
    }

    /// Runs a property over generated cases.
    ///
    /// - Parameters:
    ///   - generate: makes an input from random choices.
    ///   - property: returns `nil` when the input passes, or what went wrong.
    /// - Returns: the shrunk failure, or `nil` when every case passed.
    public static func check<Input>(
        _ name: String, cases: Int = defaultCases,
        generate: (inout Choices) -> Input,
        property: (Input) async -> String?
    ) async -> Failure? {
        let environment = Environment.current
        let seeds: [UInt64]
        if let replay = environment.replaySeed {
            seeds = [replay]
        } else {
            let base = environment.baseSeed ?? UInt64.random(in: 0...UInt64.max)
            let count = environment.cases ?? cases
            // Printed so that a failure seen only in a log can still be replayed.
            print("property \"\(name)\": \(count) cases, ABROVA_PROPERTY_BASE_SEED=\(base)")
            var mixer = SplitMix64(seed: base)
            seeds = (0..<count).map { _ in mixer.next() }
        }
        for seed in seeds {
            // Thousands of quick cases would otherwise hold one of the few threads Swift
            // concurrency has (two on CI), stalling every other test's tasks for seconds.
            await Task.yield()
            var choices = Choices(seed: seed)
            let input = generate(&choices)
            guard let message = await property(input) else { continue }
            return await shrink(
                name: name, seed: seed, draws: choices.draws, message: message,
                generate: generate, property: property)
        }
        return nil
    }

    private static func shrink<Input>(
        name: String, seed: UInt64, draws: [UInt64], message: String,
        generate: (inout Choices) -> Input, property: (Input) async -> String?
    ) async -> Failure {
        var best = draws
        var bestMessage = message
        var steps = 0
        var budget = 5_000

        func attempt(_ candidate: [UInt64]) async -> Bool {
            guard budget > 0 else { return false }
            budget -= 1
            await Task.yield()
            var choices = Choices(replaying: candidate)
            let input = generate(&choices)
            guard let failure = await property(input) else { return false }
            let used = choices.draws
            if used.count < best.count || (used.count == best.count && used.lexicographicallyPrecedes(best)) {
                best = used
                bestMessage = failure
                steps += 1
                return true
            }
            return false
        }

        var improved = true
        while improved && budget > 0 {
            improved = false
            // Take out chunks, large ones first.
            var size = max(best.count / 2, 1)
            while size >= 1 {
                var start = 0
                while start + size <= best.count {
                    var candidate = best
                    candidate.removeSubrange(start..<start + size)
                    if await attempt(candidate) { improved = true } else { start += 1 }
                }
                size /= 2
            }
            // Lower a draw by one and take out a later one: a list's length and one of its
            // elements go together, and neither change alone still fails.
            var index = 0
            while index < best.count {
                if best[index] > 0 {
                    for later in (index + 1)..<best.count {
                        var candidate = best
                        candidate[index] -= 1
                        candidate.remove(at: later)
                        if await attempt(candidate) {
                            improved = true
                            break
                        }
                    }
                }
                index += 1
            }
            // Lower single draws: to zero, else to the smallest value that still fails, found by
            // galloping up from 1 and then bisecting (generators map small draws to small values).
            for index in best.indices {
                guard index < best.count, best[index] > 0 else { continue }
                func failsWith(_ raw: UInt64) async -> Bool {
                    guard index < best.count else { return false }
                    var candidate = best
                    candidate[index] = raw
                    return await attempt(candidate)
                }
                if await failsWith(0) { improved = true; continue }
                var passing: UInt64 = 0
                var failing = best[index]
                var probe: UInt64 = 1
                while probe < failing {
                    if await failsWith(probe) { failing = probe; improved = true; break }
                    passing = probe
                    probe = probe > UInt64.max / 2 ? failing : probe * 2
                }
                while failing - passing > 1 {
                    let middle = passing + (failing - passing) / 2
                    if await failsWith(middle) { failing = middle; improved = true } else { passing = middle }
                }
            }
        }

        var choices = Choices(replaying: best)
        let smallest = generate(&choices)
        return Failure(
            name: name, seed: seed, smallestCase: String(describing: smallest),
            message: bestMessage, shrinkSteps: steps)
    }

    private struct Environment {
        var replaySeed: UInt64?
        var cases: Int?
        var baseSeed: UInt64?

        static var current: Environment {
            let variables = ProcessInfo.processInfo.environment
            return Environment(
                replaySeed: variables["ABROVA_PROPERTY_SEED"].flatMap { UInt64($0) },
                cases: variables["ABROVA_PROPERTY_CASES"].flatMap { Int($0) },
                baseSeed: variables["ABROVA_PROPERTY_BASE_SEED"].flatMap { UInt64($0) })
        }
    }
}

/// The random choices a generator draws from: fresh from a seed, or replayed from a recording.
public struct Choices {
    private var generator: SplitMix64?
    private let replay: [UInt64]
    /// The raw draws made so far.
    public private(set) var draws: [UInt64] = []

    /// Fresh choices from a seed.
    public init(seed: UInt64) {
        generator = SplitMix64(seed: seed)
        replay = []
    }

    /// Choices that replay recorded draws, reading 0 past their end.
    public init(replaying draws: [UInt64]) {
        generator = nil
        replay = draws
    }

    /// A raw draw.
    public mutating func next() -> UInt64 {
        let raw: UInt64
        if var generator {
            raw = generator.next()
            self.generator = generator
        } else {
            raw = draws.count < replay.count ? replay[draws.count] : 0
        }
        draws.append(raw)
        return raw
    }

    /// A number in `0..<bound`; a draw of 0 gives 0.
    public mutating func below(_ bound: Int) -> Int {
        precondition(bound > 0, "bound must be positive")
        return Int(next() % UInt64(bound))
    }

    /// A number in `range`; a draw of 0 gives its lower bound.
    public mutating func int(in range: ClosedRange<Int>) -> Int {
        range.lowerBound + below(range.count)
    }

    /// True with probability `1 / oneIn`; a draw of 0 gives false.
    public mutating func chance(oneIn: Int) -> Bool {
        below(oneIn) == oneIn - 1
    }

    /// An element of a non-empty array; a draw of 0 gives the first.
    public mutating func element<T>(of elements: [T]) -> T {
        elements[below(elements.count)]
    }

    /// A shuffled copy.
    public mutating func shuffled<T>(_ elements: [T]) -> [T] {
        var result = elements
        for index in result.indices.reversed() where index > 0 {
            result.swapAt(index, below(index + 1))
        }
        return result
    }
}

/// SplitMix64: small, fast, and good enough to drive tests; the same seed gives the same stream.
public struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    /// A generator whose stream is fixed by `seed`.
    public init(seed: UInt64) { state = seed }

    /// The next number of the stream.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// The next `count` bytes of the stream.
    public mutating func bytes(_ count: Int) -> [UInt8] {
        var words = (0..<(count + 7) / 8).map { _ in next() }
        return words.withUnsafeMutableBytes { Array($0.prefix(count)) }
    }
}
