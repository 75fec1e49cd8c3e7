#if !LIBFUZZER
    import AbrovaFuzzing
    import Foundation

    /// `abrova-fuzz`: seeded random-mutation runs of the fuzz targets, replay of saved inputs, and the
    /// seed corpus for libFuzzer (the same binary built with `-DLIBFUZZER` is a libFuzzer binary; see
    /// LibFuzzerEntry.swift and the "Fuzzing" in Docs/TESTING.md).
    @main
    struct AbrovaFuzz {
        static let usage = """
            usage: abrova-fuzz <target>|all [--mutations N] [--seed S] [--max-size BYTES] [--slow SECONDS] [--out DIR]
                   abrova-fuzz <target> FILE...          run saved inputs (a finding's file, a libFuzzer crash-*)
                   abrova-fuzz <target> --case-seed S    run the one mutated input a case seed makes
                   abrova-fuzz seeds <target> DIR        write the seed corpus into DIR and its dictionary to DIR.dict
            options: --mutations (default 10000), --seed (default random, printed), --max-size (default 2097152),
                     --slow: an input slower than this is a finding (default 5), --out: where findings are saved (default .),
                     --fixtures DIR: the wire fixtures (default Fixtures/wire of the source tree)
            targets:
            """
            + FuzzTargets.names.map { "\n  \($0.padding(toLength: 10, withPad: " ", startingAt: 0)) \(FuzzTargets.summaries[$0] ?? "")" }
            .joined()

        static func main() {
            do {
                exit(try run(Array(CommandLine.arguments.dropFirst())))
            } catch {
                FileHandle.standardError.write(Data("abrova-fuzz: \(error)\n\n\(usage)\n".utf8))
                exit(2)
            }
        }

        /// Runs a command line; returns the exit status (1 when there was a finding).
        static func run(_ arguments: [String]) throws -> Int32 {
            var options = try Options(arguments)
            if options.help {
                say(usage)
                return 0
            }
            let fixtures = WireCorpus.load(from: options.fixtures)
            if let problem = fixtures.problem { say("note: \(problem)") }
            guard let command = options.positional.first else { throw FuzzSetupError("name a target") }
            options.positional.removeFirst()
            if command == "seeds" {
                guard options.positional.count == 2 else { throw FuzzSetupError("seeds needs a target and a folder") }
                try writeSeeds(of: try FuzzTargets.make(options.positional[0], fixtures: fixtures), to: options.positional[1])
                return 0
            }
            let names = command == "all" ? FuzzTargets.names : [command]
            if !options.positional.isEmpty || options.caseSeed != nil {
                guard names.count == 1 else { throw FuzzSetupError("replay needs one target") }
                return try replay(options, target: try FuzzTargets.make(command, fixtures: fixtures))
            }
            let seed = options.seed ?? UInt64.random(in: 0...UInt64.max)
            var status: Int32 = 0
            for name in names {
                let lastInput = URL(fileURLWithPath: options.out).appendingPathComponent("last-input-\(name)").path
                let run = MutationRun(
                    target: try FuzzTargets.make(name, fixtures: fixtures), count: options.mutations, seed: seed,
                    maximumSize: options.maximumSize, slowInputLimit: options.slowInputLimit, lastInputFile: lastInput)
                say(
                    "\(name): \(run.target.seeds.count) seeds, \(options.mutations) mutations, --seed \(seed) (a crash leaves the command that makes its input again in \(lastInput))"
                )
                let report = run.run { inputs in say("  \(inputs) inputs...") }
                say(report.description)
                if let finding = report.finding {
                    status = 1
                    try save(finding, caseSeed: report.findingCaseSeed, seed: seed, in: options.out)
                }
            }
            return status
        }

        /// Runs the files named, or the input of a case seed.
        static func replay(_ options: Options, target: any FuzzTarget) throws -> Int32 {
            var inputs: [(String, [UInt8])] = try options.positional.map { ($0, Array(try Data(contentsOf: URL(fileURLWithPath: $0)))) }
            if let caseSeed = options.caseSeed {
                let run = MutationRun(target: target, count: 0, seed: 0, maximumSize: options.maximumSize)
                inputs.append(("--case-seed \(caseSeed)", run.input(caseSeed: caseSeed)))
            }
            var status: Int32 = 0
            for (name, input) in inputs {
                if let problem = target.check(input) ?? target.checkStillWorks() {
                    status = 1
                    say("\(name): FINDING \(FuzzFinding(target: target.name, message: problem, input: input))")
                } else {
                    say("\(name): ok (\(input.count) bytes)")
                }
            }
            return status
        }

        /// Saves a finding's input and says how to run it again.
        static func save(_ finding: FuzzFinding, caseSeed: UInt64?, seed: UInt64, in folder: String) throws {
            guard !finding.input.isEmpty || caseSeed != nil else { return }
            let path = URL(fileURLWithPath: folder).appendingPathComponent("finding-\(finding.target)-\(seed).bin").path
            try Data(finding.input).write(to: URL(fileURLWithPath: path))
            say("  input saved to \(path); run it again with: abrova-fuzz \(finding.target) \(path)")
            if let caseSeed { say("  or make it again with: abrova-fuzz \(finding.target) --case-seed \(caseSeed)") }
        }

        /// Writes a target's seeds as files for libFuzzer's corpus folder, and its dictionary in
        /// libFuzzer's format (`-dict=`).
        static func writeSeeds(of target: any FuzzTarget, to folder: String) throws {
            let url = URL(fileURLWithPath: folder)
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
            for (index, seed) in target.seeds.enumerated() {
                try Data(seed).write(to: url.appendingPathComponent("seed-\(String(index + 1000).dropFirst())"))
            }
            let entries = target.dictionary.filter { !$0.isEmpty }.map { word in
                "\""
                    + word.map { byte in
                        switch byte {
                        case UInt8(ascii: "\""), UInt8(ascii: "\\"): "\\" + String(UnicodeScalar(byte))
                        case 0x20...0x7E: String(UnicodeScalar(byte))
                        default: String(format: "\\x%02X", byte)
                        }
                    }.joined() + "\""
            }
            try Data((entries.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: folder + ".dict"))
            say("\(target.seeds.count) seeds in \(folder), \(entries.count) words in \(folder).dict")
        }
    }

    /// Prints a line and flushes it: a crash must not take the lines already printed with it.
    func say(_ line: String) {
        print(line)
        fflush(nil)
    }

    /// The command line, parsed.
    struct Options {
        var positional: [String] = []
        var mutations = 10_000
        var seed: UInt64?
        var caseSeed: UInt64?
        var maximumSize = 1 << 21
        var slowInputLimit = Duration.seconds(5)
        var out = "."
        var fixtures = WireCorpus.sourceTreeFolder
        var help = false

        init(_ arguments: [String]) throws {
            var remaining = arguments[...]
            func value(of option: String) throws -> String {
                guard let value = remaining.popFirst() else { throw FuzzSetupError("\(option) needs a value") }
                return value
            }
            func number<Number: LosslessStringConvertible>(of option: String) throws -> Number {
                let text = try value(of: option)
                guard let number = Number(text) else { throw FuzzSetupError("\(option) needs a number, not \(text)") }
                return number
            }
            while let argument = remaining.popFirst() {
                switch argument {
                case "--mutations": mutations = try number(of: argument)
                case "--seed": seed = try number(of: argument)
                case "--case-seed": caseSeed = try number(of: argument)
                case "--max-size": maximumSize = try number(of: argument)
                case "--slow": slowInputLimit = .milliseconds(Int((try number(of: argument) as Double) * 1000))
                case "--out": out = try value(of: argument)
                case "--fixtures": fixtures = URL(fileURLWithPath: try value(of: argument))
                case "--help", "-h": help = true
                case let option where option.hasPrefix("--"): throw FuzzSetupError("unknown option \(option)")
                default: positional.append(argument)
                }
            }
            guard mutations >= 0, maximumSize >= 0 else { throw FuzzSetupError("--mutations and --max-size must not be negative") }
        }
    }
#endif
