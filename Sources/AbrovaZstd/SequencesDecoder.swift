/// Decodes the sequences section of a compressed block and executes the
/// sequences against the output (RFC 8878 sections 3.1.1.3.2 and 3.1.1.4-5).
struct SequencesDecoder {
    /// Tables of the previous block, for the "repeat" mode; reset per frame.
    var literalLengthTable: FSEDecodingTable?
    var offsetTable: FSEDecodingTable?
    var matchLengthTable: FSEDecodingTable?
    /// The three repeat offsets, most recent first.
    var repeats: (Int, Int, Int) = (1, 4, 8)

    private enum Kind { case literalLength, offset, matchLength }

    /// Reads one table according to its 2-bit mode and returns the new position.
    private mutating func readTable(_ kind: Kind, mode: Int, _ bytes: [UInt8], _ p: Int, _ end: Int) throws(PureZstdError) -> Int {
        let maxSymbol: Int
        let maxLog: Int
        let predefined: FSEDecodingTable
        switch kind {
        case .literalLength:
            maxSymbol = SequenceCodes.maxLiteralLengthCode
            maxLog = SequenceCodes.literalLengthMaxLog
            predefined = SequenceCodes.literalLengthDefaultTable
        case .offset:
            maxSymbol = SequenceCodes.maxOffsetCode
            maxLog = SequenceCodes.offsetMaxLog
            predefined = SequenceCodes.offsetDefaultTable
        case .matchLength:
            maxSymbol = SequenceCodes.maxMatchLengthCode
            maxLog = SequenceCodes.matchLengthMaxLog
            predefined = SequenceCodes.matchLengthDefaultTable
        }
        var table: FSEDecodingTable
        var next = p
        switch mode {
        case 0:
            table = predefined
        case 1:
            guard p < end else { throw .corrupt("an RLE sequence table runs past the block") }
            guard Int(bytes[p]) <= maxSymbol else { throw .corrupt("an RLE sequence table has an invalid symbol") }
            table = FSEDecodingTable(rle: bytes[p])
            next = p + 1
        case 2:
            let (distribution, used) = try FSEDistribution.read(bytes, start: p, end: end, maxSymbol: maxSymbol, maxAccuracyLog: maxLog)
            table = try FSEDecodingTable(distribution)
            next = p + used
        default:
            let previous: FSEDecodingTable?
            switch kind {
            case .literalLength: previous = literalLengthTable
            case .offset: previous = offsetTable
            case .matchLength: previous = matchLengthTable
            }
            guard let previous else { throw .corrupt("a sequence table repeats a table that does not exist") }
            table = previous
        }
        switch kind {
        case .literalLength: literalLengthTable = table
        case .offset: offsetTable = table
        case .matchLength: matchLengthTable = table
        }
        return next
    }

