import Testing

@testable import AbrovaZstd

/// Unit checks of the entropy coders that the round-trip tests reach only by chance.
struct EntropyUnitTests {
    @Test func huffmanLengthsAreLimitedAndComplete() throws {
        // Fibonacci counts give an unlimited Huffman depth of about 40.
        var counts = [Int](repeating: 0, count: 256)
        var (a, b) = (1, 1)
        for s in 0..<40 {
            counts[s * 5] = a
            (a, b) = (b, a + b)
        }
        counts[255] = 3
        let code = try #require(HuffmanEncoder(counts: counts))
        #expect(code.maxLength <= 11)
        var kraft = 0
        for s in 0..<256 where code.lengths[s] > 0 { kraft += 1 << (11 - Int(code.lengths[s])) }
        #expect(kraft == 1 << 11)
        // The description round-trips through the decoder's table builder.
        let description = try #require(code.treeDescription())
        let (table, used) = try HuffmanDecodingTable.read(description, start: 0, end: description.count)
        #expect(used == description.count)
        #expect(table.maxBits == code.maxLength)
        // And a coded stream decodes back.
        var rng = SeededRandom(seed: 5)
        let symbols = (0..<5000).map { _ in UInt8([0, 5, 10, 15, 100, 195, 255][Int(rng.next() % 7)]) }
        let stream = symbols.withUnsafeBufferPointer { code.encodeStream($0, 0..<symbols.count) }
        var decoded: [UInt8] = []
        try table.decodeStream(stream, start: 0, end: stream.count, count: symbols.count, into: &decoded)
        #expect(decoded == symbols)
    }

    @Test func fseDescriptionsRoundTrip() throws {
        let seed = TestSeed.make("fseDescriptionsRoundTrip")
        var rng = SeededRandom(seed: seed)
        for _ in 0..<300 {
            let symbols = 2 + Int(rng.next() % 50)
            var counts = (0..<symbols).map { _ in rng.next() % 3 == 0 ? 0 : Int(rng.next() % 1000) }
            counts[0] += 1
            counts[symbols - 1] += 1
            let total = counts.reduce(0, +)
            let distinct = counts.filter { $0 > 0 }.count
            let log = FSENormalizer.tableLog(samples: total, distinct: distinct, maxLog: 9)
            let norm = FSENormalizer.normalize(counts, total: total, log: log)
            #expect(norm.reduce(0) { $0 + Int(abs($1)) } == 1 << log, "seed \(seed)")
            var writer = BitWriter()
            FSENormalizer.writeDescription(norm, log: log, into: &writer)
            let bytes = writer.finishForward()
            let (read, used) = try FSEDistribution.read(bytes, start: 0, end: bytes.count, maxSymbol: 255, maxAccuracyLog: 9)
            #expect(used == bytes.count)
            #expect(read.accuracyLog == log)
            #expect(read.counts == Array(norm.prefix(read.counts.count)), "seed \(seed)")
            #expect(norm.dropFirst(read.counts.count).allSatisfy { $0 == 0 })
        }
    }
}
