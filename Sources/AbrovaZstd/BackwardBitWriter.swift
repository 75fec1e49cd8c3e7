/// Writes bits least significant first into bytes. Finished with `finishBackward()`
/// it produces a zstd backward bitstream (the decoder reads the last bits written
/// first, and a marker bit closes the stream); `finishForward()` just pads, as
/// FSE table descriptions need.
struct BitWriter {
    private(set) var bytes: [UInt8] = []
    private var accumulator: UInt64 = 0
    private var count = 0

    init(capacity: Int = 0) {
        bytes.reserveCapacity(capacity)
    }

    /// Appends the low `bits` bits (0...32) of `value`; higher bits must be zero.
    @inline(__always)
    mutating func write(_ value: UInt64, _ bits: Int) {
        accumulator |= value << UInt64(count)
        count += bits
        if count >= 32 {
            let word = UInt32(truncatingIfNeeded: accumulator)
            bytes.append(UInt8(truncatingIfNeeded: word))
            bytes.append(UInt8(truncatingIfNeeded: word >> 8))
            bytes.append(UInt8(truncatingIfNeeded: word >> 16))
            bytes.append(UInt8(truncatingIfNeeded: word >> 24))
            accumulator >>= 32
            count -= 32
        }
    }

    /// Bits written so far.
    var bitCount: Int { bytes.count * 8 + count }

    private mutating func flushAll() {
        while count > 0 {
            bytes.append(UInt8(truncatingIfNeeded: accumulator))
            accumulator >>= 8
            count -= 8
        }
        count = 0
        accumulator = 0
    }

    /// Adds the end marker and returns the bytes.
    mutating func finishBackward() -> [UInt8] {
        write(1, 1)
        flushAll()
        return bytes
    }

    /// Pads the last byte with zeros and returns the bytes.
    mutating func finishForward() -> [UInt8] {
        flushAll()
        return bytes
    }
}
