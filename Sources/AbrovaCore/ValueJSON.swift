// A direct JSON writer and parser for `Value`. Foundation's coders run at about a tenth of the speed
// of a writer over the enum (see DESIGN), and the hot paths (local writes, batches, pulled pages)
// encode every document, so they use these.

extension Value {
    /// The canonical JSON encoding: map keys in `canonicalOrder`, no whitespace, the
    /// shortest round-trip form for doubles (always with a `.` or an exponent, so `1.0` stays a
    /// double). Set elements are identified by this encoding.
    public var canonicalJSON: String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(256)
        writeCanonicalJSON(to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends the canonical JSON encoding to `bytes`.
    public func writeCanonicalJSON(to bytes: inout [UInt8]) {
        switch self {
        case .null: bytes.append(contentsOf: "null".utf8)
        case .bool(let bool): bytes.append(contentsOf: (bool ? "true" : "false").utf8)
        case .int(let int): Self.writeDecimal(int, to: &bytes)
        case .double(let double):
            // -0.0 == 0.0 for Value's equality, so both encode alike.
            bytes.append(contentsOf: (double == 0 ? "0.0" : double.description).utf8)
        case .string(let string): Self.writeJSONString(string, to: &bytes)
        case .array(let elements):
            bytes.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                element.writeCanonicalJSON(to: &bytes)
            }
            bytes.append(UInt8(ascii: "]"))
        case .map(let entries):
            bytes.append(UInt8(ascii: "{"))
            for (index, entry) in entries.sorted(by: { $0.key < $1.key }).enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                Self.writeJSONString(entry.key, to: &bytes)
                bytes.append(UInt8(ascii: ":"))
                entry.value.writeCanonicalJSON(to: &bytes)
            }
            bytes.append(UInt8(ascii: "}"))
        }
    }

    /// Appends an integer in decimal, without making a `String` first.
    public static func writeDecimal(_ int: Int64, to bytes: inout [UInt8]) {
        if int < 0 { bytes.append(UInt8(ascii: "-")) }
        var magnitude = int.magnitude
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var count = 0
        withUnsafeMutableBytes(of: &digits) { buffer in
            repeat {
                buffer[19 - count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            } while magnitude > 0
            bytes.append(contentsOf: buffer[(20 - count)...])
        }
    }

    /// The length in bytes of the canonical encoding, counted without writing it.
    public var canonicalByteCount: Int {
        switch self {
        case .null: 4
        case .bool(let bool): bool ? 4 : 5
        case .int(let int): Self.decimalDigits(int)
        case .double(let double): double == 0 ? 3 : double.description.utf8.count
        case .string(let string): Self.jsonStringByteCount(string)
        case .array(let elements): 2 + elements.reduce(0) { $0 + $1.canonicalByteCount } + max(elements.count - 1, 0)
        case .map(let entries):
            2 + entries.reduce(0) { $0 + Self.jsonStringByteCount($1.key) + 1 + $1.value.canonicalByteCount }
                + max(entries.count - 1, 0)
        }
    }

    private static func decimalDigits(_ int: Int64) -> Int {
        var magnitude = int.magnitude
        var digits = int < 0 ? 2 : 1
        while magnitude >= 10 {
            magnitude /= 10
            digits += 1
        }
        return digits
    }

    private static func jsonStringByteCount(_ string: String) -> Int {
        var count = 2
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), 0x0A, 0x0D, 0x09, 0x08, 0x0C: count += 2
            case 0..<0x20: count += 6
            default: count += 1
            }
        }
        return count
    }

    /// The order of keys (and of set elements by their encoding) in the canonical form: Unicode
    /// code points of the NFC forms, as Swift compares strings. For NFC text this is the order of
    /// the UTF-8 bytes; canonically equivalent strings are one key, as in a Swift `Dictionary`.
    @inlinable
    public static func canonicalOrder(_ left: String, _ right: String) -> Bool {
        left < right
    }

    /// Appends `string` as a JSON string, escaped as canonical JSON requires.
    public static func writeJSONString(_ string: String, to bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        // Most strings need no escape: copy them whole.
        if !string.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            bytes.append(contentsOf: string.utf8)
            bytes.append(UInt8(ascii: "\""))
            return
        }
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0x08: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
            case 0x0C: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"),
                                          hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// Parses one JSON value.
    ///
    /// - Parameter maximumDepth: the deepest nesting accepted: `ValueLimits.maximumDepth` for a
    ///   document, `ValueLimits.maximumEncodedDepth` for the compact forms that wrap documents'
    ///   values (their values are checked at their own depth when the forms are read).
    /// - Throws: `ValueError` for malformed JSON, invalid UTF-8, lone surrogates, numbers that
    ///   do not fit a double, and nesting deeper than `maximumDepth`.
    public init<Bytes: Collection<UInt8>>(json bytes: Bytes, maximumDepth: Int = ValueLimits.maximumDepth) throws(ValueError) {
        let array = Array(bytes)
        var parser = JSONParser(bytes: array, maximumDepth: maximumDepth)
        self = try parser.parseDocument()
    }

    /// Parses one JSON value from a string.
    public init(json string: String) throws(ValueError) {
        try self.init(json: Array(string.utf8))
    }
}

