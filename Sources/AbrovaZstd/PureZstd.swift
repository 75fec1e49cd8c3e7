/// Why a zstd payload could not be decoded.
public struct PureZstdError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The broad class of failure, for callers that branch on it.
    public enum Kind: Hashable, Sendable {
        /// The input is not a well-formed sequence of zstd frames.
        case corrupt
        /// Decoding would produce more bytes than the caller's limit.
        case tooLarge
        /// A frame needs a larger window than the caller allows.
        case windowTooLarge
    }

    /// The broad class of failure.
    public let kind: Kind
    /// A sentence for people that says what is wrong with the input.
    public let message: String

    /// The kind and the message, for logs.
    public var description: String {
        switch kind {
        case .corrupt: return "corrupt zstd data: \(message)"
        case .tooLarge: return "zstd output too large: \(message)"
        case .windowTooLarge: return "zstd window too large: \(message)"
        }
    }

    init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    static func corrupt(_ message: String) -> PureZstdError {
        PureZstdError(.corrupt, message)
    }
}

/// A zstd (RFC 8878) compressor and decompressor written in pure Swift.
public enum PureZstd {
    /// Compresses `bytes` into one zstd frame.
    ///
    /// The frame records the content size in its header, carries an xxhash64
    /// content checksum, and is single segment when the input fits in the
    /// default decoder window (8 MiB); larger inputs use an 8 MiB window.
    /// - Parameters:
    ///   - bytes: the data to compress; may be empty.
    ///   - level: like zstd levels: lower is faster, higher compresses more.
    ///     Values at or below 0 use the fastest settings, values above 19 the strongest.
    public static func compress(_ bytes: [UInt8], level: Int = 3) -> [UInt8] {
        FrameEncoder.compress(bytes, level: level)
    }

    /// Decodes one or more concatenated zstd frames; skippable frames
    /// (magic 0x184D2A50...0x184D2A5F) are skipped.
    ///
    /// - Parameters:
    ///   - bytes: the compressed data; it must consist only of whole frames.
    ///   - limit: the largest output the caller accepts. Producing more throws
    ///     `.tooLarge`; memory use stays bounded by this limit.
    ///   - maximumWindowLog: frames whose window exceeds `1 << maximumWindowLog`
    ///     bytes throw `.windowTooLarge` (for single-segment frames the window is
    ///     the frame content size). Must be in 10...31 (10...30 on 32-bit systems).
    /// - Throws: `.corrupt` for empty input, a bad magic number, truncation,
    ///   trailing bytes, reserved bits, dictionary IDs, a bad checksum, a content
    ///   size mismatch or any malformed table or stream.
    public static func decompress(_ bytes: [UInt8], limit: Int, maximumWindowLog: Int = 23) throws(PureZstdError) -> [UInt8] {
        // A window must fit an Int: 2^31 bytes does not on 32-bit systems, as with libzstd.
        precondition((10...(Int.bitWidth == 64 ? 31 : 30)).contains(maximumWindowLog), "maximumWindowLog must be in 10...31 (30 on 32-bit)")
        var decoder = FrameDecoder(input: bytes, limit: max(0, limit), maximumWindowLog: maximumWindowLog)
        return try decoder.decodeAll()
    }
}
