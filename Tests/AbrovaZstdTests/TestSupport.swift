import Foundation

@testable import AbrovaZstd

#if ABROVA_SYSTEM_ZSTD
    import CZstd
#endif

/// SplitMix64: small, fast and reproducible from a printed seed.
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

enum TestSeed {
    /// `ABROVA_PROPERTY_SEED` from the environment, or a fresh one; printed so a failure can be replayed.
    static func make(_ test: String) -> UInt64 {
        let seed: UInt64
        if let text = ProcessInfo.processInfo.environment["ABROVA_PROPERTY_SEED"], let value = UInt64(text) {
            seed = value
        } else {
            seed = UInt64.random(in: 0...UInt64(UInt32.max))
        }
        print("\(test): ABROVA_PROPERTY_SEED=\(seed)")
        return seed
    }
}

enum Corpus {
    static let words = [
        "id", "name", "value", "items", "created_at", "user", "status", "true", "false", "null",
        "description", "price", "count", "tags", "alpha", "beta", "gamma", "delta", "abrova", "sdk",
    ]

    /// JSON-like text with repeated keys and varied values.
    static func json(_ size: Int, _ rng: inout SeededRandom) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(size + 64)
        out.append(UInt8(ascii: "["))
        while out.count < size {
            var s = "{\"\(words[Int(rng.next() % 20)])\": \(rng.next() % 100000), "
            s += "\"\(words[Int(rng.next() % 20)])\": \"\(words[Int(rng.next() % 20)])-\(rng.next() % 1000)\", "
            s +=
                "\"nested\": {\"\(words[Int(rng.next() % 20)])\": [\(rng.next() % 10), \(rng.next() % 500), \(Double(rng.next() % 10000) / 100)]}},\n"
            out.append(contentsOf: Array(s.utf8))
        }
        return Array(out.prefix(size))
    }

    static func random(_ size: Int, _ rng: inout SeededRandom) -> [UInt8] {
        (0..<size).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
    }

    /// Long runs, short periodic patterns and a few random bytes.
    static func repetitive(_ size: Int, _ rng: inout SeededRandom) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(size)
        while out.count < size {
            switch rng.next() % 4 {
            case 0: out.append(contentsOf: repeatElement(UInt8(truncatingIfNeeded: rng.next()), count: Int(rng.next() % 3000)))
            case 1:
                let period = Int(rng.next() % 12) + 1
                let pattern = (0..<period).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                for i in 0..<Int(rng.next() % 5000) { out.append(pattern[i % period]) }
            case 2: out.append(contentsOf: (0..<Int(rng.next() % 40)).map { _ in UInt8(truncatingIfNeeded: rng.next()) })
            default:
                if out.count > 10 {
                    let start = Int(rng.next() % UInt64(out.count))
                    let length = min(Int(rng.next() % 2000), out.count - start)
                    out.append(contentsOf: out[start..<(start + length)])
                }
            }
        }
        return Array(out.prefix(size))
    }

    /// Text-ish bytes with a skewed alphabet, including bytes above 127.
    static func skewed(_ size: Int, _ rng: inout SeededRandom) -> [UInt8] {
        (0..<size).map { _ in
            let r = rng.next() % 100
            if r < 60 { return UInt8(97 + rng.next() % 6) }
            if r < 90 { return UInt8(200 + rng.next() % 40) }
            return UInt8(truncatingIfNeeded: rng.next())
        }
    }

    /// A mixed sample: mostly small sizes, some over 128 KiB, a few near 1 MiB.
    static func sample(_ rng: inout SeededRandom, maxSize: Int = 1 << 20) -> (String, [UInt8]) {
        let sizeClass = rng.next() % 10
        var size: Int
        switch sizeClass {
        case 0: size = Int(rng.next() % 16)
        case 1...4: size = Int(rng.next() % 4000)
        case 5...7: size = Int(rng.next() % 60000)
        case 8: size = 128 * 1024 + Int(rng.next() % 200_000)
        default: size = Int(rng.next() % UInt64(maxSize))
        }
        size = min(size, maxSize)
        switch rng.next() % 5 {
        case 0, 1: return ("json(\(size))", json(size, &rng))
        case 2: return ("random(\(size))", random(size, &rng))
        case 3: return ("repetitive(\(size))", repetitive(size, &rng))
        default: return ("skewed(\(size))", skewed(size, &rng))
        }
    }
}

