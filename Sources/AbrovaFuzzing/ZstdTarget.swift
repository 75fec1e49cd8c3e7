import AbrovaTestSupport
import AbrovaWire

/// zstd framing: `Zstd.decompress(_:limit:maximumWindowLog:)` at a large and a small limit, and
/// `Zstd.compress` of the input itself.
///
/// Oracle: a refusal is a `ZstdError` that maps to a 4xx (`corrupt`, `tooLarge`,
/// `windowTooLarge`; never `internalFailure`, which is a 500); output never exceeds the limit;
/// the two limits agree (the same output when it fits both, `tooLarge` at the small one when only
/// the large one holds it; a refusal at the large one is the same refusal or `tooLarge` at the
/// small one, which stops no later in the same stream); what decompresses
/// compresses and decompresses back to itself, and so does the raw input.
public struct ZstdTarget: FuzzTarget {
    public let name = "zstd"
    public let seeds: [[UInt8]]
    public let dictionary: [[UInt8]] = [
        [0x28, 0xB5, 0x2F, 0xFD], // a frame's magic number
        [0x50, 0x2A, 0x4D, 0x18], // a skippable frame's
        [0x00, 0x00, 0x00, 0x00], [0xFF, 0xFF, 0xFF, 0xFF], [0x01, 0x00, 0x00], [0x00, 0x00, 0x80],
    ]
    /// The large limit and the window: 1 MiB each, so that a run stays light.
    let limit = 1 << 20
    let maximumWindowLog = 20
    /// The small limit, below most seeds' output.
    let smallLimit = 100

    /// The target, seeded with the wire bodies compressed in several ways, and frames that
    /// misbehave: bombs, a lying content size, a window too large, skippable frames.
    public init(fixtures: WireCorpus) {
        let bodies = Array((fixtures.pushBodies + fixtures.answerBodies).prefix(24)) + BuiltSeeds.pushBodies + BuiltSeeds.answerBodies
        var seeds: [[UInt8]] = []
        // Made with zstd's own encoder; a failure leaves that seed out.
        for (index, body) in bodies.enumerated() {
            if let frame = try? Zstd.compress(body, level: Int32([1, 3, 19][index % 3])) { seeds.append(frame) }
        }
        let body = BuiltSeeds.pushBodies[0]
        if let frame = try? Zstd.compress(body) {
            seeds.append(frame + frame)
            seeds.append([0x50, 0x2A, 0x4D, 0x18, 4, 0, 0, 0, 1, 2, 3, 4] + frame)
            seeds.append(ZstdFrames.replacingContentSize(of: frame, with: UInt64(body.count + 1)))
        }
        if let empty = try? Zstd.compress([]) { seeds.append(empty) }
        seeds += [
            ZstdFrames.windowedFrame(repeating: body, times: 3),
            ZstdFrames.windowedFrame(repeating: [UInt8](repeating: 0x20, count: 1 << 16), times: 20),
            ZstdFrames.windowedFrame(repeating: [UInt8](repeating: 0x20, count: 1 << 16), times: 20, declaringSize: true),
            ZstdFrames.windowedFrame(repeating: body, times: 1, windowLog: 24),
        ]
        self.seeds = seeds
    }

    public func check(_ input: [UInt8]) -> String? {
        let large = decompress(input, limit: limit)
        let small = decompress(input, limit: smallLimit)
        for (result, bound) in [(large, limit), (small, smallLimit)] {
            switch result {
            case .success(let output) where output.count > bound:
                return "decompress returned \(output.count) bytes past its limit \(bound)"
            case .failure(let error) where error.code == .internalFailure:
                return "decompress refused with \(error) under limit \(bound)"
            default:
                continue
            }
        }
        switch (large, small) {
        case (.success(let output), .success(let fitting)) where output != fitting:
            return "decompress gave different bytes under limits \(limit) and \(smallLimit)"
        case (.success(let output), .failure(let error)) where output.count <= smallLimit || error.code != .tooLarge:
            return "decompress gave \(output.count) bytes under limit \(limit) but refused under \(smallLimit): \(error)"
        case (.failure(let error), .success):
            return "decompress refused under limit \(limit) (\(error)) but not under \(smallLimit)"
        case (.failure(let error), .failure(let other)) where other.code != error.code && other.code != .tooLarge:
            return "decompress refused under limit \(limit) with \(error) but under \(smallLimit) with \(other)"
        default:
            break
        }
        if case .success(let output) = large, let problem = roundTripProblem(output, what: "the decompressed output") { return problem }
        return roundTripProblem(input, what: "the input")
    }

    private func decompress(_ input: [UInt8], limit: Int) -> Result<[UInt8], ZstdError> {
        Result { () throws(ZstdError) in try Zstd.decompress(input, limit: limit, maximumWindowLog: maximumWindowLog) }
    }

    /// Whether `bytes` compresses and decompresses back to itself.
    private func roundTripProblem(_ bytes: [UInt8], what: String) -> String? {
        do throws(ZstdError) {
            let back = try Zstd.decompress(try Zstd.compress(bytes, level: 1), limit: bytes.count, maximumWindowLog: maximumWindowLog + 1)
            return back == bytes ? nil : "\(what) (\(bytes.count) bytes) compressed and decompressed to other bytes"
        } catch {
            return "\(what) (\(bytes.count) bytes) did not survive compression: \(error)"
        }
    }
}
