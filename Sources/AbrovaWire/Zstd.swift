import AbrovaCore
import AbrovaZstd

#if ABROVA_SYSTEM_ZSTD
    import CZstd
#endif

/// Why zstd data was refused, or why compressing failed.
///
/// A struct over a code, so that new codes do not break callers that switch on them.
public struct ZstdError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What kind of problem it is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// Data that is not zstd, or a frame that is truncated, followed by garbage, or fails its
        /// checksum or its declared content size.
        public static let corrupt = Code(name: "corrupt")
        /// Data that expands past the caller's limit.
        public static let tooLarge = Code(name: "tooLarge")
        /// A frame that needs a larger window (more memory to decode) than the caller allows.
        public static let windowTooLarge = Code(name: "windowTooLarge")
        /// zstd itself failed (out of memory, a parameter out of range): not the data's fault.
        public static let internalFailure = Code(name: "internalFailure")
        public var description: String { name }
    }

    /// What kind of problem it is.
    public let code: Code
    /// A sentence for people; names the limit when a limit was exceeded.
    public let message: String

    /// An error of kind `code`.
    public init(_ code: Code, message: String) {
        self.code = code
        self.message = message
    }

    /// Why a body that fails so is refused.
    public var reason: Refusal.Reason {
        switch code {
        case .tooLarge: .tooLarge
        case .internalFailure: .failed
        default: .invalid
        }
    }

    public var description: String { "\(code): \(message)" }
}

/// zstd compression of request and response bodies: the system's libzstd where the package is
/// built with its `SystemZstd` trait on Linux (the default there), else `AbrovaZstd`'s pure-Swift
/// codec (on Apple platforms, whose SDKs have no libzstd). The two write frames each other reads.
///
///     let body = try Zstd.compress(json)
///     let json = try Zstd.decompress(body, limit: 32 << 20)
public enum Zstd {
    /// Compresses `bytes` into one zstd frame (content size recorded, checksum on).
    ///
    /// - Parameter level: zstd's compression level; values outside zstd's range are clamped.
    /// - Throws: `ZstdError` with code `internalFailure` when zstd fails (out of memory).
    public static func compress(_ bytes: [UInt8], level: Int32 = 3) throws(ZstdError) -> [UInt8] {
        #if ABROVA_SYSTEM_ZSTD
            try SystemZstd.compress(bytes, level: level)
        #else
            PureZstd.compress(bytes, level: Int(level))
        #endif
    }

    /// Decompresses one or more concatenated frames, never trusting a frame's declared content size
    /// (it only sizes the first allocation, within `limit` and 32 times the input).
    ///
    /// Output is produced by streaming and refused as soon as it would exceed `limit`, so memory
    /// stays near `limit` plus one window (at most `2^maximumWindowLog` bytes) whatever a frame
    /// declares. A single-segment frame's window is its declared size, so one declaring more than
    /// 128 KiB and more than the window allows is refused from its header alone (a smaller one
    /// decodes whatever the window limit, as libzstd's streaming decoder does).
    ///
    /// - Parameters:
    ///   - limit: the most bytes the output may hold.
    ///   - maximumWindowLog: frames that need a window larger than `2^maximumWindowLog` bytes are
    ///     refused before their window is allocated. zstd accepts 10...31 (30 on 32-bit systems).
    /// - Throws: `ZstdError` with code `tooLarge` when the output would exceed `limit`;
    ///   `windowTooLarge` when a frame needs too large a window; `corrupt` for empty, truncated or
    ///   non-zstd input, trailing garbage, a wrong checksum or a wrong declared content size;
    ///   `internalFailure` when `maximumWindowLog` is out of range or memory runs out.
    public static func decompress(_ bytes: [UInt8], limit: Int, maximumWindowLog: Int = 23) throws(ZstdError) -> [UInt8] {
        precondition(limit >= 0, "limit must not be negative")
        guard !bytes.isEmpty else { throw ZstdError(.corrupt, message: "the body is empty, not a zstd frame") }
        #if ABROVA_SYSTEM_ZSTD
            return try SystemZstd.decompress(bytes, limit: limit, maximumWindowLog: maximumWindowLog)
        #else
            let range = 10...(Int.bitWidth == 64 ? 31 : 30)
            guard range.contains(maximumWindowLog) else {
                throw ZstdError(
                    .internalFailure,
                    message: "maximumWindowLog \(maximumWindowLog) is outside zstd's range \(range.lowerBound)...\(range.upperBound)")
            }
            do {
                return try PureZstd.decompress(bytes, limit: limit, maximumWindowLog: maximumWindowLog)
            } catch {
                throw ZstdError(error, limit: limit, maximumWindowLog: maximumWindowLog)
            }
        #endif
    }
}

