/// Decodes the literals section of a compressed block (RFC 8878 section 3.1.1.3.1).
struct LiteralsDecoder {
    /// The Huffman table of the last compressed literals section in this frame,
    /// reused by treeless sections.
    var previousTable: HuffmanDecodingTable?

    /// Decodes the section starting at `bytes[start]` (block ends at `end`) into
    /// `literals`, and returns the index just past the section.
    mutating func decode(_ bytes: [UInt8], start: Int, end: Int, blockMaximum: Int, into literals: inout [UInt8]) throws(PureZstdError)
        -> Int
    {
        literals.removeAll(keepingCapacity: true)
        guard start < end else { throw .corrupt("a compressed block has no literals section") }
        let b0 = Int(bytes[start])
        let type = b0 & 3
        let sizeFormat = (b0 >> 2) & 3

        func byte(_ i: Int) throws(PureZstdError) -> Int {
            guard start + i < end else { throw .corrupt("a literals section header runs past the block") }
            return Int(bytes[start + i])
        }

        if type == 0 || type == 1 {
            // Raw or RLE literals: 5, 12 or 20 bit size.
            var size: Int
            var headerSize: Int
            switch sizeFormat {
            case 0, 2:
                size = b0 >> 3
                headerSize = 1
            case 1:
                size = (b0 >> 4) + (try byte(1) << 4)
                headerSize = 2
            default:
                size = (b0 >> 4) + (try byte(1) << 4) + (try byte(2) << 12)
                headerSize = 3
            }
            guard size <= blockMaximum else { throw .corrupt("a literals section is larger than the block maximum") }
            let p = start + headerSize
            if type == 0 {
                guard size <= end - p else { throw .corrupt("raw literals run past the block") }
                literals.append(contentsOf: bytes[p..<(p + size)])
                return p + size
            }
            guard p < end else { throw .corrupt("RLE literals run past the block") }
            literals.append(contentsOf: repeatElement(bytes[p], count: size))
            return p + 1
        }

        // Compressed (2) or treeless (3) Huffman literals.
        let regenerated: Int
        let compressed: Int
        let headerSize: Int
        let streams: Int
        // The header as a little-endian number of `count` bytes, in 64 bits: the 5-byte form
        // does not fit a 32-bit Int (watchOS's arm64_32).
        func header(_ count: Int) throws(PureZstdError) -> UInt64 {
            var value: UInt64 = 0
            for index in 0..<count { value |= UInt64(try byte(index)) << UInt64(8 * index) }
            return value
        }
        switch sizeFormat {
        case 0, 1:
            let v = try header(3)
            regenerated = Int((v >> 4) & 0x3FF)
            compressed = Int((v >> 14) & 0x3FF)
            headerSize = 3
            streams = sizeFormat == 0 ? 1 : 4
        case 2:
            let v = try header(4)
            regenerated = Int((v >> 4) & 0x3FFF)
            compressed = Int((v >> 18) & 0x3FFF)
            headerSize = 4
            streams = 4
        default:
            let v = try header(5)
            regenerated = Int((v >> 4) & 0x3FFFF)
            compressed = Int((v >> 22) & 0x3FFFF)
            headerSize = 5
            streams = 4
        }
        guard regenerated <= blockMaximum else { throw .corrupt("a literals section is larger than the block maximum") }
        var p = start + headerSize
        guard compressed <= end - p else { throw .corrupt("compressed literals run past the block") }
        let sectionEnd = p + compressed

        let table: HuffmanDecodingTable
        if type == 2 {
            let (t, used) = try HuffmanDecodingTable.read(bytes, start: p, end: sectionEnd)
            table = t
            previousTable = t
            p += used
        } else {
            guard let t = previousTable else {
                throw .corrupt("a treeless literals section has no previous Huffman table")
            }
            table = t
        }

        literals.reserveCapacity(regenerated)
        if streams == 1 {
            try table.decodeStream(bytes, start: p, end: sectionEnd, count: regenerated, into: &literals)
            return sectionEnd
        }
        // Four streams behind a jump table of three 2-byte sizes.
        guard sectionEnd - p >= 6 else { throw .corrupt("a literals jump table runs past the section") }
        let s1 = Int(bytes[p]) | Int(bytes[p + 1]) << 8
        let s2 = Int(bytes[p + 2]) | Int(bytes[p + 3]) << 8
        let s3 = Int(bytes[p + 4]) | Int(bytes[p + 5]) << 8
        p += 6
        let s4 = sectionEnd - p - s1 - s2 - s3
        guard s4 > 0 else { throw .corrupt("a literals jump table has sizes larger than the section") }
        let segment = (regenerated + 3) / 4
        let last = regenerated - 3 * segment
        guard last >= 0 else { throw .corrupt("a literals section is too small for four streams") }
        try table.decodeStream(bytes, start: p, end: p + s1, count: segment, into: &literals, oneOfFour: true)
        p += s1
        try table.decodeStream(bytes, start: p, end: p + s2, count: segment, into: &literals, oneOfFour: true)
        p += s2
        try table.decodeStream(bytes, start: p, end: p + s3, count: segment, into: &literals, oneOfFour: true)
        p += s3
        try table.decodeStream(bytes, start: p, end: sectionEnd, count: last, into: &literals, oneOfFour: true)
        return sectionEnd
    }
}
