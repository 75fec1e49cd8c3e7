// Against libzstd: only where the build links it (the SystemZstd trait, on Linux).
#if ABROVA_SYSTEM_ZSTD
    import Testing
    @testable import AbrovaZstd

    /// Frames from our encoder must decode, with libzstd and with our decoder, to the input.
    struct EncoderDifferentialTests {
        static func roundTrip(_ input: [UInt8], level: Int, _ context: String) throws {
            let frame = PureZstd.compress(input, level: level)
            let theirs = LibZstd.decompress(frame, capacity: input.count)
            #expect(theirs == input, "libzstd: \(context) level \(level) (\(LibZstd.errorName(frame, capacity: input.count)))")
            let ours = try PureZstd.decompress(frame, limit: input.count)
            #expect(ours == input, "ours: \(context) level \(level)")
        }

        @Test func libzstdDecodesOurFrames() async throws {
            let seed = TestSeed.make("libzstdDecodesOurFrames")
            var rng = SeededRandom(seed: seed)
            for level in [-5, 1, 3, 9, 19] {
                for _ in 0..<8 {
                    await Task.yield() // a long test shares the cooperative threads with the rest
                    let (name, input) = Corpus.sample(&rng, maxSize: level >= 9 ? 300_000 : 1 << 20)
                    try Self.roundTrip(input, level: level, "\(name) seed \(seed)")
                }
            }
        }

        @Test func encodesBoundarySizesAndShapes() async throws {
            var rng = SeededRandom(seed: 11)
            for size in [0, 1, 2, 3, 4, 7, 8, 9, 31, 32, 255, 256, 257, 1023, 1024, 65791, 65792, 131071, 131072, 131073, 300_000] {
                for input in [
                    Corpus.json(size, &rng), Corpus.random(size, &rng), [UInt8](repeating: 7, count: size),
                    Corpus.repetitive(size, &rng), Corpus.skewed(size, &rng),
                ] {
                    await Task.yield() // a long test shares the cooperative threads with the rest
                    for level in [1, 3] {
                        try Self.roundTrip(input, level: level, "size \(size)")
                    }
                }
            }
        }

        @Test func encodesLongLiteralRunsLongMatchesAndDeepHuffmanTrees() async throws {
            var rng = SeededRandom(seed: 12)
            // 70 KB of random bytes then a copy of them: one block with a literal
            // length above 65536 followed by a very long match.
            let head = Corpus.random(70_000, &rng)
            try Self.roundTrip(head + head + head, level: 3, "long literals")
            // Geometric byte frequencies over all 256 values force code lengths past 11 bits.
            var geometric: [UInt8] = []
            for _ in 0..<200_000 {
                var k = 0
                while k < 255 && rng.next() % 10 < 4 { k += 1 }
                geometric.append(UInt8(k))
            }
            for level in [-5, 1, 3, 19] { try Self.roundTrip(geometric, level: level, "geometric") }
            // Mostly one byte with rare others.
            let sparse = (0..<100_000).map { _ in rng.next() % 500 == 0 ? UInt8(truncatingIfNeeded: rng.next()) : 65 }
            try Self.roundTrip(sparse, level: 3, "sparse")
        }

        @Test func largeInputsUseAWindowedFrame() async throws {
            // Above 8 MiB the frame is not single segment: it declares an 8 MiB window.
            var rng = SeededRandom(seed: 13)
            let block = Corpus.json(1 << 20, &rng)
            var input: [UInt8] = []
            for i in 0..<9 { input += block.map { $0 &+ UInt8(i & 1) } }
            input += Corpus.random(1000, &rng)
            let frame = PureZstd.compress(input, level: -5)
            #expect(frame[4] & 0x20 == 0)
            #expect(LibZstd.decompress(frame, capacity: input.count) == input)
            #expect(try PureZstd.decompress(frame, limit: input.count) == input)
            #expect(throws: PureZstdError.self) { try PureZstd.decompress(frame, limit: input.count, maximumWindowLog: 22) }
        }

        @Test func everyLevelProducesValidFrames() async throws {
            let seed = TestSeed.make("everyLevelProducesValidFrames")
            var rng = SeededRandom(seed: seed)
            let json = Corpus.json(40_000, &rng)
            let mixed = Corpus.repetitive(40_000, &rng)
            var previous = Int.max
            for level in [Int.min, -100, -7] + Array(-1...22) + [100, Int.max] {
                await Task.yield() // a long test shares the cooperative threads with the rest
                try Self.roundTrip(json, level: level, "json seed \(seed)")
                try Self.roundTrip(mixed, level: level, "repetitive seed \(seed)")
                if level == 1 { previous = PureZstd.compress(json, level: 1).count }
            }
            // Stronger levels should not be worse than level 1 on text.
            #expect(PureZstd.compress(json, level: 19).count <= previous)
        }

        @Test func emptyInputMakesAValidFrame() async throws {
            let frame = PureZstd.compress([])
            #expect(LibZstd.decompress(frame, capacity: 0) == [])
            #expect(try PureZstd.decompress(frame, limit: 0) == [])
        }
    }
#endif
