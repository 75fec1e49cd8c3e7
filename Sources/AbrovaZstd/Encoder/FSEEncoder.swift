/// FSE on the encoding side: normalizing counts, writing table descriptions
/// and the state machine that encodes symbols in reverse order.
enum FSENormalizer {
    /// Scales `counts` so they sum to `1 << log`; every present symbol gets at least 1.
    /// The caller ensures `1 << log` is at least the number of present symbols.
    static func normalize(_ counts: [Int], total: Int, log: Int) -> [Int16] {
        let size = 1 << log
        var norm = [Int16](repeating: 0, count: counts.count)
        var remainders: [(Int, Int)] = [] // (remainder, symbol)
        var sum = 0
        for (s, c) in counts.enumerated() where c > 0 {
            let scaled = c * size
            let n = max(1, scaled / total)
            norm[s] = Int16(n)
            sum += n
            remainders.append((scaled % total, s))
        }
        if sum < size {
            // Hand out the shortfall by largest remainder, cycling if needed.
            remainders.sort { $0.0 > $1.0 }
            var i = 0
            while sum < size {
                norm[remainders[i % remainders.count].1] += 1
                sum += 1
                i += 1
            }
        }
        while sum > size {
            // Take from the symbol whose count suffers least in relative terms.
            var best = -1
            var bestScore = Int.min
            for (s, c) in counts.enumerated() where norm[s] > 1 {
                // Prefer large norms relative to their true count (over-represented).
                let score = Int(norm[s]) * 1024 * 64 / max(1, c)
                if score > bestScore { bestScore = score; best = s }
            }
            if best < 0 { break }
            norm[best] -= 1
            sum -= 1
        }
        return norm
    }

    /// A table log for `symbolCount` samples over `distinct` symbols.
    static func tableLog(samples: Int, distinct: Int, maxLog: Int) -> Int {
        var log = max(5, Int.bitWidth - (samples - 1).leadingZeroBitCount - 2)
        log = min(log, maxLog)
        let needed = Int.bitWidth - max(1, distinct - 1).leadingZeroBitCount + 1
        return min(maxLog, max(log, needed, 5))
    }

    /// Writes the table description of RFC 8878 section 4.1.1.
    static func writeDescription(_ norm: [Int16], log: Int, into writer: inout BitWriter) {
        writer.write(UInt64(log - 5), 4)
        var remaining = (1 << log) + 1
        var threshold = 1 << log
        var bitCount = log + 1
        var s = 0
        var last = norm.count - 1
        while last >= 0 && norm[last] == 0 { last -= 1 }
        while remaining > 1 && s <= last {
            let count = Int(norm[s])
            let value = count + 1
            let maxValue = 2 * threshold - 1 - remaining
            if value < maxValue {
                writer.write(UInt64(value), bitCount - 1)
            } else if value < threshold {
                writer.write(UInt64(value), bitCount)
            } else {
                writer.write(UInt64(value + maxValue), bitCount)
            }
            remaining -= count < 0 ? 1 : count
            s += 1
            if count == 0 {
                var zeros = 0
                while s + zeros <= last && norm[s + zeros] == 0 { zeros += 1 }
                s += zeros
                while zeros >= 3 {
                    writer.write(3, 2)
                    zeros -= 3
                }
                writer.write(UInt64(zeros), 2)
            }
            while remaining < threshold {
                threshold >>= 1
                bitCount -= 1
            }
        }
    }

    /// Approximate cost in bits of coding `counts` with `norm` (which must cover them).
    static func cost(_ counts: [Int], _ norm: [Int16], log: Int) -> Int? {
        var bits = 0
        for (s, c) in counts.enumerated() where c > 0 {
            guard s < norm.count, norm[s] != 0 else { return nil }
            let n = norm[s] < 0 ? 1 : Int(norm[s])
            bits += c * (log * 256 - Log2Table.log2x256(n))
        }
        return bits / 256
    }
}

/// log2 in 1/256 bit units for small integers, for cost estimates.
enum Log2Table {
    static let table: [Int] = (0...4096).map { v in
        guard v > 0 else { return 0 }
        // Integer part from the bit length, fraction by repeated squaring.
        let e = Int.bitWidth - 1 - v.leadingZeroBitCount
        var m = Double(v) / Double(1 << e)
        var result = e * 256
        var bit = 128
        while bit > 0 {
            m *= m
            if m >= 2 { m /= 2; result += bit }
            bit >>= 1
        }
        return result
    }

    @inline(__always)
    static func log2x256(_ v: Int) -> Int {
        if v <= 4096 { return table[v] }
        let shift = (Int.bitWidth - v.leadingZeroBitCount) - 12
        return table[v >> shift] + shift * 256
    }
}

/// Encodes symbols with a normalized distribution, last symbol first.
struct FSEEncodingTable {
    let log: Int
    /// Decoder states of each symbol, in increasing order, concatenated.
    private var states: [UInt16]
    private var start: [Int]
    private var norm: [Int]

    init(_ counts: [Int16], log: Int) {
        self.log = log
        let distribution = FSEDistribution(counts: counts, accuracyLog: log)
        // The decoding table is valid for any normalized distribution we produce.
        let decoding = (try? FSEDecodingTable(distribution)) ?? FSEDecodingTable(rle: 0)
        norm = counts.map { $0 < 0 ? 1 : Int($0) }
        start = [Int](repeating: 0, count: counts.count + 1)
        for s in 0..<counts.count { start[s + 1] = start[s] + norm[s] }
        states = [UInt16](repeating: 0, count: 1 << log)
        var fill = start
        for (u, e) in decoding.entries.enumerated() {
            let s = Int(e.symbol)
            if s < counts.count && fill[s] < states.count {
                states[fill[s]] = UInt16(u)
                fill[s] += 1
            }
        }
    }

    /// The state to start from when `symbol` is the last one decoded. The
    /// first state of a symbol reads the most bits, so it is never a 0-bit state
    /// unless the symbol owns the whole table.
    func initialState(_ symbol: Int) -> Int {
        Int(states[start[symbol]])
    }

    /// Moves from `state` to the state that decodes `symbol` and leads to it.
    @inline(__always)
    func encode(_ symbol: Int, state: inout Int, into writer: inout BitWriter) {
        let n = norm[symbol]
        let size = 1 << log
        let x = state + size
        var bits = log - (Int.bitWidth - 1 - n.leadingZeroBitCount)
        if (x >> bits) < n { bits -= 1 }
        writer.write(UInt64(x & ((1 << bits) - 1)), bits)
        state = Int(states[start[symbol] + (x >> bits) - n])
    }
}
