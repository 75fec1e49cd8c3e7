/// Base64 (RFC 4648, the standard alphabet, with padding): the text form of a bytes value.
package enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    /// The sextet each ASCII byte stands for; 0xFF for a byte outside the alphabet.
    private static let sextets: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(index) }
        return table
    }()

    /// Appends the encoding of `bytes`.
    package static func encode(_ bytes: [UInt8], to text: inout [UInt8]) {
        text.reserveCapacity(text.count + encodedCount(bytes.count))
        var index = 0
        while index + 3 <= bytes.count {
            let group = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            for shift in [18, 12, 6, 0] { text.append(alphabet[Int(group >> UInt32(shift) & 0x3F)]) }
            index += 3
        }
        switch bytes.count - index {
        case 1:
            let group = UInt32(bytes[index]) << 16
            text.append(contentsOf: [alphabet[Int(group >> 18)], alphabet[Int(group >> 12 & 0x3F)], UInt8(ascii: "="), UInt8(ascii: "=")])
        case 2:
            let group = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
            text.append(contentsOf: [
                alphabet[Int(group >> 18)], alphabet[Int(group >> 12 & 0x3F)], alphabet[Int(group >> 6 & 0x3F)], UInt8(ascii: "="),
            ])
        default:
            break
        }
    }

    /// The length of the encoding of `count` bytes.
    package static func encodedCount(_ count: Int) -> Int { (count + 2) / 3 * 4 }

    /// The bytes `text` encodes; `nil` unless it is exactly what `encode` writes: a multiple of four
    /// characters of the alphabet, padded, no whitespace, and unused bits zero (so that each bytes
    /// value has one text form, which equality and set elements compare).
    package static func decode(_ text: some Collection<UInt8>) -> [UInt8]? {
        let characters = Array(text)
        guard characters.count % 4 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(characters.count / 4 * 3)
        var index = 0
        while index < characters.count {
            let isLast = index + 4 == characters.count
            let padding =
                isLast ? (characters[index + 3] == UInt8(ascii: "=") ? (characters[index + 2] == UInt8(ascii: "=") ? 2 : 1) : 0) : 0
            var group: UInt32 = 0
            for offset in 0..<4 {
                let sextet = offset < 4 - padding ? sextets[Int(characters[index + offset])] : 0
                guard sextet != 0xFF else { return nil }
                group = group << 6 | UInt32(sextet)
            }
            switch padding {
            case 0: bytes.append(contentsOf: [UInt8(group >> 16), UInt8(group >> 8 & 0xFF), UInt8(group & 0xFF)])
            case 1:
                guard group & 0xFF == 0 else { return nil }
                bytes.append(contentsOf: [UInt8(group >> 16), UInt8(group >> 8 & 0xFF)])
            default:
                guard group & 0xFFFF == 0 else { return nil }
                bytes.append(UInt8(group >> 16))
            }
            index += 4
        }
        return bytes
    }
}
