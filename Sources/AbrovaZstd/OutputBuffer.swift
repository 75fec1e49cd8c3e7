/// The decoder's output: grows on demand but never past the caller's limit.
struct OutputBuffer {
    /// Storage; only the first `count` bytes are output.
    private(set) var storage: [UInt8] = []
    private(set) var count = 0
    let limit: Int

    init(limit: Int) {
        self.limit = limit
    }

    /// Makes room for `extra` more bytes, or throws `.tooLarge` past the limit.
    @inline(__always)
    mutating func ensure(_ extra: Int) throws(PureZstdError) {
        guard extra <= limit - count else {
            throw PureZstdError(.tooLarge, "the output exceeds the limit of \(limit) bytes")
        }
        if count + extra > storage.count { grow(count + extra) }
    }

    private mutating func grow(_ needed: Int) {
        // Double, but never beyond the limit.
        let target = min(limit, max(needed, storage.count * 2, 4096))
        storage.append(contentsOf: repeatElement(0, count: target - storage.count))
    }

    /// Reserves exactly `extra` bytes ahead, when a frame header declares its size.
    mutating func reserve(_ extra: Int) {
        let target = min(limit, count + extra)
        if target > storage.count {
            storage.append(contentsOf: repeatElement(0, count: target - storage.count))
        }
    }

    /// Appends `source[range]`; the caller has called `ensure`.
    @inline(__always)
    mutating func append(_ source: [UInt8], _ range: Range<Int>) {
        let n = range.count
        if n == 0 { return }
        let at = count
        storage.withUnsafeMutableBufferPointer { dst in
            source.withUnsafeBufferPointer { src in
                let d = dst.baseAddress! + at
                d.update(from: src.baseAddress! + range.lowerBound, count: n)
            }
        }
        count += n
    }

    /// Appends `n` copies of `byte`; the caller has called `ensure`.
    mutating func appendRepeating(_ byte: UInt8, _ n: Int) {
        if n == 0 { return }
        let at = count
        storage.withUnsafeMutableBufferPointer { dst in
            (dst.baseAddress! + at).update(repeating: byte, count: n)
        }
        count += n
    }

    /// Copies `length` bytes starting `offset` bytes back (1 <= offset <= count),
    /// byte by byte where source and destination overlap; the caller has called `ensure`.
    @inline(__always)
    mutating func copyMatch(offset: Int, length: Int) {
        let at = count
        storage.withUnsafeMutableBufferPointer { buffer in
            let base = buffer.baseAddress!
            let dst = base + at
            let src = base + (at - offset)
            if offset >= length {
                dst.update(from: src, count: length)
            } else if offset == 1 {
                dst.update(repeating: src.pointee, count: length)
            } else {
                for i in 0..<length { dst[i] = src[i] }
            }
        }
        count += length
    }

    /// The output so far, trimmed to its real size.
    mutating func finish() -> [UInt8] {
        storage.removeLast(storage.count - count)
        return storage
    }
}
