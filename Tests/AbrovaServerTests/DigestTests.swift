import AbrovaServer
import AbrovaTestSupport
import Testing

@Suite struct DigestTests {
    /// A message and its expected digest, from FIPS 180-4's examples (NIST CAVP / CSRC).
    struct Vector: Sendable, CustomTestStringConvertible {
        let message: String
        let digest: String
        var testDescription: String { "\(message.utf8.count)-byte message" }
    }

    static let nistVectors: [Vector] = [
        Vector(message: "", digest: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        Vector(message: "abc", digest: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        Vector(
            message: "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
            digest: "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
        Vector(
            message: "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
            digest: "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"),
    ]

    static let millionA = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"

    @Test(arguments: nistVectors) func nistMessagesHashToTheirDigests(_ vector: Vector) {
        #expect(hex(SHA256.hash(Array(vector.message.utf8))) == vector.digest)
    }

    @Test(arguments: nistVectors) func everyKindOfSequenceHashesAlike(_ vector: Vector) {
        let bytes = Array(vector.message.utf8)
        #expect(hex(SHA256.hash(vector.message.utf8)) == vector.digest)
        #expect(hex(SHA256.hash(bytes[...])) == vector.digest)
        #expect(hex(SHA256.hash(bytes.lazy.map { $0 })) == vector.digest)
        #expect(hex(SHA256.hash(AnySequence(bytes))) == vector.digest)
        bytes.withUnsafeBytes { raw in
            #expect(hex(SHA256.hash(raw)) == vector.digest)
        }
    }

    @Test func oneMillionAsFedInUnevenChunksHashToTheNistDigest() {
        let message = [UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000)
        let chunkSizes = [1, 3, 63, 64, 65, 127, 1000, 4093, 0, 70_001]
        var hasher = SHA256()
        var offset = 0
        var turn = 0
        while offset < message.count {
            let end = min(offset + chunkSizes[turn % chunkSizes.count], message.count)
            hasher.update(message[offset..<end])
            offset = end
            turn += 1
        }
        #expect(hex(hasher.finalize()) == Self.millionA)
    }

    @Test func oneMillionAsFromANonContiguousSequenceHashToTheNistDigest() {
        // repeatElement has no contiguous storage, so this goes through the staging buffer.
        var hasher = SHA256()
        for chunk in [999_999, 1] {
            hasher.update(repeatElement(UInt8(ascii: "a"), count: chunk))
        }
        #expect(hex(hasher.finalize()) == Self.millionA)
    }

    @Test func incrementalUpdatesEqualOneShotForRandomSplits() {
        for seed: UInt64 in 1...200 {
            var random = SplitMix64(seed: seed)
            let length = Int(random.next() % 600)
            let message = (0..<length).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            var hasher = SHA256()
            var offset = 0
            var pieces: [Int] = []
            while offset < length {
                let piece = min(Int(random.next() % 150), length - offset)
                if random.next() % 2 == 0 {
                    hasher.update(message[offset..<(offset + piece)])
                } else {
                    hasher.update(message[offset..<(offset + piece)].lazy.map { $0 })
                }
                pieces.append(piece)
                offset += piece
            }
            #expect(
                hasher.finalize() == SHA256.hash(message),
                "seed \(seed): \(length) bytes split into \(pieces)")
        }
    }

    /// RFC 4231, section 4: key, data and HMAC-SHA-256 for test cases 1-4, 6 and 7.
    struct HMACVector: Sendable, CustomTestStringConvertible {
        let name: String
        let key: [UInt8]
        let data: [UInt8]
        let code: String
        var testDescription: String { name }
    }

    static let rfc4231Vectors: [HMACVector] = [
        HMACVector(
            name: "test case 1", key: [UInt8](repeating: 0x0b, count: 20), data: Array("Hi There".utf8),
            code: "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
        HMACVector(
            name: "test case 2", key: Array("Jefe".utf8), data: Array("what do ya want for nothing?".utf8),
            code: "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
        HMACVector(
            name: "test case 3", key: [UInt8](repeating: 0xaa, count: 20),
            data: [UInt8](repeating: 0xdd, count: 50),
            code: "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"),
        HMACVector(
            name: "test case 4", key: Array(1...25), data: [UInt8](repeating: 0xcd, count: 50),
            code: "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"),
        HMACVector(
            name: "test case 6", key: [UInt8](repeating: 0xaa, count: 131),
            data: Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8),
            code: "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
        HMACVector(
            name: "test case 7", key: [UInt8](repeating: 0xaa, count: 131),
            data: Array(
                ("This is a test using a larger than block-size key and a larger than block-size data. "
                    + "The key needs to be hashed before being used by the HMAC algorithm.").utf8),
            code: "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"),
    ]

    @Test(arguments: rfc4231Vectors) func rfc4231CasesGiveTheirCodes(_ vector: HMACVector) {
        #expect(hex(HMACSHA256.authenticationCode(for: vector.data, key: vector.key)) == vector.code)
        // The same through non-array sequences.
        #expect(
            hex(HMACSHA256.authenticationCode(for: vector.data.lazy.map { $0 }, key: vector.key[...]))
                == vector.code)
    }

    @Test func isEqualComparesWholeCodes() {
        let code = HMACSHA256.authenticationCode(for: Array("cursor".utf8), key: Array("secret".utf8))
        #expect(HMACSHA256.isEqual(code, code))
        #expect(HMACSHA256.isEqual([], []))
        var first = code
        first[0] ^= 1
        var last = code
        last[31] ^= 0x80
        #expect(!HMACSHA256.isEqual(code, first))
        #expect(!HMACSHA256.isEqual(code, last))
        #expect(!HMACSHA256.isEqual(code, Array(code.dropLast())))
        #expect(!HMACSHA256.isEqual(code, code + [0]))
        #expect(!HMACSHA256.isEqual([], code))
    }
}

private func hex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef")
    return String(bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0f)]] })
}
