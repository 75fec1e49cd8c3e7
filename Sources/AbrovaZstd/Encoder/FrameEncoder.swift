/// Writes one zstd frame: header with content size, blocks of at most 128 KiB,
/// and the xxhash64 content checksum.
enum FrameEncoder {
    static let blockSize = 128 * 1024
    /// Inputs up to the default decoder window are single segment (window = content size).
    static let singleSegmentLimit = 1 << 23
    static let windowLog = 23

    static func compress(_ input: [UInt8], level: Int) -> [UInt8] {
        var out: [UInt8] = [0x28, 0xB5, 0x2F, 0xFD]
        out.reserveCapacity(input.count / 2 + 64)
        writeHeader(size: input.count, into: &out)

        let parameters = MatchFinderParameters.forLevel(level)
        let maxDistance = input.count <= singleSegmentLimit ? max(1, input.count) : 1 << windowLog
        var finder = MatchFinder(parameters: parameters, inputSize: input.count, maxDistance: maxDistance)
        var repeats = RepeatOffsets()
        var sequences: [Sequence] = []
        var literals: [UInt8] = []
        var body: [UInt8] = []

        input.withUnsafeBufferPointer { data in
            if data.isEmpty {
                writeBlockHeader(last: true, type: 0, size: 0, into: &out)
                return
            }
            var start = 0
            while start < data.count {
                let end = min(data.count, start + blockSize)
                let last = end == data.count
                let size = end - start
                if isSingleByte(data, start, end) {
                    writeBlockHeader(last: last, type: 1, size: size, into: &out)
                    out.append(data[start])
                    // Keep the match finder's view of the input complete.
                    finder.parse(data, blockStart: start, blockEnd: end, repeats: repeats, sequences: &sequences, literals: &literals)
                    start = end
                    continue
                }
                finder.parse(data, blockStart: start, blockEnd: end, repeats: repeats, sequences: &sequences, literals: &literals)
                body.removeAll(keepingCapacity: true)
                LiteralsEncoder.encode(literals, into: &body)
                var blockRepeats = repeats
                SequencesEncoder.encode(sequences, repeats: &blockRepeats, into: &body)
                if body.count < size {
                    writeBlockHeader(last: last, type: 2, size: body.count, into: &out)
                    out.append(contentsOf: body)
                    repeats = blockRepeats
                } else {
                    // A raw block leaves the decoder's repeat offsets untouched.
                    writeBlockHeader(last: last, type: 0, size: size, into: &out)
                    out.append(contentsOf: UnsafeBufferPointer(rebasing: data[start..<end]))
                }
                start = end
            }
        }
        let checksum = UInt32(truncatingIfNeeded: XXHash64.hash(input, 0..<input.count))
        for k in 0..<4 { out.append(UInt8(truncatingIfNeeded: checksum >> UInt32(8 * k))) }
        return out
    }

    private static func isSingleByte(_ data: UnsafeBufferPointer<UInt8>, _ start: Int, _ end: Int) -> Bool {
        let first = data[start]
        for i in start..<end where data[i] != first { return false }
        return true
    }

    private static func writeHeader(size: Int, into out: inout [UInt8]) {
        let single = size <= singleSegmentLimit
        let contentSizeFlag: Int
        let fieldSize: Int
        if single && size < 256 {
            (contentSizeFlag, fieldSize) = (0, 1)
        } else if size >= 256 && size < 65536 + 256 {
            (contentSizeFlag, fieldSize) = (1, 2)
        } else if UInt64(size) <= UInt64(UInt32.max) {
            (contentSizeFlag, fieldSize) = (2, 4)
        } else {
            (contentSizeFlag, fieldSize) = (3, 8)
        }
        out.append(UInt8(contentSizeFlag << 6 | (single ? 0x20 : 0) | 0x04))
        if !single { out.append(UInt8((windowLog - 10) << 3)) }
        let value = UInt64(fieldSize == 2 ? size - 256 : size)
        for k in 0..<fieldSize { out.append(UInt8(truncatingIfNeeded: value >> UInt64(8 * k))) }
    }

    private static func writeBlockHeader(last: Bool, type: Int, size: Int, into out: inout [UInt8]) {
        let v = (last ? 1 : 0) | type << 1 | size << 3
        out.append(UInt8(truncatingIfNeeded: v))
        out.append(UInt8(truncatingIfNeeded: v >> 8))
        out.append(UInt8(truncatingIfNeeded: v >> 16))
    }
}