    /// Decodes the section at `bytes[start..<end]` and writes the block's output:
    /// literals interleaved with matches, then the remaining literals.
    mutating func decodeAndExecute(
        _ bytes: [UInt8], start: Int, end: Int,
        literals: [UInt8], output: inout OutputBuffer,
        frameStart: Int, windowSize: Int, blockMaximum: Int
    ) throws(PureZstdError) {
        guard start < end else { throw .corrupt("a compressed block has no sequences section") }
        var p = start
        let b0 = Int(bytes[p])
        var count: Int
        if b0 < 128 {
            count = b0
            p += 1
        } else if b0 < 255 {
            guard p + 1 < end else { throw .corrupt("a sequences header runs past the block") }
            count = ((b0 - 128) << 8) + Int(bytes[p + 1])
            p += 2
        } else {
            guard p + 2 < end else { throw .corrupt("a sequences header runs past the block") }
            count = Int(bytes[p + 1]) + (Int(bytes[p + 2]) << 8) + 0x7F00
            p += 3
        }
        var produced = 0
        var literalPosition = 0
        if count == 0 {
            guard p == end else { throw .corrupt("a sequences section has data after zero sequences") }
        } else {
            guard p < end else { throw .corrupt("a sequences header runs past the block") }
            let modes = Int(bytes[p])
            p += 1
            guard modes & 3 == 0 else { throw .corrupt("a sequences header has reserved bits set") }
            p = try readTable(.literalLength, mode: modes >> 6, bytes, p, end)
            p = try readTable(.offset, mode: (modes >> 4) & 3, bytes, p, end)
            p = try readTable(.matchLength, mode: (modes >> 2) & 3, bytes, p, end)
            guard let llTable = literalLengthTable, let ofTable = offsetTable, let mlTable = matchLengthTable else {
                throw .corrupt("a sequences section is missing a table")
            }
            var reader = try BackwardBitReader(bytes, start: p, end: end, what: "a sequences bitstream")
            let llEntries = llTable.entries
            let ofEntries = ofTable.entries
            let mlEntries = mlTable.entries
            var llState = Int(reader.read(llTable.accuracyLog))
            var ofState = Int(reader.read(ofTable.accuracyLog))
            var mlState = Int(reader.read(mlTable.accuracyLog))
            var reps = repeats
            for i in 0..<count {
                let llEntry = llEntries[llState]
                let ofEntry = ofEntries[ofState]
                let mlEntry = mlEntries[mlState]
                let llCode = Int(llEntry.symbol)
                let ofCode = Int(ofEntry.symbol)
                let mlCode = Int(mlEntry.symbol)
                guard llCode <= SequenceCodes.maxLiteralLengthCode,
                    mlCode <= SequenceCodes.maxMatchLengthCode,
                    ofCode <= SequenceCodes.maxOffsetCode
                else { throw .corrupt("a sequence has an invalid code") }
                // In 64 bits, then clamped: code 31 overflows a 32-bit Int (an offset that large
                // is refused below as beyond the window).
                let offsetValue = Int(clamping: Int64(1) << Int64(ofCode) + Int64(reader.read(ofCode)))
                let matchLength = Int(SequenceCodes.matchLengthBase[mlCode]) + Int(reader.read(Int(SequenceCodes.matchLengthBits[mlCode])))
                let literalLength =
                    Int(SequenceCodes.literalLengthBase[llCode]) + Int(reader.read(Int(SequenceCodes.literalLengthBits[llCode])))

                let offset: Int
                if offsetValue > 3 {
                    offset = offsetValue - 3
                    reps = (offset, reps.0, reps.1)
                } else {
                    switch offsetValue - 1 + (literalLength == 0 ? 1 : 0) {
                    case 0:
                        offset = reps.0
                    case 1:
                        offset = reps.1
                        reps = (reps.1, reps.0, reps.2)
                    case 2:
                        offset = reps.2
                        reps = (reps.2, reps.0, reps.1)
                    default:
                        offset = reps.0 - 1
                        guard offset > 0 else { throw .corrupt("a sequence repeats an offset of zero") }
                        reps = (offset, reps.0, reps.1)
                    }
                }

                if i != count - 1 {
                    llState = Int(llEntry.baseline) + Int(reader.read(Int(llEntry.bitCount)))
                    mlState = Int(mlEntry.baseline) + Int(reader.read(Int(mlEntry.bitCount)))
                    ofState = Int(ofEntry.baseline) + Int(reader.read(Int(ofEntry.bitCount)))
                }

                // Execute: literals, then the match.
                guard literalLength <= literals.count - literalPosition else {
                    throw .corrupt("a sequence uses more literals than the block has")
                }
                produced += literalLength + matchLength
                guard produced <= blockMaximum else {
                    throw .corrupt("a block decodes to more than the block maximum size")
                }
                try output.ensure(literalLength + matchLength)
                output.append(literals, literalPosition..<(literalPosition + literalLength))
                literalPosition += literalLength
                guard offset <= output.count - frameStart else {
                    throw .corrupt("a sequence refers back before the start of the frame")
                }
                guard offset <= windowSize else {
                    throw .corrupt("a sequence refers back beyond the window")
                }
                output.copyMatch(offset: offset, length: matchLength)
            }
            guard reader.bitsRemaining >= 0 else {
                throw .corrupt("a sequences bitstream reads past its start")
            }
            if reader.bitsRemaining != 0 {
                // Distinguish leftovers no larger than one more round of state
                // updates: a decoder that also updates after the last sequence
                // (as libzstd does) would read exactly those bits.
                let updateBits = Int(llEntries[llState].bitCount) + Int(mlEntries[mlState].bitCount) + Int(ofEntries[ofState].bitCount)
                if reader.bitsRemaining <= updateBits {
                    throw .corrupt("a sequences bitstream has unused bits where state updates would be")
                }
                throw .corrupt("a sequences bitstream has unused bits")
            }
            repeats = reps
        }
        let rest = literals.count - literalPosition
        produced += rest
        guard produced <= blockMaximum else {
            throw .corrupt("a block decodes to more than the block maximum size")
        }
        try output.ensure(rest)
        output.append(literals, literalPosition..<literals.count)
    }
}
