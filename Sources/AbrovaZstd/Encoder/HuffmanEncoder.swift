/// Builds length-limited Huffman codes for literals and writes the zstd tree
/// description and coded streams (RFC 8878 section 4.2).
struct HuffmanEncoder {
    static let maxBits = 11

    /// Code length of each byte value (0 = absent).
    let lengths: [UInt8]
    /// Code of each byte value, `lengths[s]` bits long.
    let codes: [UInt16]
    let maxLength: Int

    /// Builds a code for the byte histogram `counts`; nil when fewer than two symbols occur.
    init?(counts: [Int]) {
        let symbols = (0..<256).filter { counts[$0] > 0 }.sorted { counts[$0] < counts[$1] || (counts[$0] == counts[$1] && $0 < $1) }
        guard symbols.count >= 2 else { return nil }
        var lengths = HuffmanEncoder.huffmanLengths(symbols: symbols, counts: counts)
        HuffmanEncoder.limit(&lengths, counts: counts, maxBits: HuffmanEncoder.maxBits)
        var maxLength = 0
        for l in lengths { maxLength = max(maxLength, Int(l)) }
        // Canonical zstd layout: by weight ascending (longest codes first), then symbol.
        var codes = [UInt16](repeating: 0, count: 256)
        var next = 0
        for w in 1...maxLength {
            let length = maxLength + 1 - w
            for s in 0..<256 where Int(lengths[s]) == length {
                codes[s] = UInt16(next >> (w - 1))
                next += 1 << (w - 1)
            }
        }
        self.lengths = lengths
        self.codes = codes
        self.maxLength = maxLength
    }

    /// Optimal (unlimited) code lengths by the two-queue Huffman construction.
    private static func huffmanLengths(symbols: [Int], counts: [Int]) -> [UInt8] {
        let n = symbols.count
        var weight = symbols.map { counts[$0] }
        var parent = [Int](repeating: -1, count: 2 * n - 1)
        weight.reserveCapacity(2 * n - 1)
        var leaf = 0
        var node = n
        func takeSmallest() -> Int {
            if leaf < n && (node >= weight.count || weight[leaf] <= weight[node]) {
                leaf += 1
                return leaf - 1
            }
            node += 1
            return node - 1
        }
        for _ in 0..<(n - 1) {
            let a = takeSmallest()
            let b = takeSmallest()
            let id = weight.count
            weight.append(weight[a] + weight[b])
            parent[a] = id
            parent[b] = id
        }
        var depth = [Int](repeating: 0, count: 2 * n - 1)
        for i in stride(from: 2 * n - 3, through: 0, by: -1) { depth[i] = depth[parent[i]] + 1 }
        var lengths = [UInt8](repeating: 0, count: 256)
        for (i, s) in symbols.enumerated() { lengths[s] = UInt8(min(depth[i], 255)) }
        return lengths
    }

    /// Caps lengths at `maxBits` and restores an exactly complete code (Kraft sum 1),
    /// which zstd needs because the last weight is implied.
    private static func limit(_ lengths: inout [UInt8], counts: [Int], maxBits: Int) {
        let full = 1 << maxBits
        var kraft = 0
        for s in 0..<256 where lengths[s] > 0 {
            if Int(lengths[s]) > maxBits { lengths[s] = UInt8(maxBits) }
            kraft += full >> Int(lengths[s])
        }
        while kraft > full {
            // Lengthen the rarest among the longest codes still below the cap.
            var best = -1
            for s in 0..<256 where lengths[s] > 0 && Int(lengths[s]) < maxBits {
                if best < 0 || lengths[s] > lengths[best] || (lengths[s] == lengths[best] && counts[s] < counts[best]) { best = s }
            }
            if best < 0 { break }
            kraft -= full >> (Int(lengths[best]) + 1)
            lengths[best] += 1
        }
        while kraft < full {
            // Shorten the most frequent code that still fits in the slack.
            let slack = full - kraft
            var best = -1
            for s in 0..<256 where lengths[s] > 1 && (full >> Int(lengths[s])) <= slack {
                if best < 0 || counts[s] > counts[best] { best = s }
            }
            if best < 0 { break }
            kraft += full >> Int(lengths[best])
            lengths[best] -= 1
        }
    }

    /// Bits needed to code the histogram.
    func codedBits(_ counts: [Int]) -> Int {
        var bits = 0
        for s in 0..<256 { bits += counts[s] * Int(lengths[s]) }
        return bits
    }

    /// The tree description: FSE-compressed weights when smaller, else direct 4-bit
    /// weights; nil when neither form can express it.
    func treeDescription() -> [UInt8]? {
        var last = 255
        while last > 0 && lengths[last] == 0 { last -= 1 }
        let weights: [UInt8] = (0..<last).map { s in lengths[s] == 0 ? 0 : UInt8(maxLength + 1 - Int(lengths[s])) }
        var best: [UInt8]?
        if let compressed = HuffmanEncoder.compressWeights(weights), compressed.count < 128 {
            best = [UInt8(compressed.count)] + compressed
        }
        if weights.count <= 128 {
            var direct: [UInt8] = [UInt8(127 + weights.count)]
            var i = 0
            while i < weights.count {
                let high = weights[i]
                let low = i + 1 < weights.count ? weights[i + 1] : 0
                direct.append(high << 4 | low)
                i += 2
            }
            if best == nil || direct.count < best!.count { best = direct }
        }
        return best
    }

    /// FSE-compresses the weights with two interleaved states (accuracy log <= 6).
    private static func compressWeights(_ weights: [UInt8]) -> [UInt8]? {
        let m = weights.count
        guard m >= 2 else { return nil }
        var counts = [Int](repeating: 0, count: 13)
        for w in weights { counts[Int(w)] += 1 }
        let distinct = counts.filter { $0 > 0 }.count
        guard distinct >= 2 else { return nil }
        let log = FSENormalizer.tableLog(samples: m, distinct: distinct, maxLog: 6)
        var norm = FSENormalizer.normalize(counts, total: m, log: log)
        while norm.last == 0 { norm.removeLast() }
        var header = BitWriter()
        FSENormalizer.writeDescription(norm, log: log, into: &header)
        let table = FSEEncodingTable(norm, log: log)
        var writer = BitWriter(capacity: m)
        // State 1 decodes even indices, state 2 odd ones; both start from the
        // last symbol they decode.
        let lastEven = (m - 1) & ~1
        let lastOdd = (m - 1) | 1 == m - 1 ? m - 1 : m - 2
        var state1 = table.initialState(Int(weights[lastEven]))
        var state2 = table.initialState(Int(weights[lastOdd]))
        var i = m - 3
        while i >= 0 {
            if i & 1 == 0 {
                table.encode(Int(weights[i]), state: &state1, into: &writer)
            } else {
                table.encode(Int(weights[i]), state: &state2, into: &writer)
            }
            i -= 1
        }
        writer.write(UInt64(state2), log)
        writer.write(UInt64(state1), log)
        return header.finishForward() + writer.finishBackward()
    }

    /// Codes `literals[range]` as one backward stream.
    func encodeStream(_ literals: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> [UInt8] {
        var writer = BitWriter(capacity: range.count)
        var i = range.upperBound - 1
        while i >= range.lowerBound {
            let s = Int(literals[i])
            writer.write(UInt64(codes[s]), Int(lengths[s]))
            i -= 1
        }
        return writer.finishBackward()
    }
}
