/// Code tables and predefined distributions for literal lengths, match
/// lengths and offsets (RFC 8878 sections 3.1.1.3.2.1 and 3.1.1.3.2.2).
enum SequenceCodes {
    static let maxLiteralLengthCode = 35
    static let maxMatchLengthCode = 52
    static let maxOffsetCode = 31
    static let literalLengthMaxLog = 9
    static let matchLengthMaxLog = 9
    static let offsetMaxLog = 8

    static let literalLengthBase: [UInt32] = [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
        16, 18, 20, 22, 24, 28, 32, 40, 48, 64, 128, 256, 512, 1024, 2048, 4096,
        8192, 16384, 32768, 65536,
    ]
    static let literalLengthBits: [UInt8] = [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        1, 1, 1, 1, 2, 2, 3, 3, 4, 6, 7, 8, 9, 10, 11, 12,
        13, 14, 15, 16,
    ]
    static let matchLengthBase: [UInt32] = [
        3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,
        19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34,
        35, 37, 39, 41, 43, 47, 51, 59, 67, 83, 99, 131, 259, 515, 1027, 2051,
        4099, 8195, 16387, 32771, 65539,
    ]
    static let matchLengthBits: [UInt8] = [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 7, 8, 9, 10, 11,
        12, 13, 14, 15, 16,
    ]

    static let literalLengthDefault = FSEDistribution(
        counts: [
            4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1,
            2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 2, 1, 1, 1, 1, 1,
            -1, -1, -1, -1,
        ], accuracyLog: 6)
    static let matchLengthDefault = FSEDistribution(
        counts: [
            1, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1,
            1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
            1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1,
            -1, -1, -1, -1, -1,
        ], accuracyLog: 6)
    static let offsetDefault = FSEDistribution(
        counts: [
            1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1,
            1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1,
        ], accuracyLog: 5)

    // The predefined tables are valid by construction, so building them cannot fail.
    static let literalLengthDefaultTable = (try? FSEDecodingTable(literalLengthDefault)) ?? FSEDecodingTable(rle: 0)
    static let matchLengthDefaultTable = (try? FSEDecodingTable(matchLengthDefault)) ?? FSEDecodingTable(rle: 0)
    static let offsetDefaultTable = (try? FSEDecodingTable(offsetDefault)) ?? FSEDecodingTable(rle: 0)

    /// The literal length code for a length (inverse of the base table).
    @inline(__always)
    static func literalLengthCode(_ length: Int) -> Int {
        if length < 64 { return Int(literalLengthCodeSmall[length]) }
        return (Int.bitWidth - 1 - length.leadingZeroBitCount) + 19
    }

    /// The match length code for a length of at least 3.
    @inline(__always)
    static func matchLengthCode(_ length: Int) -> Int {
        let base = length - 3
        if base < 128 { return Int(matchLengthCodeSmall[base]) }
        return (Int.bitWidth - 1 - base.leadingZeroBitCount) + 36
    }

    private static let literalLengthCodeSmall: [UInt8] = (0..<64).map { v in
        var code = 0
        for c in 0...maxLiteralLengthCode where Int(literalLengthBase[c]) <= v { code = c }
        return UInt8(code)
    }
    private static let matchLengthCodeSmall: [UInt8] = (0..<128).map { v in
        var code = 0
        for c in 0...maxMatchLengthCode where Int(matchLengthBase[c]) <= v + 3 { code = c }
        return UInt8(code)
    }
}
