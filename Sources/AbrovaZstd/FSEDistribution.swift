/// A normalized FSE probability distribution: counts sum to `1 << accuracyLog`,
/// and -1 marks a "less than one" probability (one table slot, full reset).
struct FSEDistribution {
    var counts: [Int16]
    var accuracyLog: Int

    /// Parses an FSE table description (RFC 8878 section 4.1.1) at `bytes[start..<end]`.
    /// Returns the distribution and how many bytes it used.
    static func read(_ bytes: [UInt8], start: Int, end: Int, maxSymbol: Int, maxAccuracyLog: Int) throws(PureZstdError) -> (
        FSEDistribution, Int
    ) {
        var reader = ForwardBitReader(bytes, start: start, end: end)
        guard reader.available > 0 else { throw .corrupt("an FSE table description is missing") }
        let accuracyLog = Int(reader.read(4)) + 5
        guard accuracyLog <= maxAccuracyLog else {
            throw .corrupt("an FSE table description has accuracy log \(accuracyLog), above the maximum \(maxAccuracyLog)")
        }
        let tableSize = 1 << accuracyLog
        var remaining = tableSize + 1
        var threshold = tableSize
        var bitCount = accuracyLog + 1
        var counts: [Int16] = []
        counts.reserveCapacity(maxSymbol + 1)

        while remaining > 1 {
            guard counts.count <= maxSymbol else {
                throw .corrupt("an FSE table description has more symbols than allowed")
            }
            let maxValue = 2 * threshold - 1 - remaining
            let low = Int(reader.peek(bitCount - 1))
            var value: Int
            if low < maxValue {
                value = low
                reader.skip(bitCount - 1)
            } else {
                value = Int(reader.peek(bitCount))
                if value >= threshold { value -= maxValue }
                reader.skip(bitCount)
            }
            let count = value - 1
            remaining -= count < 0 ? 1 : count
            counts.append(Int16(count))
            if count == 0 {
                // A zero probability is followed by 2-bit repeat fields of further zeros.
                while true {
                    let repeatCount = Int(reader.read(2))
                    guard counts.count + repeatCount <= maxSymbol + 1 else {
                        throw .corrupt("an FSE table description has more symbols than allowed")
                    }
                    for _ in 0..<repeatCount { counts.append(0) }
                    if repeatCount != 3 { break }
                    guard reader.bytesUsed <= reader.available else { break }
                }
            }
            while remaining < threshold && threshold > 1 {
                threshold >>= 1
                bitCount -= 1
            }
            guard reader.bytesUsed <= reader.available else {
                throw .corrupt("an FSE table description runs past its section")
            }
        }
        guard remaining == 1 else {
            throw .corrupt("an FSE table description has probabilities that do not add up")
        }
        guard reader.bytesUsed <= reader.available else {
            throw .corrupt("an FSE table description runs past its section")
        }
        return (FSEDistribution(counts: counts, accuracyLog: accuracyLog), reader.bytesUsed)
    }
}

/// One decoding state: emit `symbol`, then read `bitCount` bits and add them to `baseline`.
struct FSEDecodingEntry {
    var baseline: UInt16
    var bitCount: UInt8
    var symbol: UInt8
}

/// An FSE decoding table (RFC 8878 section 4.1.1).
struct FSEDecodingTable {
    var entries: [FSEDecodingEntry]
    var accuracyLog: Int

    /// The one-state table of RLE mode: always `symbol`, never reads bits.
    init(rle symbol: UInt8) {
        entries = [FSEDecodingEntry(baseline: 0, bitCount: 0, symbol: symbol)]
        accuracyLog = 0
    }

    /// Builds the table for a distribution whose counts sum to `1 << accuracyLog`.
    init(_ distribution: FSEDistribution) throws(PureZstdError) {
        let log = distribution.accuracyLog
        let size = 1 << log
        let mask = size - 1
        var table = [FSEDecodingEntry](repeating: FSEDecodingEntry(baseline: 0, bitCount: 0, symbol: 0), count: size)
        var next = [Int](repeating: 0, count: distribution.counts.count)
        var high = size - 1
        // "Less than one" symbols take the last slots.
        for (s, c) in distribution.counts.enumerated() where c == -1 {
            guard high >= 0 else { throw .corrupt("an FSE distribution overfills its table") }
            table[high].symbol = UInt8(truncatingIfNeeded: s)
            high -= 1
            next[s] = 1
        }
        let step = (size >> 1) + (size >> 3) + 3
        var position = 0
        for (s, c) in distribution.counts.enumerated() where c > 0 {
            next[s] = Int(c)
            for _ in 0..<Int(c) {
                table[position].symbol = UInt8(truncatingIfNeeded: s)
                var guardCount = 0
                repeat {
                    position = (position + step) & mask
                    guardCount += 1
                } while position > high && guardCount <= size
            }
        }
        guard position == 0 else { throw .corrupt("an FSE distribution does not fill its table") }
        for u in 0..<size {
            let s = Int(table[u].symbol)
            let state = next[s]
            next[s] += 1
            guard state > 0 else { throw .corrupt("an FSE distribution is inconsistent") }
            let bits = log - (Int.bitWidth - 1 - state.leadingZeroBitCount)
            table[u].bitCount = UInt8(bits)
            table[u].baseline = UInt16(truncatingIfNeeded: (state << bits) - size)
        }
        entries = table
        accuracyLog = log
    }
}
