import CZstd

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

    /// Compresses `chunk` repeated `times` with the streaming API, so a bomb never exists
    /// uncompressed. Declares the total size in the header only when `pledging`.
    public static func streamCompress(
        repeating chunk: [UInt8], times: Int, pledging: Bool = false, windowLog: Int32? = nil, level: Int32 = 3
    ) throws -> [UInt8] {
        guard let context = ZSTD_createCCtx() else { throw ZstdCallFailed(description: "no compression context") }
        defer { ZSTD_freeCCtx(context) }
        try check(ZSTD_CCtx_setParameter(context, ZSTD_c_compressionLevel, level))
        try check(ZSTD_CCtx_setParameter(context, ZSTD_c_checksumFlag, 1))
        if let windowLog { try check(ZSTD_CCtx_setParameter(context, ZSTD_c_windowLog, windowLog)) }
        if pledging { try check(ZSTD_CCtx_setPledgedSrcSize(context, UInt64(chunk.count * times))) }
        var frame: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: ZSTD_CStreamOutSize())
        try chunk.withUnsafeBytes { source in
            try buffer.withUnsafeMutableBytes { destination in
                for round in 0...times {
                    // The last round feeds nothing and ends the frame.
                    let isLast = round == times
                    var input = ZSTD_inBuffer(src: source.baseAddress, size: isLast ? 0 : source.count, pos: 0)
                    var remaining = 1
                    while input.pos < input.size || (isLast && remaining != 0) {
                        var output = ZSTD_outBuffer(dst: destination.baseAddress, size: destination.count, pos: 0)
                        remaining = ZSTD_compressStream2(context, &output, &input, isLast ? ZSTD_e_end : ZSTD_e_continue)
                        try check(remaining)
                        frame += destination[..<output.pos]
                    }
                }
            }
        }
        return frame
    }
}

/// A zstd call that failed while making a test frame.
public struct ZstdCallFailed: Error, CustomStringConvertible {
    /// zstd's name for the error.
    public var description: String
}

private func check(_ result: Int) throws {
    if ZSTD_isError(result) != 0 { throw ZstdCallFailed(description: String(cString: ZSTD_getErrorName(result))) }
}
