/// Search settings for one compression level.
struct MatchFinderParameters {
    var hashLog: Int
    /// log2 of the hash chain size; 0 means a plain hash table (one candidate).
    var chainLog: Int
    var searchDepth: Int
    /// 0 = greedy, 1 or 2 = look that many positions ahead for a better match.
    var lazyDepth: Int
    /// Minimum match length, also the number of bytes hashed (4...8).
    var minMatch: Int
    /// Larger values skip ahead faster through data without matches.
    var skipShift: Int

    static func forLevel(_ level: Int) -> MatchFinderParameters {
        switch level {
        case ...0: return MatchFinderParameters(hashLog: 14, chainLog: 0, searchDepth: 1, lazyDepth: 0, minMatch: 6, skipShift: 4)
        case 1: return MatchFinderParameters(hashLog: 16, chainLog: 0, searchDepth: 1, lazyDepth: 0, minMatch: 6, skipShift: 6)
        case 2: return MatchFinderParameters(hashLog: 16, chainLog: 16, searchDepth: 4, lazyDepth: 0, minMatch: 5, skipShift: 7)
        case 3: return MatchFinderParameters(hashLog: 17, chainLog: 17, searchDepth: 8, lazyDepth: 1, minMatch: 5, skipShift: 8)
        case 4...5: return MatchFinderParameters(hashLog: 17, chainLog: 17, searchDepth: 16, lazyDepth: 1, minMatch: 5, skipShift: 8)
        case 6...9: return MatchFinderParameters(hashLog: 18, chainLog: 18, searchDepth: 32, lazyDepth: 2, minMatch: 4, skipShift: 9)
        case 10...15: return MatchFinderParameters(hashLog: 19, chainLog: 19, searchDepth: 96, lazyDepth: 2, minMatch: 4, skipShift: 10)
        default: return MatchFinderParameters(hashLog: 20, chainLog: 20, searchDepth: 256, lazyDepth: 2, minMatch: 4, skipShift: 12)
        }
    }
}

/// A hash-chain LZ77 match finder over the whole input. Positions stay in the
/// tables across blocks, so matches may reach into earlier blocks (up to `maxDistance`).
/// Positions are stored as Int32; beyond 2 GiB they wrap, fail the range check
/// and are simply not found again, so huge inputs still encode correctly.
struct MatchFinder {
    let parameters: MatchFinderParameters
    let maxDistance: Int
    private var head: [Int32]
    private var chain: [Int32]
    private var nextToInsert = 0

    init(parameters: MatchFinderParameters, inputSize: Int, maxDistance: Int) {
        var p = parameters
        // Small inputs do not need big tables (and clearing them would dominate).
        let sizeLog = max(10, Int.bitWidth - max(1, inputSize).leadingZeroBitCount + 1)
        p.hashLog = min(p.hashLog, sizeLog)
        if p.chainLog > 0 { p.chainLog = min(p.chainLog, sizeLog) }
        self.parameters = p
        self.maxDistance = maxDistance
        head = [Int32](repeating: -1, count: 1 << p.hashLog)
        chain = p.chainLog > 0 ? [Int32](repeating: -1, count: 1 << p.chainLog) : []
    }

