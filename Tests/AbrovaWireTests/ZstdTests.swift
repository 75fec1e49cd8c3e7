import AbrovaTestSupport
import AbrovaWire
import Testing

@Suite struct ZstdTests {
    // MARK: Round trips

    @Test func emptyInputCompressesToAFrameThatDecompressesToEmpty() throws {
        let frame = try Zstd.compress([])
        #expect(!frame.isEmpty)
        #expect(ZstdFrames.declaredContentSize(of: frame) == 0)
        #expect(try Zstd.decompress(frame, limit: 0) == [])
    }

    @Test func oneByteRoundTrips() throws {
        let frame = try Zstd.compress([0x7B])
        #expect(try Zstd.decompress(frame, limit: 1) == [0x7B])
    }

    @Test func oneMegabyteOfJSONRoundTripsSmallerWithSizeAndChecksumRecorded() throws {
        let json = makeJSONLikeText(byteCount: 1 << 20)
        let frame = try Zstd.compress(json)
        #expect(frame.count < json.count / 4)
        #expect(ZstdFrames.declaredContentSize(of: frame) == UInt64(json.count))
        #expect(ZstdFrames.header(of: frame).hasChecksum)
        #expect(try Zstd.decompress(frame, limit: json.count) == json)
    }

    @Test func randomBytesRoundTrip() throws {
        var generator = SplitMix64(seed: 42)
        for count in [2, 1_000, 131_072, 300_001] {
            let bytes = generator.bytes(count)
            #expect(try Zstd.decompress(Zstd.compress(bytes), limit: count) == bytes, "\(count) bytes")
        }
    }

    @Test(arguments: [-5, 1, 3, 9, 19, 22]) func levelsRoundTrip(level: Int32) throws {
        let json = makeJSONLikeText(byteCount: 200_000)
        let frame = try Zstd.compress(json, level: level)
        #expect(try Zstd.decompress(frame, limit: json.count) == json)
    }

    @Test func concatenatedFramesDecompressToTheirConcatenation() throws {
        let first = makeJSONLikeText(byteCount: 50_000)
        var generator = SplitMix64(seed: 7)
        let second = generator.bytes(20_000)
        let body = try Zstd.compress(first) + Zstd.compress([]) + Zstd.compress(second, level: 1)
        #expect(try Zstd.decompress(body, limit: 70_000) == first + second)
        // The limit counts the output of all frames together.
        let error = #expect(throws: ZstdError.self) { try Zstd.decompress(body, limit: 69_999) }
        #expect(error?.code == .tooLarge)
    }

    @Test func limitIsInclusive() throws {
        let json = makeJSONLikeText(byteCount: 300_000)
        let frame = try Zstd.compress(json)
        #expect(try Zstd.decompress(frame, limit: json.count) == json)
        let error = #expect(throws: ZstdError.self) { try Zstd.decompress(frame, limit: json.count - 1) }
        #expect(error?.code == .tooLarge)
        #expect(error?.reason == .tooLarge)
    }

    // MARK: Corrupt input

    @Test func emptyInputIsCorrupt() {
        let error = #expect(throws: ZstdError.self) { try Zstd.decompress([], limit: 1 << 20) }
        #expect(error?.code == .corrupt)
        #expect(error?.reason == .invalid)
    }

    @Test func randomBytesAreCorrupt() {
        var generator = SplitMix64(seed: 3)
        for count in [1, 4, 5, 100, 10_000] {
            let error = #expect(throws: ZstdError.self) { try Zstd.decompress(generator.bytes(count), limit: 1 << 20) }
            #expect(error?.code == .corrupt, "\(count) random bytes")
        }
        let text = Array("{\"not\": \"zstd\"}".utf8)
        #expect((#expect(throws: ZstdError.self) { try Zstd.decompress(text, limit: 1 << 20) })?.code == .corrupt)
    }