extension ZstdError {
    /// The error for a refusal of the pure-Swift codec, worded as for libzstd's.
    init(_ error: PureZstdError, limit: Int, maximumWindowLog: Int) {
        switch error.kind {
        case .tooLarge:
            self.init(.tooLarge, message: "the body expands past \(limit) bytes (limit `limit`)")
        case .windowTooLarge:
            self.init(
                .windowTooLarge,
                message: "a frame needs a window larger than \(1 << maximumWindowLog) bytes (limit maximumWindowLog \(maximumWindowLog))")
        case .corrupt:
            self.init(.corrupt, message: "the body is not valid zstd data: \(error.message)")
        }
    }
}

#if ABROVA_SYSTEM_ZSTD
    /// The codec over the system's libzstd.
    private enum SystemZstd {
        static func compress(_ bytes: [UInt8], level: Int32) throws(ZstdError) -> [UInt8] {
            let context = try CompressionContext()
            try context.set(ZSTD_c_compressionLevel, level)
            try context.set(ZSTD_c_checksumFlag, 1)
            try context.set(ZSTD_c_contentSizeFlag, 1)
            let bound = ZSTD_compressBound(bytes.count)
            guard ZSTD_isError(bound) == 0 else { throw ZstdError(internal: bound, doing: "sizing the output") }
            // Compressed into a worst-case buffer, then copied out so that the result holds no slack.
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: bound, alignment: 1)
            defer { buffer.deallocate() }
            let written = bytes.withUnsafeBytes { source in
                ZSTD_compress2(context.handle, buffer.baseAddress, buffer.count, source.baseAddress, source.count)
            }
            guard ZSTD_isError(written) == 0 else { throw ZstdError(internal: written, doing: "compressing") }
            return Array(UnsafeRawBufferPointer(rebasing: buffer[..<written]))
        }

        static func decompress(_ bytes: [UInt8], limit: Int, maximumWindowLog: Int) throws(ZstdError) -> [UInt8] {
            let context = try DecompressionContext(maximumWindowLog: maximumWindowLog)
            // Array's withUnsafeBytes does not carry a typed error through; Result does.
            return try bytes.withUnsafeBytes { source in
                Result { () throws(ZstdError) in try context.decompress(source, limit: limit, maximumWindowLog: maximumWindowLog) }
            }.get()
        }
    }

    /// A compression context, freed with its owner. Confined to the call that made it.
    private final class CompressionContext {
        let handle: OpaquePointer

        init() throws(ZstdError) {
            guard let context = ZSTD_createCCtx() else {
                throw ZstdError(.internalFailure, message: "zstd could not allocate a compression context")
            }
            handle = context
        }

        deinit { ZSTD_freeCCtx(handle) }

        func set(_ parameter: ZSTD_cParameter, _ value: Int32) throws(ZstdError) {
            let result = ZSTD_CCtx_setParameter(handle, parameter, value)
            guard ZSTD_isError(result) == 0 else { throw ZstdError(internal: result, doing: "setting a compression parameter") }
        }
    }

    /// A decompression context, freed with its owner. Confined to the call that made it.
    private final class DecompressionContext {
        let handle: OpaquePointer

        init(maximumWindowLog: Int) throws(ZstdError) {
            guard let context = ZSTD_createDCtx() else {
                throw ZstdError(.internalFailure, message: "zstd could not allocate a decompression context")
            }
            handle = context
            let bounds = ZSTD_dParam_getBounds(ZSTD_d_windowLogMax)
            guard let windowLog = Int32(exactly: maximumWindowLog), bounds.lowerBound...bounds.upperBound ~= windowLog else {
                throw ZstdError(
                    .internalFailure,
                    message: "maximumWindowLog \(maximumWindowLog) is outside zstd's range \(bounds.lowerBound)...\(bounds.upperBound)")
            }
            let result = ZSTD_DCtx_setParameter(context, ZSTD_d_windowLogMax, windowLog)
            guard ZSTD_isError(result) == 0 else { throw ZstdError(internal: result, doing: "setting the largest window") }
        }

        deinit { ZSTD_freeDCtx(handle) }

        /// Decodes every frame in `source`, refusing output past `limit`.
        func decompress(_ source: UnsafeRawBufferPointer, limit: Int, maximumWindowLog: Int) throws(ZstdError) -> [UInt8] {
            let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: ZSTD_DStreamOutSize(), alignment: 1)
            defer { chunk.deallocate() }
            var output: [UInt8] = []
            // A first size: what the first frame declares (our bodies do), a hint only, within 32 times
            // the input, or a guess for a typical body. Growth below never reserves past `limit`, and
            // what the frames hold is checked as they are decoded.
            let declared = ZSTD_getFrameContentSize(source.baseAddress, source.count)
            let hint = declared < UInt64.max - 1 ? Int(clamping: declared) : source.count * 4
            output.reserveCapacity(min(limit, max(4096, min(hint, source.count * 32))))
            var input = ZSTD_inBuffer(src: source.baseAddress, size: source.count, pos: 0)
            while true {
                var out = ZSTD_outBuffer(dst: chunk.baseAddress, size: chunk.count, pos: 0)
                let result = ZSTD_decompressStream(handle, &out, &input)
                if ZSTD_isError(result) != 0 { throw ZstdError(decoding: result, maximumWindowLog: maximumWindowLog) }
                if out.pos > limit - output.count {
                    throw ZstdError(.tooLarge, message: "the body expands past \(limit) bytes (limit `limit`)")
                }
                if out.pos > output.capacity - output.count {
                    // Doubling, but never past the limit: a bomb costs at most `limit` bytes here.
                    output.reserveCapacity(min(limit, max(output.capacity * 2, output.count + out.pos)))
                }
                output.append(contentsOf: UnsafeRawBufferPointer(rebasing: chunk[..<out.pos]))
                let isInputConsumed = input.pos == input.size
                // 0 means a frame ended and everything was flushed; the next bytes start a new frame.
                if isInputConsumed && result == 0 { return output }
                // With the input used up, a full chunk may mean more to flush; a partial one, a cut frame.
                if isInputConsumed && out.pos < out.size {
                    throw ZstdError(.corrupt, message: "the body ends inside a zstd frame")
                }
            }
        }
    }

    extension ZstdError {
        /// zstd failing for a reason that is not the data's.
        fileprivate init(internal result: Int, doing what: String) {
            self.init(.internalFailure, message: "zstd failed \(what): \(String(cString: ZSTD_getErrorName(result)))")
        }

        /// The error for a failed `ZSTD_decompressStream`.
        fileprivate init(decoding result: Int, maximumWindowLog: Int) {
            let name = String(cString: ZSTD_getErrorName(result))
            switch ZSTD_getErrorCode(result) {
            case ZSTD_error_frameParameter_windowTooLarge:
                self.init(
                    .windowTooLarge,
                    message:
                        "a frame needs a window larger than \(1 << maximumWindowLog) bytes (limit maximumWindowLog \(maximumWindowLog))")
            case ZSTD_error_memory_allocation:
                self.init(.internalFailure, message: "zstd ran out of memory decompressing: \(name)")
            default:
                self.init(.corrupt, message: "the body is not valid zstd data: \(name)")
            }
        }
    }
#endif