#if ABROVA_SYSTEM_ZSTD
    enum LibZstd {
        /// One-shot compression with explicit frame options.
        static func compress(_ input: [UInt8], level: Int32, checksum: Bool = true, contentSize: Bool = true) -> [UInt8] {
            let cctx = ZSTD_createCCtx()!
            defer { ZSTD_freeCCtx(cctx) }
            ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level)
            ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, checksum ? 1 : 0)
            ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, contentSize ? 1 : 0)
            var out = [UInt8](repeating: 0, count: ZSTD_compressBound(input.count))
            let n = input.withUnsafeBytes { src in
                out.withUnsafeMutableBytes { dst in
                    ZSTD_compress2(cctx, dst.baseAddress, dst.count, src.baseAddress, src.count)
                }
            }
            precondition(ZSTD_isError(n) == 0, "libzstd compress failed")
            return Array(out.prefix(n))
        }

        /// Streaming compression in chunks: no content size, so frames are not single segment.
        static func compressStreaming(_ input: [UInt8], level: Int32, checksum: Bool, chunk: Int = 50_000) -> [UInt8] {
            let cctx = ZSTD_createCCtx()!
            defer { ZSTD_freeCCtx(cctx) }
            ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level)
            ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, checksum ? 1 : 0)
            var result: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: ZSTD_CStreamOutSize())
            var position = 0
            input.withUnsafeBytes { src in
                repeat {
                    let end = min(input.count, position + chunk)
                    let last = end == input.count
                    var inBuffer = ZSTD_inBuffer(src: src.baseAddress.map { $0 + position }, size: end - position, pos: 0)
                    var finished = false
                    repeat {
                        let remaining = buffer.withUnsafeMutableBytes { dst -> Int in
                            var outBuffer = ZSTD_outBuffer(dst: dst.baseAddress, size: dst.count, pos: 0)
                            let r = ZSTD_compressStream2(cctx, &outBuffer, &inBuffer, last ? ZSTD_e_end : ZSTD_e_continue)
                            precondition(ZSTD_isError(r) == 0, "libzstd stream compress failed")
                            result.append(contentsOf: dst.prefix(outBuffer.pos))
                            return r
                        }
                        finished = last ? remaining == 0 : inBuffer.pos == inBuffer.size
                    } while !finished
                    position = end
                } while position < input.count
            }
            return result
        }

        /// One-shot decompression into a buffer of `capacity` bytes; nil when libzstd refuses.
        static func decompress(_ frame: [UInt8], capacity: Int) -> [UInt8]? {
            var out = [UInt8](repeating: 0, count: max(capacity, 1))
            let n = frame.withUnsafeBytes { src in
                out.withUnsafeMutableBytes { dst in
                    ZSTD_decompress(dst.baseAddress, capacity, src.baseAddress, src.count)
                }
            }
            if ZSTD_isError(n) != 0 { return nil }
            return Array(out.prefix(n))
        }

        static func errorName(_ frame: [UInt8], capacity: Int) -> String {
            var out = [UInt8](repeating: 0, count: max(capacity, 1))
            let n = frame.withUnsafeBytes { src in
                out.withUnsafeMutableBytes { dst in
                    ZSTD_decompress(dst.baseAddress, capacity, src.baseAddress, src.count)
                }
            }
            return String(cString: ZSTD_getErrorName(n))
        }
    }
#endif