    // Long in a debug build of the pure-Swift codec: it yields now and then, so that the tests
    // waiting on the network keep their share of the cooperative threads.
    @Test func everyFlippedByteAfterTheHeaderIsCorruptOrHarmless() async throws {
        let json = makeJSONLikeText(byteCount: 20_000)
        let frame = try Zstd.compress(json)
        var refusedCount = 0
        // Past the largest header (18 bytes), where a flip could also change the window or the size.
        for index in 18..<frame.count {
            if index % 16 == 0 { await Task.yield() }
            var damaged = frame
            damaged[index] ^= 0x10
            // A few bits are never read (unused table entries, padding): then the output is intact
            // and the checksum agrees. Anything else must be refused as corrupt.
            switch Result(catching: { () throws(ZstdError) in try Zstd.decompress(damaged, limit: 1 << 20) }) {
            case .success(let output): #expect(output == json, "byte \(index) of \(frame.count) decoded to other content")
            case .failure(let error):
                #expect(error.code == .corrupt, "byte \(index) of \(frame.count)")
                refusedCount += 1
            }
        }
        #expect(refusedCount > (frame.count - 18) * 9 / 10)
    }

    @Test func aFlippedContentByteFailsTheChecksum() throws {
        // Stored raw, so a flip changes one output byte and only the checksum can notice.
        var generator = SplitMix64(seed: 11)
        let bytes = generator.bytes(10_000)
        var frame = try Zstd.compress(bytes)
        frame[frame.count / 2] ^= 0x01
        let error = #expect(throws: ZstdError.self) { try Zstd.decompress(frame, limit: 1 << 20) }
        #expect(error?.code == .corrupt)
        #expect(error?.message.contains("checksum") == true)
    }

    @Test func everyTruncationIsCorrupt() async throws {
        let frame = try Zstd.compress(makeJSONLikeText(byteCount: 20_000))
        for count in 1..<frame.count {
            if count % 16 == 0 { await Task.yield() }
            let error = #expect(throws: ZstdError.self) { try Zstd.decompress(Array(frame[..<count]), limit: 1 << 20) }
            #expect(error?.code == .corrupt, "first \(count) of \(frame.count) bytes")
        }
    }

    @Test func trailingGarbageIsCorrupt() throws {
        let frame = try Zstd.compress(makeJSONLikeText(byteCount: 5_000))
        var generator = SplitMix64(seed: 5)
        let tails: [[UInt8]] = [[0], [0x28, 0xB5, 0x2F], Array("\n".utf8), generator.bytes(3), generator.bytes(64), Array(frame[..<10])]
        for tail in tails {
            let error = #expect(throws: ZstdError.self) { try Zstd.decompress(frame + tail, limit: 1 << 20) }
            #expect(error?.code == .corrupt, "tail \(tail)")
        }
    }

    // MARK: Bombs and lies

    @Test func bombOfTwoHundredMegabytesOfZerosIsRefusedAtTheLimit() throws {
        let bomb = ZstdFrames.windowedFrame(repeating: [UInt8](repeating: 0, count: 1 << 20), times: 200)
        #expect(bomb.count < 100_000)
        #expect(ZstdFrames.declaredContentSize(of: bomb) == nil)
        let error = #expect(throws: ZstdError.self) { try Zstd.decompress(bomb, limit: 1 << 20) }
        #expect(error?.code == .tooLarge)
        #expect(error?.reason == .tooLarge)
        #expect(error?.message.contains("1048576") == true)
    }

    @Test func bombThatDeclaresItsSizeIsRefusedAtTheLimit() throws {
        let bomb = ZstdFrames.windowedFrame(repeating: [UInt8](repeating: 0, count: 1 << 20), times: 200, declaringSize: true)
        #expect(ZstdFrames.declaredContentSize(of: bomb) == 200 << 20)
        #expect(!ZstdFrames.header(of: bomb).isSingleSegment) // so the window, not the size, is what is allocated
        let error = #expect(throws: ZstdError.self) { try Zstd.decompress(bomb, limit: 1 << 20) }
        #expect(error?.code == .tooLarge)
    }

    @Test func frameDeclaringLessThanItHoldsIsCorrupt() throws {
        let json = makeJSONLikeText(byteCount: 100_000)
        let frame = try Zstd.compress(json)
        #expect(ZstdFrames.header(of: frame).isSingleSegment)
        for declared in [0, 1_000, 99_999] as [UInt64] {
            let lying = ZstdFrames.replacingContentSize(of: frame, with: declared)
            #expect(ZstdFrames.declaredContentSize(of: lying) == declared)
            let error = #expect(throws: ZstdError.self) { try Zstd.decompress(lying, limit: 1 << 20) }
            #expect(error?.code == .corrupt, "declares \(declared)")
        }
    }

