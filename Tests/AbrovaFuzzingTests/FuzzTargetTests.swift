import AbrovaCore
import AbrovaHTTP
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

@testable import AbrovaFuzzing

/// Every fuzz target (Sources/AbrovaFuzzing) fed its seeds and then seeded random mutations of
/// them, in a few seconds each on a debug build. A failure prints the property's seed and the
/// smallest failing input; replay with `ABROVA_PROPERTY_SEED=<seed> swift test --filter
/// AbrovaFuzzingTests`. Longer runs: `abrova-fuzz` and the libFuzzer build (Docs/TESTING.md, "Fuzzing").
@Suite(.timeLimit(.minutes(5))) struct FuzzTargetTests {
    static let fixtures = WireCorpus.load()
    /// Smaller than the tool's 2 MiB: a debug build reads a 1 MiB body in about a second.
    static let maximumSize = 64 << 10

    @Test func theWireFixturesAreSeeds() {
        #expect(Self.fixtures.problem == nil)
        #expect(
            Self.fixtures.pushBodies.count >= 60 && Self.fixtures.answerBodies.count >= 20,
            "\(Self.fixtures.pushBodies.count) push bodies, \(Self.fixtures.answerBodies.count) answers")
    }

    /// The seeds pass, and enough of them are valid that mutations start inside the grammar.
    @Test(arguments: FuzzTargets.names)
    func seedsHoldTheOracle(_ name: String) throws {
        let target = try FuzzTargets.make(name, fixtures: Self.fixtures)
        for seed in target.seeds {
            #expect(target.check(seed) == nil, "\(name) seed \(FuzzFinding.preview(seed))")
        }
        #expect(target.checkStillWorks() == nil)
        let accepted: Int
        switch name {
        case "push": accepted = target.seeds.count(where: { (try? PushRequest(body: $0)) != nil })
        case "answers":
            accepted = target.seeds.count(where: {
                (try? PushResponse(body: $0)) != nil || (try? PullResponse(body: $0)) != nil
                    || (try? ServerDocument(body: $0)) != nil
            })
        case "zstd", "zstd-pure": accepted = target.seeds.count(where: { (try? Zstd.decompress($0, limit: 1 << 20)) != nil })
        default: accepted = target.seeds.count(where: { FuzzedRequest($0).request.path.hasPrefix("/v1/") })
        }
        #expect(accepted >= 20, "only \(accepted) of \(target.seeds.count) \(name) seeds are valid")
    }

    /// Cases per target: about the same time each on a debug build (the HTTP target writes to
    /// SQLite; the push decoder reads bodies of up to 64 KiB).
    @Test(
        arguments: [("push", 4_000), ("answers", 2_500), ("zstd", 4_000), ("zstd-pure", 2_000), ("http", 3_000)].filter {
            FuzzTargets.names.contains($0.0)
        })
    func mutatedInputsHoldTheOracle(_ name: String, cases: Int) async throws {
        let target = try FuzzTargets.make(name, fixtures: Self.fixtures)
        let mutator = Mutator(corpus: target.seeds, dictionary: target.dictionary, maximumSize: Self.maximumSize)
        let failure = await Property.check(
            "fuzz \(name)", cases: cases,
            generate: { choices in
                FuzzInput(bytes: mutator.input(using: &choices))
            },
            property: { input in
                let start = ContinuousClock.now
                if let problem = target.check(input.bytes) { return problem }
                let took = ContinuousClock.now - start
                return took > .seconds(5) ? "one input took \(took)" : nil
            })
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
        #expect(target.checkStillWorks() == nil)
    }

    @Test func theMutatorIsRepeatableAndBounded() {
        let mutator = Mutator(corpus: [Array(#"{"a":[1,"x"]}"#.utf8)], dictionary: [Array("\"k\"".utf8)], maximumSize: 4_096)
        var sizes = Set<Int>()
        for seed in UInt64(0)..<500 {
            var first = SplitMix64(seed: seed)
            var second = SplitMix64(seed: seed)
            let input = mutator.input(using: &first)
            #expect(input == mutator.input(using: &second))
            #expect(input.count <= 4_096)
            sizes.insert(input.count)
        }
        // Deep nesting and long strings reach the limit; deletions go below the seed's size.
        #expect(sizes.contains(4_096) && sizes.contains { $0 < 13 })
    }
}

/// The oracles and the run can fail: answers, refusals and targets that break the rules are
/// findings.
@Suite struct FuzzOracleTests {
    @Test func anHTTPAnswerThatBreaksTheRulesIsAFinding() throws {
        let target = try HTTPTarget(fixtures: WireCorpus())
        let health = HTTPRequest(method: "GET", path: "/v1/health")
        let pull = HTTPRequest(method: "GET", path: "/v1/pull")
        let push = HTTPRequest(method: "POST", path: "/v1/push", body: BuiltSeeds.pushBodies[0])
        let bad: [(String, HTTPResponse, HTTPRequest)] = [
            ("a 500", .json(status: 500, Refusal(statusCode: 500, message: "the store failed").body), push),
            ("a 503", .json(status: 503, Refusal(statusCode: 503, message: "down").body), pull),
            ("a redirect", HTTPResponse(status: 302), health),
            ("an answer that is not JSON", HTTPResponse(status: 200, body: Array(#"{"status":"ok"}"#.utf8)), health),
            ("an error body that is not an error", .json(status: 404, Array("nope".utf8)), pull),
            ("an error with another status in its body", .json(status: 400, Refusal(statusCode: 413, message: "big").body), push),
            ("an error without a message", .json(status: 400, Refusal(statusCode: 400, message: "").body), push),
            ("a push answer with a result missing", .json(status: 200, PushResponse(results: []).body), push),
            ("a page that is not one", .json(status: 200, Array("{}".utf8)), pull),
            ("a zstd answer that is not zstd", .json(status: 200, [1, 2, 3], headers: [("Content-Encoding", "zstd")]), pull),
        ]
        for (name, response, request) in bad {
            #expect(target.problem(with: response, to: request) != nil, "\(name)")
        }
        #expect(
            target.problem(with: .json(status: 200, Array(#"{"status":"ok"}"#.utf8)), to: health) != nil, "a health answer without limits")
        let limits = ServerLimits(maximumChanges: 16, maximumPushBytes: 1 << 20, maximumPageSize: 50, maximumPageBytes: 8 << 20)
        #expect(target.problem(with: .json(status: 200, HealthResponse(limits: limits).body), to: health) == nil)
        #expect(target.problem(with: .json(status: 404, Refusal(statusCode: 404, message: "no route").body), to: pull) == nil)
    }

    @Test func aDecoderRefusalOutside4xxIsAFinding() {
        #expect(refusalProblem(Refusal(statusCode: 500, message: "x"), of: "decoder") != nil)
        #expect(refusalProblem(Refusal(statusCode: 200, message: "x"), of: "decoder") != nil)
        #expect(refusalProblem(Refusal(statusCode: 400, message: ""), of: "decoder") != nil)
        #expect(refusalProblem(Refusal(statusCode: 413, message: "too large"), of: "decoder") == nil)
    }

    @Test func aRunReportsWhatItsTargetRefusesAndTheInputMakesItAgain() {
        // Refuses nesting deeper than the body limit of 40, which only the nesting mutation makes.
        let tooDeep = [UInt8](repeating: UInt8(ascii: "["), count: 41)
        let target = ScriptedTarget { input in input.firstRange(of: tooDeep) == nil ? nil : "refused" }
        let run = MutationRun(target: target, count: 5_000, seed: 7)
        let report = run.run()
        #expect(report.finding?.message == "refused")
        #expect(report.findingCaseSeed != nil)
        #expect(report.findingCaseSeed.map { run.input(caseSeed: $0) } == report.finding?.input)
        #expect(report.inputs < 5_000 + target.seeds.count)
    }

    /// What a crash would leave: the command that makes the running input again.
    @Test func eachInputIsNamedBeforeItRunsAndTheNameIsRemovedAfter() throws {
        let folder = TemporaryFolder()
        let path = folder.path("last-input")
        let target = ScriptedTarget { input in
            let named = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            return named.contains("--case-seed") || named.hasPrefix("seed-") ? nil : "not named: \(named)"
        }
        let report = MutationRun(target: target, count: 50, seed: 3, lastInputFile: path).run()
        #expect(report.finding == nil)
        #expect(!FileManager.default.fileExists(atPath: path))
    }

    @Test func aSlowInputAndABrokenTargetAreFindings() {
        let slow = ScriptedTarget { input in
            if input.count > 20 { usleep(30_000) }
            return nil
        }
        let report = MutationRun(target: slow, count: 2_000, seed: 1, slowInputLimit: .milliseconds(20)).run()
        #expect(report.finding?.message.contains("took") == true)
        let broken = ScriptedTarget(stillWorks: "the service no longer answers") { _ in nil }
        let after = MutationRun(target: broken, count: 10, seed: 1).run()
        #expect(after.finding?.message == "after the run: the service no longer answers")
    }
}

/// A fuzz input, printed short.
struct FuzzInput: CustomStringConvertible {
    var bytes: [UInt8]
    var description: String { "\(bytes.count) bytes: \(FuzzFinding.preview(bytes))" }
}

/// A target whose oracle is a closure.
struct ScriptedTarget: FuzzTarget {
    let name = "scripted"
    let seeds = [Array("[1]".utf8), Array(#"{"a":"b"}"#.utf8)]
    let dictionary: [[UInt8]] = []
    let stillWorks: String?
    let oracle: @Sendable ([UInt8]) -> String?

    init(stillWorks: String? = nil, oracle: @escaping @Sendable ([UInt8]) -> String?) {
        self.stillWorks = stillWorks
        self.oracle = oracle
    }

    func check(_ input: [UInt8]) -> String? { oracle(input) }
    func checkStillWorks() -> String? { stillWorks }
}
