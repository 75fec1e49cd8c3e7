/// A strict (RFC 8259) pull reader over JSON bytes: a low-level tool for decoders that read a known
/// shape key by key instead of building a `Value` tree first, and the parser behind `Value(json:)`.
///
/// The reader walks the bytes once, front to back. Structure is read with `beginObject()` /
/// `nextKey()` and `beginArray()` / `nextElement()`; any value can be read whole with `readValue()`.
/// Every step refuses bad JSON exactly as `Value(json:)` does, with the same `ValueError` (the same
/// detail and byte offset, and the dotted path of keys for errors that name a field), so a decoder
/// built on it reports the same first JSON error as parsing the whole text would.
///
///     var reader = JSONReader(bytes: Array(#"{"a": [1, 2], "b": true}"#.utf8))
///     guard try reader.beginObject() else { ... }  // not an object: read it with readValue()
///     while let key = try reader.nextKey() {
///         let value = try reader.readValue()
///     }
///     try reader.finish()
///
/// Calls must follow the JSON: after `beginObject()`, `nextKey()` until it returns `nil`, reading
/// exactly one value after each key; after `beginArray()`, `nextElement()` until it returns
/// `false`, reading one value each time it returns `true`. Duplicate keys are for the caller to
/// find (it knows which keys it has seen): it throws `makeDuplicateKeyError()` after reading the
/// repeated key's value, as `Value(json:)` does.
package struct JSONReader {
    private let bytes: [UInt8]
    private let maximumDepth: Int
    private var index = 0
    /// How many objects and arrays are open around the reader's position: the depth of the next value.
    private var openContainers = 0
    /// Set between `beginObject()`/`beginArray()` and the first `nextKey()`/`nextElement()`, which
    /// then has no `,` to read. One flag is enough: nothing else is read between those two calls.
    private var isAtContainerStart = false
    /// The keys from the top to the value being read: a field's dotted path is built only for an
    /// error, not for every key.
    private var keys: [String] = []

    /// A reader at the start of `bytes`.
    ///
    /// - Parameter maximumDepth: the deepest nesting accepted (a value at the top is level 0).
    package init(bytes: [UInt8], maximumDepth: Int = ValueLimits.maximumDepth) {
        self.bytes = bytes
        self.maximumDepth = maximumDepth
    }

    // MARK: Structure

    /// Starts reading an object when the next value is one: reads its `{` and returns `true`.
    /// Otherwise reads nothing and returns `false` (the value is still there for `readValue()`).
    ///
    /// - Throws: `ValueError` (`tooDeep`) when the object would be nested deeper than the limit.
    package mutating func beginObject() throws(ValueError) -> Bool {
        try beginContainer(UInt8(ascii: "{"))
    }

    /// The next key of the object being read, or `nil` after its closing `}`. The reader is then at
    /// the key's value, which must be read next.
    ///
    /// - Throws: `ValueError` (`malformedJSON`, `invalidUTF8`) for a missing `,` `:` or `}`, a key
    ///   that is not a string, or the end of the text.
    package mutating func nextKey() throws(ValueError) -> String? {
        if isAtContainerStart {
            isAtContainerStart = false
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                endContainer()
                return nil
            }
        } else {
            _ = keys.popLast() // the previous key's
            skipWhitespace()
            guard index < bytes.count else { throw malformed("unexpected end") }
            switch bytes[index] {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"):
                endContainer()
                return nil
            default: throw malformed("expected , or }")
            }
        }
        skipWhitespace()
        guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw malformed("expected a key") }
        let key = try readString()
        skipWhitespace()
        guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw malformed("expected :") }
        index += 1
        skipWhitespace()
        keys.append(key)
        return key
    }

    /// Starts reading an array when the next value is one: reads its `[` and returns `true`.
    /// Otherwise reads nothing and returns `false` (the value is still there for `readValue()`).
    ///
    /// - Throws: `ValueError` (`tooDeep`) when the array would be nested deeper than the limit.
    package mutating func beginArray() throws(ValueError) -> Bool {
        try beginContainer(UInt8(ascii: "["))
    }

    /// Whether the array being read has another element: `true` with the reader at it, which must
    /// be read next; `false` after the closing `]`.
    ///
    /// - Throws: `ValueError` (`malformedJSON`) for a missing `,` or `]`, or the end of the text.
    package mutating func nextElement() throws(ValueError) -> Bool {
        if isAtContainerStart {
            isAtContainerStart = false
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                endContainer()
                return false
            }
        } else {
            skipWhitespace()
            guard index < bytes.count else { throw malformed("unexpected end") }
            switch bytes[index] {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]"):
                endContainer()
                return false
            default: throw malformed("expected , or ]")
            }
        }
        skipWhitespace()
        return true
    }

    /// The error for a key the object being read already had, naming the key's path. Throw it after
    /// reading the repeated key's value.
    package func makeDuplicateKeyError() -> ValueError {
        ValueError(.malformedJSON, field: path, detail: "duplicate key")
    }

    /// Checks that nothing but whitespace follows the value read.
    ///
    /// - Throws: `ValueError` (`malformedJSON`) for anything else.
    package mutating func finish() throws(ValueError) {
        skipWhitespace()
        guard index == bytes.count else { throw malformed("trailing characters") }
    }

    private mutating func beginContainer(_ opening: UInt8) throws(ValueError) -> Bool {
        skipWhitespace()
        guard index < bytes.count, bytes[index] == opening else { return false }
        guard openContainers < maximumDepth else {
            throw ValueError(.tooDeep, field: path, detail: "deeper than \(maximumDepth) levels")
        }
        index += 1
        openContainers += 1
        skipWhitespace()
        isAtContainerStart = true
        return true
    }

    /// Reads a closing `}` or `]`.
    private mutating func endContainer() {
        index += 1
        openContainers -= 1
    }

    // MARK: Values

    /// Reads the next value whole.
    ///
    /// - Throws: `ValueError` for malformed JSON, invalid UTF-8, lone surrogates, numbers that do
    ///   not fit a double, nesting deeper than the limit and duplicate keys.
    package mutating func readValue() throws(ValueError) -> Value {
        skipWhitespace()
        guard index < bytes.count else { throw malformed("unexpected end") }
        switch bytes[index] {
        case UInt8(ascii: "n"): return try readLiteral("null", .null)
        case UInt8(ascii: "t"): return try readLiteral("true", .bool(true))
        case UInt8(ascii: "f"): return try readLiteral("false", .bool(false))
        case UInt8(ascii: "\""): return .string(try readString())
        case UInt8(ascii: "["):
            _ = try beginArray()
            var elements: [Value] = []
            while try nextElement() {
                elements.append(try readValue())
            }
            return .array(elements)
        case UInt8(ascii: "{"):
            _ = try beginObject()
            var entries: [String: Value] = [:]
            var hasReservedKey = false
            while let key = try nextKey() {
                if key.utf8.first == UInt8(ascii: "$") { hasReservedKey = true }
                guard entries.updateValue(try readValue(), forKey: key) == nil else { throw makeDuplicateKeyError() }
            }
            // Exactly `{"$timestamp": text}` or `{"$bytes": text}`; any other map with a `$` key
            // stays a map, which validation refuses naming the field.
            if hasReservedKey, entries.count == 1, let (key, value) = entries.first, let tagged = Value.tagged(key: key, value: value) {
                return tagged
            }
            return .map(entries)
        default:
            return try readNumber()
        }
    }

    /// Reads past the next value without making it, refusing exactly what `readValue()` refuses
    /// (duplicate keys included): for parts a decoder does not need.
    ///
    /// - Throws: `ValueError` as `readValue()` does.
    package mutating func skipValue() throws(ValueError) {
        skipWhitespace()
        guard index < bytes.count else { throw malformed("unexpected end") }
        switch bytes[index] {
        case UInt8(ascii: "n"): _ = try readLiteral("null", .null)
        case UInt8(ascii: "t"): _ = try readLiteral("true", .bool(true))
        case UInt8(ascii: "f"): _ = try readLiteral("false", .bool(false))
        case UInt8(ascii: "\""): try skipString()
        case UInt8(ascii: "["):
            _ = try beginArray()
            while try nextElement() { try skipValue() }
        case UInt8(ascii: "{"):
            _ = try beginObject()
            // Keys compare as Swift strings, as a map's do: a few in a list, more in a set.
            var few: [String] = []
            var many: Set<String> = []
            while let key = try nextKey() {
                try skipValue()
                let isNew: Bool
                if few.count < 8 {
                    isNew = !few.contains(key)
                    few.append(key)
                } else {
                    if many.isEmpty { many = Set(few) }
                    isNew = many.insert(key).inserted
                }
                guard isNew else { throw makeDuplicateKeyError() }
            }
        default:
            _ = try readNumber()
        }
    }

    /// Reads past a string; the reader is at its opening quote. Plain ASCII is only scanned; any
    /// other string is read as `readString()` reads it, to be checked the same way.
    private mutating func skipString() throws(ValueError) {
        let quote = index
        index += 1
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                index += 1
                return
            }
            if byte == UInt8(ascii: "\\") || byte < 0x20 || byte >= 0x80 { break }
            index += 1
        }
        index = quote
        _ = try readString()
    }

    private var path: String { keys.joined(separator: ".") }

    private func malformed(_ what: String) -> ValueError {
        ValueError(.malformedJSON, field: "", detail: "\(what) at byte \(index)")
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1
            default: return
            }
        }
    }

    private mutating func readLiteral(_ literal: StaticString, _ value: Value) throws(ValueError) -> Value {
        let count = literal.utf8CodeUnitCount
        guard bytes.count - index >= count else { throw malformed("unexpected character") }
        for offset in 0..<count where bytes[index + offset] != literal.utf8Start[offset] {
            throw malformed("unexpected character")
        }
        index += count
        return value
    }

    private static func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }

    private mutating func readNumber() throws(ValueError) -> Value {
        let start = index
        let isNegative = bytes[index] == UInt8(ascii: "-")
        if isNegative { index += 1 }
        // The magnitude is accumulated on the way: most numbers are integers that fit, and need no
        // text to be parsed again.
        let digitsStart = index
        var magnitude: UInt64 = 0
        var overflows = false
        while index < bytes.count, Self.isDigit(bytes[index]) {
            let (shifted, shiftOverflows) = magnitude.multipliedReportingOverflow(by: 10)
            let (sum, sumOverflows) = shifted.addingReportingOverflow(UInt64(bytes[index] - UInt8(ascii: "0")))
            magnitude = sum
            overflows = overflows || shiftOverflows || sumOverflows
            index += 1
        }
        guard index > digitsStart else { throw malformed("unexpected character") }
        if bytes[digitsStart] == UInt8(ascii: "0"), index - digitsStart > 1 { throw malformed("leading zero") }
        var isInteger = true
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            try readDigits()
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            try readDigits()
        }
        if isInteger, !overflows {
            if !isNegative, magnitude <= UInt64(Int64.max) { return .int(Int64(magnitude)) }
            if isNegative, magnitude <= Int64.min.magnitude { return .int(Int64(truncatingIfNeeded: 0 &- magnitude)) }
        }
        // An integer too large for Int64 is read as a double, as any other number.
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        guard let double = Double(text), double.isFinite else {
            throw ValueError(.notRepresentable, field: path, detail: "number \(text) does not fit a double")
        }
        return .double(double)
    }

    /// Reads one or more digits.
    private mutating func readDigits() throws(ValueError) {
        let start = index
        while index < bytes.count, Self.isDigit(bytes[index]) { index += 1 }
        guard index > start else { throw malformed("digit expected") }
    }

    /// Reads a string; the reader is at its opening quote.
    private mutating func readString() throws(ValueError) -> String {
        index += 1 // opening quote
        let start = index
        // Most strings have no escape: they are made straight from the bytes.
        var allBits: UInt8 = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                index += 1
                return try makeString(bytes, from: start, to: index - 1, isASCII: allBits < 0x80)
            }
            if byte == UInt8(ascii: "\\") || byte < 0x20 { break }
            allBits |= byte
            index += 1
        }
        var utf8 = Array(bytes[start..<index])
        try readEscapedRest(into: &utf8)
        return try makeString(utf8, from: 0, to: utf8.count, isASCII: false)
    }

    /// A string of `utf8[start..<end]`. Invalid UTF-8 is refused, never repaired; ASCII needs no
    /// check (and the validating initializer, generic, costs more than the rest of the reading).
    private func makeString(_ utf8: [UInt8], from start: Int, to end: Int, isASCII: Bool) throws(ValueError) -> String {
        let string = utf8.withUnsafeBufferPointer { buffer in
            let text = UnsafeBufferPointer(rebasing: buffer[start..<end])
            return isASCII ? String(decoding: text, as: UTF8.self) : String(validating: text, as: UTF8.self)
        }
        guard let string else { throw ValueError(.invalidUTF8, field: path, detail: "a string is not valid UTF-8") }
        return string
    }

    /// Reads the rest of a string that holds escapes (or is bad), up to and past its closing quote.
    private mutating func readEscapedRest(into utf8: inout [UInt8]) throws(ValueError) {
        while true {
            guard index < bytes.count else { throw malformed("unterminated string") }
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                return
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { throw malformed("unterminated string") }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): utf8.append(UInt8(ascii: "\""))
                case UInt8(ascii: "\\"): utf8.append(UInt8(ascii: "\\"))
                case UInt8(ascii: "/"): utf8.append(UInt8(ascii: "/"))
                case UInt8(ascii: "b"): utf8.append(0x08)
                case UInt8(ascii: "f"): utf8.append(0x0C)
                case UInt8(ascii: "n"): utf8.append(0x0A)
                case UInt8(ascii: "r"): utf8.append(0x0D)
                case UInt8(ascii: "t"): utf8.append(0x09)
                case UInt8(ascii: "u"): UTF8.encode(try readUnicodeEscape()) { utf8.append($0) }
                default: throw malformed("bad escape")
                }
            case 0..<0x20:
                throw malformed("control character in a string")
            default:
                utf8.append(byte)
                index += 1
            }
        }
    }

    /// Reads the hex digits of a `\u` escape (and of its low surrogate, for a high one).
    private mutating func readUnicodeEscape() throws(ValueError) -> Unicode.Scalar {
        var scalar = try readHex4()
        if (0xD800...0xDBFF).contains(scalar) {
            guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                throw loneSurrogate()
            }
            index += 2
            let low = try readHex4()
            guard (0xDC00...0xDFFF).contains(low) else { throw loneSurrogate() }
            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
        }
        // Only a lone low surrogate is left that is no scalar.
        guard let unicodeScalar = Unicode.Scalar(scalar) else { throw loneSurrogate() }
        return unicodeScalar
    }

    private func loneSurrogate() -> ValueError {
        ValueError(.invalidUTF8, field: path, detail: "lone surrogate in a string")
    }

    private mutating func readHex4() throws(ValueError) -> UInt32 {
        guard bytes.count - index >= 4 else { throw malformed("bad \\u escape") }
        var scalar: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw malformed("bad \\u escape")
            }
            scalar = scalar << 4 | UInt32(digit)
            index += 1
        }
        return scalar
    }
}

extension JSONReader {
    /// The keys of one object that its decoder does not know: kept to find one that is repeated
    /// (keys compare as Swift strings, as a `Value` map's keys do) and to name the smallest.
    package struct UnknownKeys: Sendable {
        /// The smallest unknown key in Swift's string order, or `nil` when there is none.
        package private(set) var first: String?
        private var keys: Set<String> = []

        /// No keys.
        package init() {}

        /// Adds `key`; `false` when it was there already (a duplicate key).
        package mutating func insert(_ key: String) -> Bool {
            guard keys.insert(key).inserted else { return false }
            if first.map({ key < $0 }) ?? true { first = key }
            return true
        }
    }
}
