import Foundation

/// Code fed random and mutated bytes, with the oracle that judges what it did with them.
///
/// A target never crashes on purpose: `check` returns what went wrong, so that the seeded runs
/// (`abrova-fuzz`, the tests) can report the input and go on, and the libFuzzer build can save the
/// input before it stops. A crash, a hang or a runaway allocation inside the code under test still
/// stops the process; the runs and libFuzzer report those themselves.
public protocol FuzzTarget: Sendable {
    /// The target's name on the command line and in `ABROVA_FUZZ_TARGET`.
    var name: String { get }
    /// Inputs to start mutating from: valid ones and near misses.
    var seeds: [[UInt8]] { get }
    /// Words worth inserting: the keys and values of the input's grammar.
    var dictionary: [[UInt8]] { get }
    /// Runs one input: `nil` when the oracle holds, otherwise what went wrong.
    func check(_ input: [UInt8]) -> String?
    /// Whether the code under test still works after a run of inputs: `nil`, or what is broken.
    func checkStillWorks() -> String?
    /// Removes the files the target made, for a process that ends without releasing it.
    func removeFiles()
}

extension FuzzTarget {
    /// Stateless targets always still work.
    public func checkStillWorks() -> String? { nil }
    /// Most targets make no files.
    public func removeFiles() {}
}

/// An input a target's oracle refused.
public struct FuzzFinding: Error, Sendable, CustomStringConvertible {
    /// The target's name.
    public var target: String
    /// What went wrong.
    public var message: String
    /// The input (empty for a finding of `checkStillWorks`, which follows a whole run).
    public var input: [UInt8]

    /// A finding.
    public init(target: String, message: String, input: [UInt8]) {
        self.target = target
        self.message = message
        self.input = input
    }

    public var description: String {
        "\(target): \(message)\n  input (\(input.count) bytes): \(FuzzFinding.preview(input))"
    }

    /// The first 400 bytes of `input`, printable ASCII as is and the rest as `\xNN`.
    public static func preview(_ input: [UInt8]) -> String {
        var text = ""
        for byte in input.prefix(400) {
            switch byte {
            case 0x20...0x7E where byte != UInt8(ascii: "\\"): text.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "\n"): text += "\\n"
            default: text += String(format: "\\x%02X", byte)
            }
        }
        return input.count > 400 ? text + "... (\(input.count - 400) more bytes)" : text
    }
}

/// The fuzz targets by name.
public enum FuzzTargets {
    /// Every target's name, in the order `all` runs them.
    public static var names: [String] {
        #if ABROVA_SYSTEM_ZSTD
            ["push", "answers", "zstd", "zstd-pure", "http"]
        #else
            ["push", "answers", "zstd", "http"]
        #endif
    }

    /// What each target feeds its input to.
    public static let summaries = [
        "push": "the server's push body decoder, PushRequest(body:limits:)",
        "answers": "the SDK's answer decoders: PushResponse(body:), PullResponse(body:), ServerDocument(body:), Refusal(body:)",
        "zstd": "zstd framing: Zstd.decompress(_:limit:maximumWindowLog:) at two limits, and Zstd.compress",
        "zstd-pure": "the pure-Swift zstd codec (PureZstd) against libzstd: both decoders, and each encoder's frames in the other",
        "http": "the server's HTTP handling, SyncHTTPHandler.handle, over a SQLite store (input: a request as text)",
    ]

    /// The target called `name`, with its seeds from `fixtures` (Fixtures/wire) and built in code.
    ///
    /// - Throws: `FuzzSetupError` for an unknown name or a store that cannot be made.
    public static func make(_ name: String, fixtures: WireCorpus = WireCorpus.load()) throws -> any FuzzTarget {
        switch name {
        case "push": return PushBodyTarget(fixtures: fixtures)
        case "answers": return AnswerBodyTarget(fixtures: fixtures)
        case "zstd": return ZstdTarget(fixtures: fixtures)
        #if ABROVA_SYSTEM_ZSTD
            case "zstd-pure": return PureZstdTarget(fixtures: fixtures)
        #endif
        case "http": return try HTTPTarget(fixtures: fixtures)
        default: throw FuzzSetupError("no fuzz target \"\(name)\"; the targets are \(names.joined(separator: ", "))")
        }
    }
}

/// A target that could not be set up.
public struct FuzzSetupError: Error, CustomStringConvertible {
    /// What went wrong.
    public var description: String

    /// An error saying `description`.
    public init(_ description: String) { self.description = description }
}
