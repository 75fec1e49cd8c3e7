// Against libzstd: only where the build links it (the SystemZstd trait, on Linux).
#if ABROVA_SYSTEM_ZSTD
    import Testing
    @testable import AbrovaZstd

    /// Limits and error kinds of the public decoder API.
    struct LimitTests {
        static func error(_ body: [UInt8], limit: Int = 1 << 20, maximumWindowLog: Int = 23) -> PureZstdError? {
            do throws(PureZstdError) {
                _ = try PureZstd.decompress(body, limit: limit, maximumWindowLog: maximumWindowLog)
                return nil
            } catch {
                return error
            }
        }

        @Test func outputPastLimitIsTooLarge() {
            var rng = SeededRandom(seed: 1)
            let input = Corpus.json(100_000, &rng)
            // With a content size the header is refused up front; without one, as bytes are produced.
            for frame in [
                LibZstd.compress(input, level: 3), LibZstd.compress(input, level: 3, contentSize: false),
                LibZstd.compressStreaming(input, level: 3, checksum: true),
            ] {
                let e = Self.error(frame, limit: input.count - 1)
                #expect(e?.kind == .tooLarge)
                #expect(e?.message.contains("limit") == true)
                #expect((try? PureZstd.decompress(frame, limit: input.count)) == input)
            }
            // Several frames share one limit.
            let two = LibZstd.compress(input, level: 1) + LibZstd.compress(input, level: 1)
            #expect(Self.error(two, limit: input.count * 2 - 1)?.kind == .tooLarge)
            // An empty frame fits a zero limit.
            #expect(Self.error([0x28, 0xB5, 0x2F, 0xFD, 0x20, 0x00, 0x01, 0x00, 0x00], limit: 0) == nil)
        }

        @Test func largeWindowIsWindowTooLarge() {
            // Window descriptor: exponent 14 -> 16 MiB window, above 1 << 23.
            let frame: [UInt8] = [0x28, 0xB5, 0x2F, 0xFD, 0x00, 14 << 3, 0x01, 0x00, 0x00]
            let e = Self.error(frame)
            #expect(e?.kind == .windowTooLarge)
            #expect(Self.error(frame, maximumWindowLog: 24) == nil)
            // Single segment: the window is the content size (8 bytes FCS of 2^24 + 1).
            var single: [UInt8] = [0x28, 0xB5, 0x2F, 0xFD, 0xE0]
            single += withUnsafeBytes(of: (UInt64(1) << 24 + 1).littleEndian, Array.init)
            single += [0x01, 0x00, 0x00]
            #expect(Self.error(single, limit: Int.max)?.kind == .windowTooLarge)
            // A libzstd frame streamed in pieces (size unknown, so it declares its level's window).
            var rng = SeededRandom(seed: 2)
            let input = Corpus.json(3000, &rng)
            let stream = LibZstd.compressStreaming(input, level: 1, checksum: true, chunk: 1000)
            #expect(Self.error(stream, maximumWindowLog: 10)?.kind == .windowTooLarge)
            #expect((try? PureZstd.decompress(stream, limit: input.count, maximumWindowLog: 23)) == input)
            // A single-segment frame of at most 128 KiB decodes whatever the window limit, as with
            // libzstd's streaming decoder (the frame fits its output chunk).
            let small = LibZstd.compress(input, level: 1)
            #expect((try? PureZstd.decompress(small, limit: input.count, maximumWindowLog: 10)) == input)
        }

        @Test func malformedInputsAreCorrupt() {
            var rng = SeededRandom(seed: 3)
            let input = Corpus.json(5000, &rng)
            let frame = LibZstd.compress(input, level: 3)

            let empty = Self.error([])
            #expect(empty?.kind == .corrupt)
            #expect(empty?.message == "the input is empty")

            let garbage = Self.error(Array("hello, this is not zstd".utf8))
            #expect(garbage?.kind == .corrupt)
            #expect(garbage?.message == "the input does not start with a zstd frame")

            let trailing = Self.error(frame + [1, 2, 3, 4, 5])
            #expect(trailing?.kind == .corrupt)
            #expect(trailing?.message == "the input has trailing bytes after the last frame")
            #expect(Self.error(frame + [0])?.message == "the input has trailing bytes after the last frame")

            var badChecksum = frame
            badChecksum[badChecksum.count - 1] ^= 0x55
            #expect(Self.error(badChecksum)?.message == "the content checksum does not match")

            let truncated = Self.error(Array(frame.dropLast(10)))
            #expect(truncated?.kind == .corrupt)
            #expect(truncated?.message == "the body ends inside a zstd frame")

            var reserved = frame
            reserved[4] |= 0x08
            #expect(Self.error(reserved)?.message == "a frame header has its reserved bit set")

            // Dictionary ID flag 1 with ID 7.
            let dictionary: [UInt8] = [0x28, 0xB5, 0x2F, 0xFD, 0x21, 0x07, 0x00, 0x01, 0x00, 0x00]
            #expect(Self.error(dictionary)?.message.contains("dictionar") == true)

            // Content size 5 declared, empty raw block given.
            let mismatch: [UInt8] = [0x28, 0xB5, 0x2F, 0xFD, 0x20, 0x05, 0x01, 0x00, 0x00]
            #expect(Self.error(mismatch)?.kind == .corrupt)

            // Reserved block type.
            let reservedBlock: [UInt8] = [0x28, 0xB5, 0x2F, 0xFD, 0x20, 0x00, 0x07, 0x00, 0x00]
            #expect(Self.error(reservedBlock)?.message == "a block uses the reserved block type")

            for e in [empty, garbage, trailing, truncated] {
                #expect(e.map { String(describing: $0) }?.hasPrefix("corrupt zstd data: ") == true)
            }
        }

        @Test func xxhash64KnownValues() {
            #expect(XXHash64.hash([], 0..<0) == 0xEF46_DB37_51D8_E999)
            let abc = Array("abc".utf8)
            #expect(XXHash64.hash(abc, 0..<3) == 0x44BC_2CF5_AD77_0999)
        }
    }
#endif