    @Test func singleSegmentFrameDeclaringMoreThanItHoldsIsRefused() throws {
        let json = makeJSONLikeText(byteCount: 100_000)
        let frame = try Zstd.compress(json)
        // A single-segment frame's window is its declared size, so a huge declaration is refused
        // from the header alone, before anything is allocated.
        let huge = ZstdFrames.replacingContentSize(of: frame, with: 4_000_000_000)
        let hugeError = #expect(throws: ZstdError.self) { try Zstd.decompress(huge, limit: 1 << 20) }
        #expect(hugeError?.code == .windowTooLarge)
        // Within the window, the frame decodes and then fails the size check at its end.
        let modest = ZstdFrames.replacingContentSize(of: frame, with: 100_001)
        let modestError = #expect(throws: ZstdError.self) { try Zstd.decompress(modest, limit: 1 << 20) }
        #expect(modestError?.code == .corrupt)
    }

    @Test func windowedFrameDeclaringAHugeSizeIsCorruptNotAllocated() throws {
        let json = makeJSONLikeText(byteCount: 100_000)
        // A 1 KiB window and a pledged size give a frame with a window descriptor and a size field.
        let frame = ZstdFrames.windowedFrame(repeating: json, times: 1, declaringSize: true, windowLog: 10)
        #expect(!ZstdFrames.header(of: frame).isSingleSegment)
        #expect(try Zstd.decompress(frame, limit: json.count) == json)
        let lying = ZstdFrames.replacingContentSize(of: frame, with: 4_000_000_000)
        #expect(ZstdFrames.declaredContentSize(of: lying) == 4_000_000_000)
        let error = #expect(throws: ZstdError.self) { try Zstd.decompress(lying, limit: 1 << 20) }
        #expect(error?.code == .corrupt)
    }

    @Test func frameNeedingALargerWindowIsRefused() throws {
        var generator = SplitMix64(seed: 27)
        let bytes = generator.bytes(1 << 20)
        let frame = ZstdFrames.windowedFrame(repeating: bytes, times: 1, windowLog: 27)
        let error = #expect(throws: ZstdError.self) { try Zstd.decompress(frame, limit: 16 << 20) }
        #expect(error?.code == .windowTooLarge)
        #expect(error?.reason == .invalid)
        #expect(error?.message.contains("maximumWindowLog 23") == true)
        #expect(try Zstd.decompress(frame, limit: 16 << 20, maximumWindowLog: 27) == bytes)
    }

    @Test func windowLogOutsideZstdsRangeIsAnInternalFailure() throws {
        let frame = try Zstd.compress([1, 2, 3])
        for windowLog in [0, 9, 32, Int.max] {
            let error = #expect(throws: ZstdError.self) { try Zstd.decompress(frame, limit: 10, maximumWindowLog: windowLog) }
            #expect(error?.code == .internalFailure, "maximumWindowLog \(windowLog)")
            #expect(error?.reason == .failed)
        }
    }

    @Test func descriptionNamesTheCode() {
        let error = ZstdError(.windowTooLarge, message: "too wide")
        #expect(error.description == "windowTooLarge: too wide")
    }
}

// MARK: Helpers

/// Text shaped like a sync body: an array of small documents with varying values.
private func makeJSONLikeText(byteCount: Int) -> [UInt8] {
    var generator = SplitMix64(seed: UInt64(byteCount))
    var text = "["
    var index = 0
    while text.utf8.count < byteCount {
        let value = generator.next()
        text += "{\"id\":\"note-\(index)\",\"version\":\(value % 100_000),\"title\":\"Title \(value >> 40)\","
        text += "\"done\":\(value & 1 == 0),\"tags\":[\"t\(value % 17)\",\"t\(value % 5)\"]},\n"
        index += 1
    }
    return Array(text.utf8.prefix(byteCount))
}

/// The parts of a zstd frame header that the tests look at.