/// A recursive-descent JSON parser over bytes; strict (RFC 8259), no extensions.
struct JSONParser {
    let bytes: [UInt8]
    let maximumDepth: Int
    var index = 0
    /// The keys from the top to the value being parsed: the dotted path is built only for an
    /// error, not for every key.
    private var keys: [String] = []

    private var path: String { keys.joined(separator: ".") }

    init(bytes: [UInt8], maximumDepth: Int) {
        self.bytes = bytes
        self.maximumDepth = maximumDepth
    }

    mutating func parseDocument() throws(ValueError) -> Value {
        skipWhitespace()
        let value = try parseValue(depth: 0)
        skipWhitespace()
        guard index == bytes.count else { throw malformed("trailing characters") }
        return value
    }

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

    private mutating func expect(_ literal: String, _ value: Value) throws(ValueError) -> Value {
        let expected = Array(literal.utf8)
        guard bytes.count - index >= expected.count, Array(bytes[index..<index + expected.count]) == expected else {
            throw malformed("unexpected character")
        }
        index += expected.count
        return value
    }

    private mutating func parseValue(depth: Int) throws(ValueError) -> Value {
        guard index < bytes.count else { throw malformed("unexpected end") }
        switch bytes[index] {
        case UInt8(ascii: "n"): return try expect("null", .null)
        case UInt8(ascii: "t"): return try expect("true", .bool(true))
        case UInt8(ascii: "f"): return try expect("false", .bool(false))
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "["):
            guard depth < maximumDepth else {
                throw ValueError(.tooDeep, field: path, detail: "deeper than \(maximumDepth) levels")
            }
            index += 1
            var elements: [Value] = []
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
            while true {
                skipWhitespace()
                elements.append(try parseValue(depth: depth + 1))
                skipWhitespace()
                guard index < bytes.count else { throw malformed("unexpected end") }
                if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
                throw malformed("expected , or ]")
            }
        case UInt8(ascii: "{"):
            guard depth < maximumDepth else {
                throw ValueError(.tooDeep, field: path, detail: "deeper than \(maximumDepth) levels")
            }
            index += 1
            var entries: [String: Value] = [:]
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") { index += 1; return .map(entries) }
            while true {
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw malformed("expected a key") }
                let key = try parseString()
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw malformed("expected :") }
                index += 1
                skipWhitespace()
                keys.append(key)
                guard entries.updateValue(try parseValue(depth: depth + 1), forKey: key) == nil else {
                    throw ValueError(.malformedJSON, field: path, detail: "duplicate key")
                }
                keys.removeLast()
                skipWhitespace()
                guard index < bytes.count else { throw malformed("unexpected end") }
                if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                if bytes[index] == UInt8(ascii: "}") { index += 1; return .map(entries) }
                throw malformed("expected , or }")
            }
        default:
            return try parseNumber()
        }
    }

    private mutating func parseNumber() throws(ValueError) -> Value {
        let start = index
        var isInteger = true
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        let digitsStart = index
        while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
        guard index > digitsStart else { throw malformed("unexpected character") }
        if bytes[digitsStart] == UInt8(ascii: "0"), index - digitsStart > 1 { throw malformed("leading zero") }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            let fractionStart = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            guard index > fractionStart else { throw malformed("digit expected") }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            let exponentStart = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            guard index > exponentStart else { throw malformed("digit expected") }
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        if isInteger, let int = Int64(text) { return .int(int) }
        guard let double = Double(text), double.isFinite else {
            throw ValueError(.notRepresentable, field: path, detail: "number \(text) does not fit a double")
        }
        return .double(double)
    }

    private mutating func parseHex4() throws(ValueError) -> UInt32 {
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

    private mutating func parseString() throws(ValueError) -> String {
        index += 1  // opening quote
        var utf8: [UInt8] = []
        while true {
            guard index < bytes.count else { throw malformed("unterminated string") }
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                // Validating decode: invalid UTF-8 is refused, never repaired.
                guard let string = String(validating: utf8, as: UTF8.self) else {
                    throw ValueError(.invalidUTF8, field: path, detail: "a string is not valid UTF-8")
                }
                return string
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
                case UInt8(ascii: "u"):
                    var scalar = try parseHex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                            throw ValueError(.invalidUTF8, field: path, detail: "lone surrogate in a string")
                        }
                        index += 2
                        let low = try parseHex4()
                        guard (0xDC00...0xDFFF).contains(low) else {
                            throw ValueError(.invalidUTF8, field: path, detail: "lone surrogate in a string")
                        }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw ValueError(.invalidUTF8, field: path, detail: "lone surrogate in a string")
                    }
                    utf8.append(contentsOf: String(Character(Unicode.Scalar(scalar)!)).utf8)
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
}
