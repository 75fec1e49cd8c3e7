/// Writes a block's literals section: raw, RLE, or Huffman-compressed when smaller.
enum LiteralsEncoder {
    static func encode(_ literals: [UInt8], into out: inout [UInt8]) {
        let n = literals.count
        if n == 0 {
            out.append(0) // raw, size 0
            return
        }
        var counts = [Int](repeating: 0, count: 256)
        for b in literals { counts[Int(b)] += 1 }
        if counts[Int(literals[0])] == n && n > 2 {
            writeRawOrRLEHeader(type: 1, size: n, into: &out)
            out.append(literals[0])
            return
        }
        if n >= 32, let compressed = compressed(literals, counts: counts), compressed.count < rawSize(n) {
            out.append(contentsOf: compressed)
            return
        }
        writeRawOrRLEHeader(type: 0, size: n, into: &out)
        out.append(contentsOf: literals)
    }

    private static func rawSize(_ n: Int) -> Int {
        (n < 32 ? 1 : n < 4096 ? 2 : 3) + n
    }

    private static func writeRawOrRLEHeader(type: Int, size: Int, into out: inout [UInt8]) {
        if size < 32 {
            out.append(UInt8(type | size << 3))
        } else if size < 4096 {
            out.append(UInt8(truncatingIfNeeded: type | 1 << 2 | size << 4))
            out.append(UInt8(truncatingIfNeeded: size >> 4))
        } else {
            out.append(UInt8(truncatingIfNeeded: type | 3 << 2 | size << 4))
            out.append(UInt8(truncatingIfNeeded: size >> 4))
            out.append(UInt8(truncatingIfNeeded: size >> 12))
        }
    }

    /// The whole Huffman literals section, or nil when it cannot be built.
    private static func compressed(_ literals: [UInt8], counts: [Int]) -> [UInt8]? {
        guard let huffman = HuffmanEncoder(counts: counts) else { return nil }
        let n = literals.count
        // Skip the work when the estimate already loses to raw literals.
        let estimate = (huffman.codedBits(counts) + 7) / 8
        guard estimate + 8 < n else { return nil }
        guard let tree = huffman.treeDescription() else { return nil }
        var payload = tree
        let singleStream = n <= 1023 && estimate + tree.count < 1000
        literals.withUnsafeBufferPointer { lits in
            if singleStream {
                payload += huffman.encodeStream(lits, 0..<n)
            } else {
                let segment = (n + 3) / 4
                let s1 = huffman.encodeStream(lits, 0..<segment)
                let s2 = huffman.encodeStream(lits, segment..<(2 * segment))
                let s3 = huffman.encodeStream(lits, (2 * segment)..<(3 * segment))
                let s4 = huffman.encodeStream(lits, (3 * segment)..<n)
                for s in [s1, s2, s3] {
                    payload.append(UInt8(truncatingIfNeeded: s.count))
                    payload.append(UInt8(truncatingIfNeeded: s.count >> 8))
                }
                payload += s1 + s2 + s3 + s4
            }
        }
        let c = payload.count
        var header: [UInt8]
        if singleStream {
            guard c <= 1023 else { return nil }
            let v = 2 | 0 << 2 | n << 4 | c << 14
            header = [UInt8(truncatingIfNeeded: v), UInt8(truncatingIfNeeded: v >> 8), UInt8(truncatingIfNeeded: v >> 16)]
        } else if n <= 1023 && c <= 1023 {
            let v = 2 | 1 << 2 | n << 4 | c << 14
            header = [UInt8(truncatingIfNeeded: v), UInt8(truncatingIfNeeded: v >> 8), UInt8(truncatingIfNeeded: v >> 16)]
        } else if n <= 16383 && c <= 16383 {
            // In 64 bits: these forms do not fit a 32-bit Int (watchOS's arm64_32).
            let v: UInt64 = 2 | 2 << 2 | UInt64(n) << 4 | UInt64(c) << 18
            header = (0..<4).map { UInt8(truncatingIfNeeded: v >> (8 * UInt64($0))) }
        } else {
            guard n <= 262_143 && c <= 262_143 else { return nil }
            let v: UInt64 = 2 | 3 << 2 | UInt64(n) << 4 | UInt64(c) << 22
            header = (0..<5).map { UInt8(truncatingIfNeeded: v >> (8 * UInt64($0))) }
        }
        return header + payload
    }
}
