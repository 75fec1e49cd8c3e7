/// SHA-256 (FIPS 180-4), for request digests and cursor signatures; not for passwords.
///
/// Feed bytes with `update(_:)` as they arrive, then take the 32-byte digest with `finalize()`:
///
/// ```swift
/// var hasher = SHA256()
/// hasher.update(header)
/// hasher.update(body)
/// let digest = hasher.finalize()
/// ```
///
/// Contiguous inputs (`[UInt8]`, `ArraySlice<UInt8>`, `UnsafeRawBufferPointer`, `Data`, native
/// `String.UTF8View`) are hashed in place; other sequences are copied through a small stack buffer.
package struct SHA256: Sendable {
    /// The chaining value H(i) of FIPS 180-4, section 6.2.
    private var state: State
    /// Bytes that don't yet fill a 64-byte block, kept in a tuple so a hasher needs no heap storage.
    private var pending: Block
    private var pendingCount: Int
    /// Total bytes fed so far; the padding encodes it in bits, modulo 2^64 as FIPS 180-4 allows.
    private var byteCount: UInt64

    /// Creates a hasher with the initial hash value of FIPS 180-4, section 5.3.3.
    package init() {
        state = State(
            a: 0x6a09_e667, b: 0xbb67_ae85, c: 0x3c6e_f372, d: 0xa54f_f53a,
            e: 0x510e_527f, f: 0x9b05_688c, g: 0x1f83_d9ab, h: 0x5be0_cd19)
        pending = (0, 0, 0, 0, 0, 0, 0, 0)
        pendingCount = 0
        byteCount = 0
    }

    /// Adds bytes to the message being hashed.
    ///
    /// Calling `update` several times gives the same digest as one call with the bytes joined.
    // Inlinable so callers in other modules specialize it; unspecialized, a non-contiguous
    // sequence is read through witness tables one byte at a time, about 25 times slower.
    @inlinable
    package mutating func update<Bytes: Sequence>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        let wasContiguous: Void? = bytes.withContiguousStorageIfAvailable { buffer in
            update(contiguous: UnsafeRawBufferPointer(buffer))
        }
        guard wasContiguous == nil else { return }
        withUnsafeTemporaryAllocation(byteCount: 1024, alignment: 8) { staging in
            var count = 0
            for byte in bytes {
                staging[count] = byte
                count += 1
                if count == staging.count {
                    update(contiguous: UnsafeRawBufferPointer(staging))
                    count = 0
                }
            }
            update(contiguous: UnsafeRawBufferPointer(rebasing: staging[..<count]))
        }
    }

    /// Pads the message and returns its 32-byte digest.
    package consuming func finalize() -> [UInt8] {
        let bitLength = byteCount &* 8
        // 0x80, then zeros up to 56 bytes into a block, then the length: one or two blocks.
        let used = pendingCount
        let paddingCount = (used < 56 ? 56 - used : 120 - used) + 8
        withUnsafeTemporaryAllocation(byteCount: 128, alignment: 8) { padding in
            padding.initializeMemory(as: UInt8.self, repeating: 0)
            padding[0] = 0x80
            padding.storeBytes(of: bitLength.bigEndian, toByteOffset: paddingCount - 8, as: UInt64.self)
            update(contiguous: UnsafeRawBufferPointer(rebasing: padding[..<paddingCount]))
        }
        let words = [state.a, state.b, state.c, state.d, state.e, state.f, state.g, state.h]
        return [UInt8](unsafeUninitializedCapacity: 32) { digest, initializedCount in
            let raw = UnsafeMutableRawBufferPointer(digest)
            for (index, word) in words.enumerated() {
                raw.storeBytes(of: word.bigEndian, toByteOffset: index * 4, as: UInt32.self)
            }
            initializedCount = 32
        }
    }

    /// Returns the 32-byte SHA-256 digest of `bytes`.
    ///
    /// ```swift
    /// let digest = SHA256.hash(Array("abc".utf8))
    /// ```
    @inlinable
    package static func hash<Bytes: Sequence>(_ bytes: Bytes) -> [UInt8] where Bytes.Element == UInt8 {
        var hasher = SHA256()
        hasher.update(bytes)
        return hasher.finalize()
    }

    /// Buffers a partial block and compresses whole blocks straight from `input`.
    @usableFromInline
    mutating func update(contiguous input: UnsafeRawBufferPointer) {
        guard !input.isEmpty else { return }
        byteCount &+= UInt64(input.count)
        var input = input
        if pendingCount > 0 {
            let taken = min(64 - pendingCount, input.count)
            let filled = pendingCount
            withUnsafeMutableBytes(of: &pending) { block in
                UnsafeMutableRawBufferPointer(rebasing: block[filled..<(filled + taken)])
                    .copyMemory(from: UnsafeRawBufferPointer(rebasing: input[..<taken]))
            }
            pendingCount += taken
            input = UnsafeRawBufferPointer(rebasing: input[taken...])
            guard pendingCount == 64 else { return }
            let block = pending
            withUnsafeBytes(of: block) { Self.compress(&state, blocks: $0) }
            pendingCount = 0
        }
        let wholeCount = input.count & ~63
        if wholeCount > 0 {
            Self.compress(&state, blocks: UnsafeRawBufferPointer(rebasing: input[..<wholeCount]))
        }
        let remainder = input.count - wholeCount
        if remainder > 0 {
            withUnsafeMutableBytes(of: &pending) { block in
                UnsafeMutableRawBufferPointer(rebasing: block[..<remainder])
                    .copyMemory(from: UnsafeRawBufferPointer(rebasing: input[wholeCount...]))
            }
            pendingCount = remainder
        }
    }

    /// Runs the compression function (FIPS 180-4, section 6.2.2) over whole 64-byte blocks.
    private static func compress(_ state: inout State, blocks: UnsafeRawBufferPointer) {
        precondition(blocks.count % 64 == 0)
        roundConstants.withUnsafeBufferPointer { k in
            withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 64) { w in
                var offset = 0
                while offset < blocks.count {
                    for t in 0..<16 {
                        w[t] = UInt32(bigEndian: blocks.loadUnaligned(fromByteOffset: offset + t * 4, as: UInt32.self))
                    }
                    for t in 16..<64 {
                        let s0 = w[t - 15].rotatedRight(7) ^ w[t - 15].rotatedRight(18) ^ (w[t - 15] >> 3)
                        let s1 = w[t - 2].rotatedRight(17) ^ w[t - 2].rotatedRight(19) ^ (w[t - 2] >> 10)
                        w[t] = s1 &+ w[t - 7] &+ s0 &+ w[t - 16]
                    }
                    var (a, b, c, d) = (state.a, state.b, state.c, state.d)
                    var (e, f, g, h) = (state.e, state.f, state.g, state.h)
                    for t in 0..<64 {
                        let bigSigma1 = e.rotatedRight(6) ^ e.rotatedRight(11) ^ e.rotatedRight(25)
                        let choose = (e & f) ^ (~e & g)
                        let t1 = h &+ bigSigma1 &+ choose &+ k[t] &+ w[t]
                        let bigSigma0 = a.rotatedRight(2) ^ a.rotatedRight(13) ^ a.rotatedRight(22)
                        let majority = (a & b) ^ (a & c) ^ (b & c)
                        let t2 = bigSigma0 &+ majority
                        h = g
                        g = f
                        f = e
                        e = d &+ t1
                        d = c
                        c = b
                        b = a
                        a = t1 &+ t2
                    }
                    state.a &+= a
                    state.b &+= b
                    state.c &+= c
                    state.d &+= d
                    state.e &+= e
                    state.f &+= f
                    state.g &+= g
                    state.h &+= h
                    offset += 64
                }
            }
        }
    }

    private struct State: Sendable {
        var a, b, c, d, e, f, g, h: UInt32
    }

    private typealias Block = (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64)

    /// K: the first 32 bits of the fractional parts of the cube roots of the first 64 primes.
    private static let roundConstants: [UInt32] = [
        0x428a_2f98, 0x7137_4491, 0xb5c0_fbcf, 0xe9b5_dba5, 0x3956_c25b, 0x59f1_11f1, 0x923f_82a4, 0xab1c_5ed5,
        0xd807_aa98, 0x1283_5b01, 0x2431_85be, 0x550c_7dc3, 0x72be_5d74, 0x80de_b1fe, 0x9bdc_06a7, 0xc19b_f174,
        0xe49b_69c1, 0xefbe_4786, 0x0fc1_9dc6, 0x240c_a1cc, 0x2de9_2c6f, 0x4a74_84aa, 0x5cb0_a9dc, 0x76f9_88da,
        0x983e_5152, 0xa831_c66d, 0xb003_27c8, 0xbf59_7fc7, 0xc6e0_0bf3, 0xd5a7_9147, 0x06ca_6351, 0x1429_2967,
        0x27b7_0a85, 0x2e1b_2138, 0x4d2c_6dfc, 0x5338_0d13, 0x650a_7354, 0x766a_0abb, 0x81c2_c92e, 0x9272_2c85,
        0xa2bf_e8a1, 0xa81a_664b, 0xc24b_8b70, 0xc76c_51a3, 0xd192_e819, 0xd699_0624, 0xf40e_3585, 0x106a_a070,
        0x19a4_c116, 0x1e37_6c08, 0x2748_774c, 0x34b0_bcb5, 0x391c_0cb3, 0x4ed8_aa4a, 0x5b9c_ca4f, 0x682e_6ff3,
        0x748f_82ee, 0x78a5_636f, 0x84c8_7814, 0x8cc7_0208, 0x90be_fffa, 0xa450_6ceb, 0xbef9_a3f7, 0xc671_78f2,
    ]
}