    @inline(__always)
    private static func load64(_ base: UnsafePointer<UInt8>, _ i: Int) -> UInt64 {
        UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self)
    }

    @inline(__always)
    private static func load32(_ base: UnsafePointer<UInt8>, _ i: Int) -> UInt32 {
        UnsafeRawPointer(base + i).loadUnaligned(as: UInt32.self)
    }

    /// Length of the common run at `a` and `b` (b < a), not going past `limit`.
    @inline(__always)
    private static func matchLength(_ base: UnsafePointer<UInt8>, _ a: Int, _ b: Int, _ limit: Int) -> Int {
        var n = 0
        while a + n + 8 <= limit {
            let x = load64(base, a + n) ^ load64(base, b + n)
            if x != 0 { return n + (UInt64(littleEndian: x).trailingZeroBitCount >> 3) }
            n += 8
        }
        while a + n < limit && base[a + n] == base[b + n] { n += 1 }
        return n
    }

    @inline(__always)
    private func hash(_ base: UnsafePointer<UInt8>, _ i: Int) -> Int {
        let shift = UInt64(64 - 8 * parameters.minMatch)
        let v = (UInt64(littleEndian: MatchFinder.load64(base, i)) << shift) &* 0xCF1B_BCDC_B7A5_6463
        return Int(truncatingIfNeeded: v >> UInt64(64 - parameters.hashLog))
    }

    /// Adds positions up to (not including) `end` to the tables.
    @inline(__always)
    private mutating func insert(_ base: UnsafePointer<UInt8>, upTo end: Int) {
        if parameters.chainLog > 0 {
            let mask = (1 << parameters.chainLog) - 1
            while nextToInsert < end {
                let h = hash(base, nextToInsert)
                chain[nextToInsert & mask] = head[h]
                head[h] = Int32(truncatingIfNeeded: nextToInsert)
                nextToInsert += 1
            }
        } else {
            while nextToInsert < end {
                head[hash(base, nextToInsert)] = Int32(truncatingIfNeeded: nextToInsert)
                nextToInsert += 1
            }
        }
    }

    /// Best match at `ip` from the hash chain: (length, offset), length 0 if none.
    @inline(__always)
    private mutating func search(_ base: UnsafePointer<UInt8>, _ ip: Int, limit: Int, atLeast: Int) -> (Int, Int) {
        insert(base, upTo: ip)
        var bestLength = atLeast
        var bestOffset = 0
        var candidate = Int(head[hash(base, ip)])
        let chainMask = (1 << parameters.chainLog) - 1
        let chainSpan = parameters.chainLog > 0 ? chainMask : 0
        var depth = parameters.searchDepth
        let lowest = max(0, ip - maxDistance)
        while candidate >= lowest && candidate < ip && depth > 0 {
            // Cheap reject: the byte that would extend the best match must agree.
            if ip + bestLength < limit && base[candidate + bestLength] == base[ip + bestLength] {
                let length = MatchFinder.matchLength(base, ip, candidate, limit)
                if length > bestLength {
                    bestLength = length
                    bestOffset = ip - candidate
                    if ip + length >= limit { break }
                }
            }
            depth -= 1
            if chainSpan == 0 || ip - candidate >= chainSpan { break }
            let next = Int(chain[candidate & chainMask])
            if next >= candidate { break }
            candidate = next
        }
        return bestOffset == 0 ? (0, 0) : (bestLength, bestOffset)
    }

    /// Parses `input[blockStart..<blockEnd]` into sequences and literals.
    /// `repeats` is the decoder's repeat-offset state at the block start, used to prefer cheap offsets.
    mutating func parse(
        _ input: UnsafeBufferPointer<UInt8>, blockStart: Int, blockEnd: Int, repeats: RepeatOffsets,
        sequences: inout [Sequence], literals: inout [UInt8]
    ) {
        sequences.removeAll(keepingCapacity: true)
        literals.removeAll(keepingCapacity: true)
        guard let base = input.baseAddress else { return }
        let minMatch = parameters.minMatch
        // Hashing reads 8 bytes, so stop early enough that every load stays inside the input.
        let searchEnd = min(blockEnd - minMatch, input.count - 8)
        var reps = repeats
        var anchor = blockStart
        var ip = blockStart
        if nextToInsert < blockStart - 65536 { nextToInsert = blockStart - 65536 }

        while ip < searchEnd {
            var bestLength = 0
            var bestOffset = 0
            // The most recent offset first: it costs almost nothing to code.
            if ip > anchor && reps.r0 <= ip && reps.r0 <= maxDistance,
                MatchFinder.load32(base, ip) == MatchFinder.load32(base, ip - reps.r0)
            {
                bestLength = MatchFinder.matchLength(base, ip, ip - reps.r0, blockEnd)
                bestOffset = reps.r0
            }
            if bestLength < 16 {
                let (length, offset) = search(base, ip, limit: blockEnd, atLeast: max(bestLength + 1, minMatch) - 1)
                if length >= minMatch && length > bestLength + 1 {
                    bestLength = length
                    bestOffset = offset
                }
            }
            if bestLength < minMatch && !(bestOffset == reps.r0 && bestLength >= 4) {
                ip += 1 + ((ip - anchor) >> parameters.skipShift)
                continue
            }

            // Lazy evaluation: a clearly better match one step later wins.
            var lazy = 0
            while lazy < parameters.lazyDepth && ip + 1 < searchEnd {
                let next = ip + 1
                var length = 0
                var offset = 0
                if reps.r0 <= next && reps.r0 <= maxDistance && MatchFinder.load32(base, next) == MatchFinder.load32(base, next - reps.r0) {
                    length = MatchFinder.matchLength(base, next, next - reps.r0, blockEnd)
                    offset = reps.r0
                }
                let (l2, o2) = search(base, next, limit: blockEnd, atLeast: max(length + 1, minMatch) - 1)
                if l2 > length + 1 { length = l2; offset = o2 }
                let gainNew = length * 4 - MatchFinder.offsetCost(offset, reps)
                let gainOld = bestLength * 4 - MatchFinder.offsetCost(bestOffset, reps) + 4
                if length >= minMatch && gainNew > gainOld {
                    ip = next
                    bestLength = length
                    bestOffset = offset
                    lazy += 1
                } else {
                    break
                }
            }

            // Extend backwards over literals that also match.
            var start = ip
            while start > anchor && start - bestOffset > 0 && base[start - 1] == base[start - 1 - bestOffset] {
                start -= 1
                bestLength += 1
            }
            sequences.append(Sequence(literalLength: Int32(start - anchor), matchLength: Int32(bestLength), offset: Int32(bestOffset)))
            literals.append(contentsOf: UnsafeBufferPointer(start: base + anchor, count: start - anchor))
            _ = reps.code(offset: bestOffset, literalLength: start - anchor)
            ip = start + bestLength
            anchor = ip
            if parameters.chainLog == 0 {
                // Fast levels only index a couple of positions inside the match.
                if ip - 2 < input.count - 8 && ip - 2 > nextToInsert {
                    nextToInsert = ip - 2
                }
            }
        }
        literals.append(contentsOf: UnsafeBufferPointer(start: base + anchor, count: blockEnd - anchor))
        insert(base, upTo: max(nextToInsert, min(searchEnd, input.count - 8)))
    }

    @inline(__always)
    private static func offsetCost(_ offset: Int, _ reps: RepeatOffsets) -> Int {
        if offset == reps.r0 { return 0 }
        return Int.bitWidth - (offset + 3).leadingZeroBitCount
    }
}
