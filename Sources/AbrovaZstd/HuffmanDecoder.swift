/// A Huffman decoding table for literals (RFC 8878 section 4.2): indexed by the
/// next `maxBits` bits of the stream, each entry holds a symbol and its code length.
struct HuffmanDecodingTable {
    /// Longest code length; the spec caps it at 11.
    static let maxTableLog = 11

    let maxBits: Int
    /// `symbol | (codeLength << 8)` for every `maxBits`-bit prefix.
    let entries: [UInt16]

    /// Parses a Huffman tree description at `bytes[start..<end]`; returns the
    /// table and the number of bytes the description used.
    static func read(_ bytes: [UInt8], start: Int, end: Int) throws(PureZstdError) -> (HuffmanDecodingTable, Int) {
        guard start < end, end <= bytes.count else { throw .corrupt("a Huffman table description is missing") }
        let header = Int(bytes[start])
        var weights: [UInt8]
        let used: Int
        if header < 128 {
            // FSE-compressed weights, `header` bytes long.
            guard header > 0, start + 1 + header <= end else {
                throw .corrupt("a Huffman table description runs past the literals section")
            }
            weights = try decodeCompressedWeights(bytes, start: start + 1, end: start + 1 + header)
            used = 1 + header
        } else {
            // Direct 4-bit weights, two per byte, high nibble first.
            let count = header - 127
            let size = (count + 1) / 2
            guard start + 1 + size <= end else {
                throw .corrupt("a Huffman table description runs past the literals section")
            }
            weights = []
            weights.reserveCapacity(count)
            for i in 0..<count {
                let byte = bytes[start + 1 + i / 2]
                weights.append(i % 2 == 0 ? byte >> 4 : byte & 0x0F)
            }
            used = 1 + size
        }
        return (try build(weights: weights), used)
    }

    /// Decodes weights compressed with an FSE table of accuracy log at most 6,
    /// using two interleaved states until the bitstream overflows.
    private static func decodeCompressedWeights(_ bytes: [UInt8], start: Int, end: Int) throws(PureZstdError) -> [UInt8] {
        let (distribution, used) = try FSEDistribution.read(bytes, start: start, end: end, maxSymbol: 255, maxAccuracyLog: 6)
        let table = try FSEDecodingTable(distribution)
        var reader = try BackwardBitReader(bytes, start: start + used, end: end, what: "a Huffman weight bitstream")
        var state1 = Int(reader.read(table.accuracyLog))
        var state2 = Int(reader.read(table.accuracyLog))
        var weights: [UInt8] = []
        weights.reserveCapacity(255)
        let entries = table.entries
        while true {
            // Each state emits a symbol, then updates; an update that reads past
            // the start of the stream means the other state holds the last symbol.
            guard weights.count < 255 else { throw .corrupt("a Huffman table has too many weights") }
            let e1 = entries[state1]
            weights.append(e1.symbol)
            state1 = Int(e1.baseline) + Int(reader.read(Int(e1.bitCount)))
            if reader.bitsRemaining < 0 {
                guard weights.count < 255 else { throw .corrupt("a Huffman table has too many weights") }
                weights.append(entries[state2].symbol)
                break
            }
            guard weights.count < 255 else { throw .corrupt("a Huffman table has too many weights") }
            let e2 = entries[state2]
            weights.append(e2.symbol)
            state2 = Int(e2.baseline) + Int(reader.read(Int(e2.bitCount)))
            if reader.bitsRemaining < 0 {
                guard weights.count < 255 else { throw .corrupt("a Huffman table has too many weights") }
                weights.append(entries[state1].symbol)
                break
            }
        }
        return weights
    }

    /// Builds the table from the explicit weights; the last symbol's weight is implied.
    static func build(weights: [UInt8]) throws(PureZstdError) -> HuffmanDecodingTable {
        guard !weights.isEmpty, weights.count <= 255 else { throw .corrupt("a Huffman table is malformed") }
        var total = 0
        for w in weights {
            guard w <= maxTableLog else { throw .corrupt("a Huffman table has a weight above 11") }
            if w > 0 { total += 1 << (Int(w) - 1) }
        }
        guard total > 0 else { throw .corrupt("a Huffman table has no symbols") }
        let maxBits = (Int.bitWidth - 1 - total.leadingZeroBitCount) + 1
        guard maxBits <= maxTableLog else { throw .corrupt("a Huffman table is deeper than 11 bits") }
        let rest = (1 << maxBits) - total
        guard rest & (rest - 1) == 0 else { throw .corrupt("a Huffman table's weights do not form a complete code") }
        let lastWeight = (Int.bitWidth - 1 - rest.leadingZeroBitCount) + 1
        var all = weights
        all.append(UInt8(lastWeight))

        var rankCount = [Int](repeating: 0, count: maxTableLog + 2)
        for w in all { rankCount[Int(w)] += 1 }
        // A complete code has an even number (at least 2) of longest codes.
        guard rankCount[1] >= 2, rankCount[1] & 1 == 0 else {
            throw .corrupt("a Huffman table is malformed")
        }
        // Codes are laid out by increasing weight, then by symbol.
        var rankStart = [Int](repeating: 0, count: maxTableLog + 2)
        var next = 0
        for w in 1...(maxTableLog + 1) {
            rankStart[w] = next
            next += rankCount[w] << (w - 1)
        }
        guard next == 1 << maxBits else { throw .corrupt("a Huffman table is malformed") }
        var entries = [UInt16](repeating: 0, count: 1 << maxBits)
        for (symbol, w) in all.enumerated() where w > 0 {
            let span = 1 << (Int(w) - 1)
            let length = maxBits + 1 - Int(w)
            let value = UInt16(symbol) | UInt16(length << 8)
            let first = rankStart[Int(w)]
            for i in first..<(first + span) { entries[i] = value }
            rankStart[Int(w)] = first + span
        }
        return HuffmanDecodingTable(maxBits: maxBits, entries: entries)
    }

    /// Decodes `count` symbols from the stream `bytes[start..<end]`, which must be used exactly.
    func decodeStream(_ bytes: [UInt8], start: Int, end: Int, count: Int, into output: inout [UInt8], oneOfFour: Bool = false)
        throws(PureZstdError)
    {
        var reader = try BackwardBitReader(
            bytes, start: start, end: end, what: oneOfFour ? "one of four Huffman-coded literal streams" : "a Huffman-coded literal stream")
        let bits = maxBits
        entries.withUnsafeBufferPointer { table in
            for _ in 0..<count {
                let e = table[Int(reader.peek(bits))]
                output.append(UInt8(truncatingIfNeeded: e))
                reader.skip(Int(e >> 8))
            }
        }
        guard reader.isExactlyConsumed else {
            throw .corrupt(
                oneOfFour
                    ? "one of four Huffman-coded literal streams does not end where its size says"
                    : "a Huffman-coded literal stream does not end where its size says")
        }
    }
}
