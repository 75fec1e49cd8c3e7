/// zstd frames that misbehave: bombs and frames that lie about their size, for tests of the
/// code that reads bodies from the network.
public enum ZstdFrames {
    /// The parts of a frame header that tests rewrite.
    public struct Header: Sendable {
        /// Whether the frame's window is its content size.
        public var isSingleSegment: Bool
        /// Whether the frame ends with a checksum.
        public var hasChecksum: Bool
        /// Where the content size field starts.
        public var contentSizeOffset: Int
        /// How many bytes the content size field takes.
        public var contentSizeWidth: Int
    }

    /// The header of `frame`.
    public static func header(of frame: [UInt8]) -> Header {
        let descriptor = frame[4]
        let isSingleSegment = descriptor & 0x20 != 0
        let dictionaryIDWidth = [0, 1, 2, 4][Int(descriptor & 0x03)]
        let contentSizeWidth = [isSingleSegment ? 1 : 0, 2, 4, 8][Int(descriptor >> 6)]
        return Header(
            isSingleSegment: isSingleSegment, hasChecksum: descriptor & 0x04 != 0,
            contentSizeOffset: 5 + (isSingleSegment ? 0 : 1) + dictionaryIDWidth, contentSizeWidth: contentSizeWidth)
    }

    /// `frame` with its content size field rewritten to declare `size` (the field keeps its width):
    /// a frame that lies about its size.
    public static func replacingContentSize(of frame: [UInt8], with size: UInt64) -> [UInt8] {
        let header = header(of: frame)
        // A 2-byte field stores the size minus 256.
        let stored = header.contentSizeWidth == 2 ? size - 256 : size
        precondition(header.contentSizeWidth == 8 || stored < 1 << (8 * header.contentSizeWidth), "\(size) does not fit")
        var result = frame
        for byte in 0..<header.contentSizeWidth {
            result[header.contentSizeOffset + byte] = UInt8(truncatingIfNeeded: stored >> (8 * UInt64(byte)))
        }
        return result
    }

    /// The content size the frame's header declares, `nil` when it declares none.
    public static func declaredContentSize(of frame: [UInt8]) -> UInt64? {
        let header = header(of: frame)
        guard header.contentSizeWidth > 0 else { return nil }
        var size: UInt64 = 0
        for byte in (0..<header.contentSizeWidth).reversed() {
            size = size << 8 | UInt64(frame[header.contentSizeOffset + byte])
        }
        return header.contentSizeWidth == 2 ? size + 256 : size
    }

    /// A frame of `chunk` repeated `times`, written block by block (so a bomb never exists
    /// uncompressed) with a window of `2^windowLog` bytes in its header: not single-segment, no
    /// checksum, and the total size declared only when `declaringSize`. Blocks are RLE where the
    /// chunk is one byte repeated, else raw: what matters here is the frame's shape, not its size.
    public static func windowedFrame(
        repeating chunk: [UInt8], times: Int, declaringSize: Bool = false, windowLog: Int = 20
    ) -> [UInt8] {
        precondition((10...31).contains(windowLog), "zstd windows are 2^10 to 2^31 bytes")
        let total = UInt64(chunk.count) * UInt64(times)
        // Descriptor: content size field of 8 bytes (flag 3) or none, not single-segment, no
        // checksum, no dictionary; then the window descriptor, a power of two (mantissa 0).
        var frame: [UInt8] = [0x28, 0xB5, 0x2F, 0xFD, declaringSize ? 0xC0 : 0x00, UInt8((windowLog - 10) << 3)]
        if declaringSize {
            for byte in 0..<8 { frame.append(UInt8(truncatingIfNeeded: total >> (8 * UInt64(byte)))) }
        }
        let blockSize = UInt64(min(1 << windowLog, 128 << 10))
        let single = chunk.first.flatMap { first in chunk.allSatisfy { $0 == first } ? first : nil }
        var written: UInt64 = 0
        repeat {
            let size = min(blockSize, total - written)
            let isLast = written + size == total
            // Block header: last flag, type (0 raw, 1 RLE), size; little-endian, 3 bytes.
            let type: UInt64 = single != nil ? 1 : 0
            let header = (isLast ? 1 : 0) | type << 1 | size << 3
            frame += [UInt8(truncatingIfNeeded: header), UInt8(truncatingIfNeeded: header >> 8), UInt8(truncatingIfNeeded: header >> 16)]
            if let single {
                frame.append(single)
            } else {
                for position in written..<(written + size) { frame.append(chunk[Int(position % UInt64(chunk.count))]) }
            }
            written += size
        } while written < total
        return frame
    }
}
