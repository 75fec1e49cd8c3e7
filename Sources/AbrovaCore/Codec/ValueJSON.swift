// A direct JSON writer and parser (on `JSONReader`) for `Value`. Foundation's coders run at about
// a tenth of the speed of a writer over the enum (see DESIGN), and the hot paths (local writes,
// batches, pulled pages) encode every document, so they use these.

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
        case .timestamp(let timestamp):
            bytes.append(contentsOf: #"{"$timestamp":"#.utf8)
            if timestamp.isStorable {
                bytes.append(UInt8(ascii: "\""))
                timestamp.writeRFC3339(to: &bytes)
                bytes.append(UInt8(ascii: "\""))
            } else {
                // Refused by validation before it is stored or sent; written so that it reads as no timestamp.
                Self.writeDecimal(timestamp.microsecondsSince1970, to: &bytes)
            }
            bytes.append(UInt8(ascii: "}"))
        case .bytes(let data):
            bytes.append(contentsOf: #"{"$bytes":""#.utf8)
            Base64.encode(data, to: &bytes)
            bytes.append(contentsOf: #""}"#.utf8)
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

    /// The reserved key of a timestamp's JSON form, `{"$timestamp": "2026-12-03T21:00:00.123456Z"}`.
    package static let timestampKey = "$timestamp"
    /// The reserved key of bytes' JSON form, `{"$bytes": "<base64>"}`.
    package static let bytesKey = "$bytes"

    /// A timestamp's or bytes' JSON form as a map of strings (what `Codable` writes).
    var taggedMap: [String: String] {
        switch self {
        case .timestamp(let timestamp):
            var text: [UInt8] = []
            timestamp.writeRFC3339(to: &text)
            return [Self.timestampKey: String(decoding: text, as: UTF8.self)]
        case .bytes(let data):
            var text: [UInt8] = []
            Base64.encode(data, to: &text)
            return [Self.bytesKey: String(decoding: text, as: UTF8.self)]
        default:
            return [:]
        }
    }

    /// The timestamp or bytes that the JSON map `{key: value}` stands for: `nil` unless it is
    /// exactly `{"$timestamp": "<RFC 3339, six fraction digits, Z>"}` or `{"$bytes": "<padded base64>"}`.
    package static func tagged(key: String, value: Value) -> Value? {
        guard case .string(let text) = value else { return nil }
        switch key {
        case timestampKey: return Timestamp(rfc3339: text.utf8).map(Value.timestamp)
        case bytesKey: return Base64.decode(text.utf8).map(Value.bytes)
        default: return nil
        }
    }

    /// Appends an integer in decimal, without making a `String` first.
    package static func writeDecimal(_ int: Int64, to bytes: inout [UInt8]) {
        if int < 0 { bytes.append(UInt8(ascii: "-")) }
        var magnitude = int.magnitude
        var digits:
            (
                UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8
            ) =
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
    package var canonicalByteCount: Int {
        switch self {
        case .null: 4
        case .bool(let bool): bool ? 4 : 5
        case .int(let int): Self.decimalDigits(int)
        case .double(let double): double == 0 ? 3 : double.description.utf8.count
        case .string(let string): Self.jsonStringByteCount(string)
        case .timestamp(let timestamp): 14 + (timestamp.isStorable ? 29 : Self.decimalDigits(timestamp.microsecondsSince1970)) + 1
        case .bytes(let data): 13 + Base64.encodedCount(data.count)
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

    /// Whether a byte of a string must be escaped in JSON.
    @inline(__always)
    private static func needsEscape(_ byte: UInt8) -> Bool {
        byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\")
    }

    private static func jsonStringByteCount(_ string: String) -> Int {
        if let plain = string.utf8.withContiguousStorageIfAvailable({ utf8 in utf8.contains(where: needsEscape) ? nil : 2 + utf8.count }),
            let count = plain
        {
            return count
        }
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
    package static func canonicalOrder(_ left: String, _ right: String) -> Bool {
        left < right
    }

    /// Appends `string` as a JSON string, escaped as canonical JSON requires.
    package static func writeJSONString(_ string: String, to bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        // Most strings need no escape: copy them whole. Native strings (small ones included) lend
        // their UTF-8 as a buffer, which is scanned and copied far faster than the view's bytes.
        let isCopied = string.utf8.withContiguousStorageIfAvailable { utf8 in
            guard !utf8.contains(where: needsEscape) else { return false }
            bytes.append(contentsOf: utf8)
            return true
        }
        if isCopied ?? false {
            bytes.append(UInt8(ascii: "\""))
            return
        }
        if isCopied == nil, !string.utf8.contains(where: needsEscape) {
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
                bytes.append(contentsOf: [
                    UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"),
                    hex[Int(byte >> 4)], hex[Int(byte & 0xF)],
                ])
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
        var reader = JSONReader(bytes: Array(bytes), maximumDepth: maximumDepth)
        self = try reader.readValue()
        try reader.finish()
    }

    /// Parses one JSON value from a string.
    public init(json string: String) throws(ValueError) {
        try self.init(json: Array(string.utf8))
    }
}
