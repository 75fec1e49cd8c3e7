/// One LZ77 step: `literalLength` literals, then `matchLength` bytes copied
/// from `offset` bytes back.
struct Sequence {
    var literalLength: Int32
    var matchLength: Int32
    var offset: Int32
}

/// The three repeat offsets shared by encoder and decoder (RFC 8878 section 3.1.1.5).
struct RepeatOffsets {
    var r0 = 1, r1 = 4, r2 = 8

    /// The offset value (1...3 for repeats, offset + 3 otherwise) that codes
    /// `offset` after `literalLength` literals, updating the history like a decoder.
    mutating func code(offset: Int, literalLength: Int) -> Int {
        if literalLength > 0 {
            if offset == r0 { return 1 }
            if offset == r1 { (r0, r1) = (r1, r0); return 2 }
            if offset == r2 { (r0, r1, r2) = (r2, r0, r1); return 3 }
        } else {
            if offset == r1 { (r0, r1) = (r1, r0); return 1 }
            if offset == r2 { (r0, r1, r2) = (r2, r0, r1); return 2 }
            if offset == r0 - 1 { (r0, r1, r2) = (offset, r0, r1); return 3 }
        }
        (r0, r1, r2) = (offset, r0, r1)
        return offset + 3
    }
}

/// Writes the sequences section, choosing predefined, RLE or compressed tables
/// for each of the three code streams.
enum SequencesEncoder {
    private struct Choice {
        var mode: Int
        var table: FSEEncodingTable
        var description: [UInt8]
    }

    private static func choose(_ counts: [Int], total: Int, predefined: FSEDistribution, maxLog: Int) -> Choice {
        let distinct = counts.filter { $0 > 0 }.count
        if distinct == 1, let symbol = counts.firstIndex(where: { $0 > 0 }) {
            var norm = [Int16](repeating: 0, count: symbol + 1)
            norm[symbol] = 1
            return Choice(mode: 1, table: FSEEncodingTable(norm, log: 0), description: [UInt8(symbol)])
        }
        let predefinedCost = FSENormalizer.cost(counts, predefined.counts, log: predefined.accuracyLog)
        let log = FSENormalizer.tableLog(samples: total, distinct: distinct, maxLog: maxLog)
        var norm = FSENormalizer.normalize(counts, total: total, log: log)
        while norm.last == 0 { norm.removeLast() }
        var writer = BitWriter()
        FSENormalizer.writeDescription(norm, log: log, into: &writer)
        let description = writer.finishForward()
        let compressedCost = (FSENormalizer.cost(counts, norm, log: log) ?? Int.max / 2) + description.count * 8
        if let predefinedCost, predefinedCost <= compressedCost {
            return Choice(mode: 0, table: FSEEncodingTable(predefined.counts, log: predefined.accuracyLog), description: [])
        }
        return Choice(mode: 2, table: FSEEncodingTable(norm, log: log), description: description)
    }

    /// Appends the section for `sequences`, updating `repeats` as the decoder will.
    static func encode(_ sequences: [Sequence], repeats: inout RepeatOffsets, into out: inout [UInt8]) {
        let n = sequences.count
        if n < 128 {
            out.append(UInt8(n))
        } else if n < 0x7F00 {
            out.append(UInt8(n >> 8 + 128))
            out.append(UInt8(truncatingIfNeeded: n))
        } else {
            out.append(255)
            out.append(UInt8(truncatingIfNeeded: n - 0x7F00))
            out.append(UInt8(truncatingIfNeeded: (n - 0x7F00) >> 8))
        }
        if n == 0 { return }

        // Codes and extra-bit values for every sequence.
        var llCodes = [UInt8](repeating: 0, count: n)
        var mlCodes = [UInt8](repeating: 0, count: n)
        var ofCodes = [UInt8](repeating: 0, count: n)
        var ofValues = [UInt32](repeating: 0, count: n)
        var llCounts = [Int](repeating: 0, count: SequenceCodes.maxLiteralLengthCode + 1)
        var mlCounts = [Int](repeating: 0, count: SequenceCodes.maxMatchLengthCode + 1)
        var ofCounts = [Int](repeating: 0, count: SequenceCodes.maxOffsetCode + 1)
        for (i, s) in sequences.enumerated() {
            let ll = SequenceCodes.literalLengthCode(Int(s.literalLength))
            let ml = SequenceCodes.matchLengthCode(Int(s.matchLength))
            let value = repeats.code(offset: Int(s.offset), literalLength: Int(s.literalLength))
            let of = Int.bitWidth - 1 - value.leadingZeroBitCount
            llCodes[i] = UInt8(ll)
            mlCodes[i] = UInt8(ml)
            ofCodes[i] = UInt8(of)
            ofValues[i] = UInt32(value)
            llCounts[ll] += 1
            mlCounts[ml] += 1
            ofCounts[of] += 1
        }
        let ll = choose(llCounts, total: n, predefined: SequenceCodes.literalLengthDefault, maxLog: SequenceCodes.literalLengthMaxLog)
        let of = choose(ofCounts, total: n, predefined: SequenceCodes.offsetDefault, maxLog: SequenceCodes.offsetMaxLog)
        let ml = choose(mlCounts, total: n, predefined: SequenceCodes.matchLengthDefault, maxLog: SequenceCodes.matchLengthMaxLog)
        out.append(UInt8(ll.mode << 6 | of.mode << 4 | ml.mode << 2))
        out.append(contentsOf: ll.description)
        out.append(contentsOf: of.description)
        out.append(contentsOf: ml.description)

        // The bitstream, written back to front so the decoder reads it front to back.
        var writer = BitWriter(capacity: n * 4)
        let last = n - 1
        var llState = ll.table.initialState(Int(llCodes[last]))
        var mlState = ml.table.initialState(Int(mlCodes[last]))
        var ofState = of.table.initialState(Int(ofCodes[last]))
        func writeExtras(_ i: Int) {
            let s = sequences[i]
            let llc = Int(llCodes[i])
            let mlc = Int(mlCodes[i])
            let ofc = Int(ofCodes[i])
            writer.write(
                UInt64(Int(s.literalLength) - Int(SequenceCodes.literalLengthBase[llc])), Int(SequenceCodes.literalLengthBits[llc]))
            writer.write(UInt64(Int(s.matchLength) - Int(SequenceCodes.matchLengthBase[mlc])), Int(SequenceCodes.matchLengthBits[mlc]))
            writer.write(UInt64(ofValues[i]) & ((1 << UInt64(ofc)) - 1), ofc)
        }
        writeExtras(last)
        var i = last - 1
        while i >= 0 {
            of.table.encode(Int(ofCodes[i]), state: &ofState, into: &writer)
            ml.table.encode(Int(mlCodes[i]), state: &mlState, into: &writer)
            ll.table.encode(Int(llCodes[i]), state: &llState, into: &writer)
            writeExtras(i)
            i -= 1
        }
        writer.write(UInt64(mlState), ml.table.log)
        writer.write(UInt64(ofState), of.table.log)
        writer.write(UInt64(llState), ll.table.log)
        out.append(contentsOf: writer.finishBackward())
    }
}
