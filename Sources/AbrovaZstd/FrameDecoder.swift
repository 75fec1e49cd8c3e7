/// Walks the input frame by frame (RFC 8878 section 3.1) and decodes blocks.
struct FrameDecoder {
    static let zstdMagic: UInt32 = 0xFD2F_B528
    static let skippableMagicMask: UInt32 = 0xFFFF_FFF0
    static let skippableMagic: UInt32 = 0x184D_2A50
    static let maxBlockSize = 128 * 1024

    private let input: [UInt8]
    private let maximumWindowLog: Int
    private var output: OutputBuffer
    private var literals: [UInt8] = []

    init(input: [UInt8], limit: Int, maximumWindowLog: Int) {
        self.input = input
        self.maximumWindowLog = maximumWindowLog
        self.output = OutputBuffer(limit: limit)
    }

    private static let truncated = PureZstdError.corrupt("the body ends inside a zstd frame")

    private func readLE(_ at: Int, _ size: Int) throws(PureZstdError) -> UInt64 {
        guard at >= 0, size <= input.count - at else { throw FrameDecoder.truncated }
        var v: UInt64 = 0
        for k in 0..<size { v |= UInt64(input[at + k]) << UInt64(8 * k) }
        return v
    }

    mutating func decodeAll() throws(PureZstdError) -> [UInt8] {
        guard !input.isEmpty else { throw .corrupt("the input is empty") }
        var p = 0
        while p < input.count {
            guard input.count - p >= 4 else {
                throw .corrupt(p == 0 ? "the input is too short to be a zstd frame" : "the input has trailing bytes after the last frame")
            }
            let magic = UInt32(try readLE(p, 4))
            if magic == FrameDecoder.zstdMagic {
                p = try decodeFrame(at: p + 4)
            } else if magic & FrameDecoder.skippableMagicMask == FrameDecoder.skippableMagic {
                let size = try readLE(p + 4, 4)
                guard size <= UInt64(input.count - p - 8) else {
                    throw .corrupt("the body ends inside a skippable frame")
                }
                p += 8 + Int(size)
            } else {
                throw .corrupt(p == 0 ? "the input does not start with a zstd frame" : "the input has trailing bytes after the last frame")
            }
        }
        return output.finish()
    }

    /// Decodes one frame whose header starts at `start` (just after the magic);
    /// returns the index after the frame.
    private mutating func decodeFrame(at start: Int) throws(PureZstdError) -> Int {
        var p = start
        let descriptor = Int(try readLE(p, 1))
        p += 1
        let contentSizeFlag = descriptor >> 6
        let singleSegment = descriptor & 0x20 != 0
        guard descriptor & 0x08 == 0 else { throw .corrupt("a frame header has its reserved bit set") }
        let hasChecksum = descriptor & 0x04 != 0
        let dictionaryIDFlag = descriptor & 3

        var windowSize: UInt64 = 0
        if !singleSegment {
            let w = Int(try readLE(p, 1))
            p += 1
            let windowLog = 10 + (w >> 3)
            let base = UInt64(1) << UInt64(windowLog)
            windowSize = base + (base / 8) * UInt64(w & 7)
        }
        let dictionaryIDSize = [0, 1, 2, 4][dictionaryIDFlag]
        let dictionaryID = try readLE(p, dictionaryIDSize)
        p += dictionaryIDSize
        guard dictionaryID == 0 else {
            throw .corrupt("the frame needs dictionary \(dictionaryID), and dictionaries are not supported")
        }
        let contentSizeSize = [singleSegment ? 1 : 0, 2, 4, 8][contentSizeFlag]
        var contentSize: UInt64?
        if contentSizeSize > 0 {
            var v = try readLE(p, contentSizeSize)
            if contentSizeSize == 2 { v += 256 }
            contentSize = v
        }
        p += contentSizeSize
        if singleSegment { windowSize = contentSize ?? 0 }

        let maximumWindow = UInt64(1) << UInt64(maximumWindowLog)
        // The verdicts are libzstd's (streaming, as the wire decodes), so that a body gets the same
        // answer from either codec: it decodes a single-segment frame that fits its 128 KiB output
        // chunk without checking the window, and takes no declared size on trust (a frame that
        // declares more than the limit fails as its output passes the limit, or as corrupt when
        // it holds less than it declares).
        let skipsWindowCheck = singleSegment && windowSize <= UInt64(FrameDecoder.maxBlockSize)
        guard skipsWindowCheck || windowSize <= maximumWindow else {
            throw PureZstdError(.windowTooLarge, "the frame needs a window of \(windowSize) bytes, above the maximum of \(maximumWindow)")
        }
        if let contentSize, contentSize <= UInt64(output.limit - output.count) {
            // A first size only: a lying header reserves at most 32 times the input left.
            output.reserve(Int(min(contentSize, max(4096, UInt64(input.count - p) * 32))))
        }
        let window = Int(windowSize)
        let blockMaximum = min(window, FrameDecoder.maxBlockSize)
        let frameStart = output.count

        var literalsDecoder = LiteralsDecoder()
        var sequencesDecoder = SequencesDecoder()
        while true {
            let header = Int(try readLE(p, 3))
            p += 3
            let last = header & 1 != 0
            let type = (header >> 1) & 3
            let size = header >> 3
            switch type {
            case 0:
                guard size <= blockMaximum else { throw .corrupt("a raw block is larger than the block maximum size") }
                guard size <= input.count - p else { throw FrameDecoder.truncated }
                try output.ensure(size)
                output.append(input, p..<(p + size))
                p += size
            case 1:
                guard size <= blockMaximum else { throw .corrupt("an RLE block is larger than the block maximum size") }
                guard p < input.count else { throw FrameDecoder.truncated }
                try output.ensure(size)
                output.appendRepeating(input[p], size)
                p += 1
            case 2:
                guard size <= blockMaximum else { throw .corrupt("a compressed block is larger than the block maximum size") }
                guard size <= input.count - p else { throw FrameDecoder.truncated }
                let end = p + size
                let afterLiterals = try literalsDecoder.decode(input, start: p, end: end, blockMaximum: blockMaximum, into: &literals)
                try sequencesDecoder.decodeAndExecute(
                    input, start: afterLiterals, end: end, literals: literals, output: &output,
                    frameStart: frameStart, windowSize: window, blockMaximum: blockMaximum)
                p = end
            default:
                throw .corrupt("a block uses the reserved block type")
            }
            if last { break }
        }

        let produced = output.count - frameStart
        if let contentSize, UInt64(produced) != contentSize {
            throw .corrupt("the frame decodes to \(produced) bytes but its header declares \(contentSize)")
        }
        if hasChecksum {
            let stored = UInt32(try readLE(p, 4))
            p += 4
            let actual = output.storage.withUnsafeBufferPointer { buffer in
                UInt32(truncatingIfNeeded: XXHash64.hash(UnsafeBufferPointer(rebasing: buffer[frameStart..<output.count])))
            }
            guard stored == actual else { throw .corrupt("the content checksum does not match") }
        }
        return p
    }
}
