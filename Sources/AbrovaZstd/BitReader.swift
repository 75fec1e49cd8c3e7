/// Reads a zstd backward bitstream: bytes are little-endian, the stream is
/// read from its last byte toward its first, and the highest set bit of the
/// last byte marks where the data starts.
///
/// Reading past the first byte yields zero bits and makes `bitsRemaining`
/// negative; callers decide whether that is an error.
struct BackwardBitReader {
    private let bytes: [UInt8]
    private let start: Int
    /// Index of the 8-byte window currently loaded in `container`.
    private var loadPosition: Int
    /// The 8 bytes at `loadPosition`, little-endian.
    private var container: UInt64
    /// Bits of `container`, counted from its top, that are already consumed.
    private var consumed: Int

    /// Opens the stream `bytes[start..<end]`. Throws when it is empty or its
    /// last byte has no end marker.
    init(_ bytes: [UInt8], start: Int, end: Int, what: String) throws(PureZstdError) {
        guard start >= 0, end <= bytes.count, start < end else {
            throw .corrupt("\(what) is empty")
        }
        let last = bytes[end - 1]
        guard last != 0 else {
            throw .corrupt("\(what) does not end with a marker bit")
        }
        self.bytes = bytes
        self.start = start
        let size = end - start
        if size >= 8 {
            loadPosition = end - 8
            container = BackwardBitReader.load64(bytes, end - 8)
            consumed = 0
        } else {
            // Short stream: pretend the missing high bytes exist and are consumed.
            loadPosition = start
            var v: UInt64 = 0
            for k in 0..<size { v |= UInt64(bytes[start + k]) << UInt64(8 * k) }
            container = v
            consumed = (8 - size) * 8
        }
        consumed += last.leadingZeroBitCount + 1
    }

    @inline(__always)
    private static func load64(_ bytes: [UInt8], _ at: Int) -> UInt64 {
        var v: UInt64 = 0
        for k in 0..<8 { v |= UInt64(bytes[at + k]) << UInt64(8 * k) }
        return v
    }

    /// Bits not yet read; negative once the reader has gone past the start.
    var bitsRemaining: Int { (loadPosition - start) * 8 + 64 - consumed }

    /// True when every bit was read and none past the start.
    var isExactlyConsumed: Bool { bitsRemaining == 0 }

    /// Moves the 8-byte window toward the start so that at least 57 bits
    /// are available, when the stream still has them.
    @inline(__always)
    private mutating func reload() {
        guard consumed <= 64 else { return }
        let bytesUsed = consumed >> 3
        if bytesUsed == 0 { return }
        let move = min(bytesUsed, loadPosition - start)
        if move == 0 { return }
        loadPosition -= move
        consumed -= move * 8
        container = BackwardBitReader.load64(bytes, loadPosition)
    }

    /// Reads `count` bits (0...56) as an unsigned value.
    @inline(__always)
    mutating func read(_ count: Int) -> UInt64 {
        if count == 0 { return 0 }
        if consumed + count > 64 { reload() }
        let value = (container << UInt64(max(0, consumed))) >> UInt64(64 - count)
        consumed += count
        return value
    }

    /// Returns the next `count` bits (1...56) without consuming them.
    @inline(__always)
    mutating func peek(_ count: Int) -> UInt64 {
        if consumed + count > 64 { reload() }
        return (container << UInt64(max(0, consumed))) >> UInt64(64 - count)
    }

    /// Consumes bits previously examined with `peek`.
    @inline(__always)
    mutating func skip(_ count: Int) {
        consumed += count
    }
}

/// Reads bits from the front of a byte range, least significant bit first,
/// as FSE table descriptions are stored. Bits past the end read as zero;
/// `bytesUsed` tells the caller how far the description really went.
struct ForwardBitReader {
    private let bytes: [UInt8]
    private let start: Int
    private let end: Int
    private(set) var bitPosition = 0

    init(_ bytes: [UInt8], start: Int, end: Int) {
        self.bytes = bytes
        self.start = start
        self.end = max(start, min(end, bytes.count))
    }

    /// Returns the next `count` bits (0...32) without consuming them.
    func peek(_ count: Int) -> UInt32 {
        var value: UInt64 = 0
        var byteIndex = start + (bitPosition >> 3)
        var shift = 0
        // Gather up to 5 bytes: enough for 32 bits at any alignment.
        while shift < 40 {
            if byteIndex < end { value |= UInt64(bytes[byteIndex]) << UInt64(shift) }
            byteIndex += 1
            shift += 8
        }
        value >>= UInt64(bitPosition & 7)
        return UInt32(truncatingIfNeeded: value & ((UInt64(1) << UInt64(count)) &- 1))
    }

    mutating func skip(_ count: Int) {
        bitPosition += count
    }

    mutating func read(_ count: Int) -> UInt32 {
        let v = peek(count)
        skip(count)
        return v
    }

    /// Whole bytes touched so far.
    var bytesUsed: Int { (bitPosition + 7) >> 3 }
    var available: Int { end - start }
}
