// Against libzstd: only where the build links it (the SystemZstd trait, on Linux).
#if ABROVA_SYSTEM_ZSTD
    import Testing
    @testable import AbrovaZstd

    /// Frames made by libzstd must decode to exactly the original input.
    struct DecoderDifferentialTests {
        static let levels: [Int32] = [-5, 1, 3, 9, 19]

        @Test func decodesLibzstdFramesInAllFrameShapes() async throws {
            let seed = TestSeed.make("decodesLibzstdFramesInAllFrameShapes")
            var rng = SeededRandom(seed: seed)
            for level in Self.levels {
                // (checksum, content size, streaming)
                for shape in [
                    (true, true, false), (false, true, false), (true, false, false), (false, false, false), (true, false, true),
                    (false, false, true),
                ] {
                    for _ in 0..<3 {
                        await Task.yield() // a long test shares the cooperative threads with the rest
                        let (name, input) = Corpus.sample(&rng, maxSize: level >= 19 ? 300_000 : 1 << 20)
                        let frame =
                            shape.2
                            ? LibZstd.compressStreaming(input, level: level, checksum: shape.0)
                            : LibZstd.compress(input, level: level, checksum: shape.0, contentSize: shape.1)
                        let decoded = try PureZstd.decompress(frame, limit: input.count)
                        #expect(decoded == input, "\(name) level \(level) shape \(shape) seed \(seed)")
                    }
                }
            }
        }

        @Test func decodesBoundarySizes() async throws {
            var rng = SeededRandom(seed: 7)
            for size in [
                0, 1, 2, 3, 4, 5, 31, 32, 33, 255, 256, 257, 1023, 1024, 65535, 65536, 65791, 65792, 131071, 131072, 131073, 262144 + 17,
            ] {
                for input in [Corpus.json(size, &rng), Corpus.random(size, &rng), [UInt8](repeating: 42, count: size)] {
                    await Task.yield() // a long test shares the cooperative threads with the rest
                    for level: Int32 in [1, 19] {
                        let frame = LibZstd.compress(input, level: level)
                        #expect(try PureZstd.decompress(frame, limit: size) == input, "size \(size) level \(level)")
                        let stream = LibZstd.compressStreaming(input, level: level, checksum: true, chunk: 4096)
                        #expect(try PureZstd.decompress(stream, limit: size) == input, "streamed size \(size) level \(level)")
                    }
                }
            }
        }

        @Test func decodesConcatenatedAndSkippableFrames() async throws {
            let seed = TestSeed.make("decodesConcatenatedAndSkippableFrames")
            var rng = SeededRandom(seed: seed)
            var body: [UInt8] = []
            var expected: [UInt8] = []
            for i in 0..<6 {
                await Task.yield() // a long test shares the cooperative threads with the rest
                let (_, input) = Corpus.sample(&rng, maxSize: 200_000)
                body += LibZstd.compress(input, level: Int32(i * 3 - 2))
                expected += input
                // A skippable frame with a varying magic nibble and payload.
                let payload = Corpus.random(Int(rng.next() % 100), &rng)
                let magic = UInt32(0x184D_2A50) + UInt32(i)
                body += withUnsafeBytes(of: magic.littleEndian, Array.init)
                body += withUnsafeBytes(of: UInt32(payload.count).littleEndian, Array.init)
                body += payload
            }
            #expect(try PureZstd.decompress(body, limit: expected.count) == expected, "seed \(seed)")
            #expect(LibZstd.decompress(body, capacity: expected.count) == expected)
        }
    }
#endif