extension UInt32 {
    @inline(__always)
    fileprivate func rotatedRight(_ count: UInt32) -> UInt32 {
        // Masking shifts: the plain ones check for over-shifting, which the compiler then cannot
        // turn into one rotate instruction.
        (self &>> count) | (self &<< (32 &- count))
    }
}

/// HMAC-SHA256 (RFC 2104).
///
/// ```swift
/// let tag = HMACSHA256.authenticationCode(for: Array(cursor.utf8), key: secret)
/// guard HMACSHA256.isEqual(tag, presentedTag) else { return nil }
/// ```
package enum HMACSHA256 {
    /// Returns the 32-byte HMAC-SHA256 of `message` under `key`.
    ///
    /// Keys longer than the 64-byte block are hashed first, as RFC 2104 specifies.
    @inlinable
    package static func authenticationCode(for message: some Sequence<UInt8>, key: some Sequence<UInt8>) -> [UInt8] {
        var blockKey = Array(key)
        if blockKey.count > 64 {
            blockKey = SHA256.hash(blockKey)
        }
        blockKey += repeatElement(0, count: 64 - blockKey.count)
        var inner = SHA256()
        inner.update(blockKey.map { $0 ^ 0x36 })
        inner.update(message)
        var outer = SHA256()
        outer.update(blockKey.map { $0 ^ 0x5c })
        outer.update(inner.finalize())
        return outer.finalize()
    }

    /// Compares two codes in time that does not depend on where they differ.
    ///
    /// Codes of different lengths are unequal at once: the length of a code is not secret.
    package static func isEqual(_ left: [UInt8], _ right: [UInt8]) -> Bool {
        guard left.count == right.count else { return false }
        var difference: UInt8 = 0
        for index in left.indices {
            difference |= left[index] ^ right[index]
        }
        return difference == 0
    }
}
