/// XXH64, used for the zstd content checksum (seed 0, low 32 bits are stored).
struct XXHash64 {
    private static let p1: UInt64 = 0x9E37_79B1_85EB_CA87
    private static let p2: UInt64 = 0xC2B2_AE3D_27D4_EB4F
    private static let p3: UInt64 = 0x1656_67B1_9E37_79F9
    private static let p4: UInt64 = 0x85EB_CA77_C2B2_AE63
    private static let p5: UInt64 = 0x27D4_EB2F_1656_67C5

    @inline(__always)
    private static func rotl(_ x: UInt64, _ r: UInt64) -> UInt64 {
        (x &<< r) | (x &>> (64 &- r))
    }

    @inline(__always)
    private static func round(_ acc: UInt64, _ lane: UInt64) -> UInt64 {
        rotl(acc &+ lane &* p2, 31) &* p1
    }

    @inline(__always)
    private static func merge(_ acc: UInt64, _ v: UInt64) -> UInt64 {
        (acc ^ round(0, v)) &* p1 &+ p4
    }

    /// Hashes `bytes[range]` with the given seed.
    static func hash(_ bytes: [UInt8], _ range: Range<Int>, seed: UInt64 = 0) -> UInt64 {
        bytes.withUnsafeBufferPointer { buffer in
            hash(UnsafeBufferPointer(rebasing: buffer[range]), seed: seed)
        }
    }

    static func hash(_ data: UnsafeBufferPointer<UInt8>, seed: UInt64 = 0) -> UInt64 {
        let count = data.count
        var i = 0
        @inline(__always) func load64(_ at: Int) -> UInt64 {
            var v: UInt64 = 0
            for k in 0..<8 { v |= UInt64(data[at + k]) << UInt64(8 * k) }
            return v
        }
        @inline(__always) func load32(_ at: Int) -> UInt64 {
            var v: UInt64 = 0
            for k in 0..<4 { v |= UInt64(data[at + k]) << UInt64(8 * k) }
            return v
        }
        var h: UInt64
        if count >= 32 {
            var v1 = seed &+ p1 &+ p2
            var v2 = seed &+ p2
            var v3 = seed
            var v4 = seed &- p1
            while i + 32 <= count {
                v1 = round(v1, load64(i))
                v2 = round(v2, load64(i + 8))
                v3 = round(v3, load64(i + 16))
                v4 = round(v4, load64(i + 24))
                i += 32
            }
            h = rotl(v1, 1) &+ rotl(v2, 7) &+ rotl(v3, 12) &+ rotl(v4, 18)
            h = merge(h, v1)
            h = merge(h, v2)
            h = merge(h, v3)
            h = merge(h, v4)
        } else {
            h = seed &+ p5
        }
        h = h &+ UInt64(count)
        while i + 8 <= count {
            h ^= round(0, load64(i))
            h = rotl(h, 27) &* p1 &+ p4
            i += 8
        }
        if i + 4 <= count {
            h ^= load32(i) &* p1
            h = rotl(h, 23) &* p2 &+ p3
            i += 4
        }
        while i < count {
            h ^= UInt64(data[i]) &* p5
            h = rotl(h, 11) &* p1
            i += 1
        }
        h ^= h >> 33
        h = h &* p2
        h ^= h >> 29
        h = h &* p3
        h ^= h >> 32
        return h
    }
}
