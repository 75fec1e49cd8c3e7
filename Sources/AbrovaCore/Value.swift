/// A JSON-like value: what a document field holds.
///
/// Swift literals build values directly:
///
///     let item: Value = ["task": "Buy milk", "qty": 2, "done": false]
///
/// Integers and doubles are distinct (`1` is not `1.0`), as in their canonical encoding. Foundation's
/// `JSONEncoder` writes `1.0` as `1` and its `JSONDecoder` reads `1.0` as an integer, so through
/// them (`Codable`) an integral double becomes an integer; `canonicalJSON` and `Value(json:)`, which
/// the store and the wire use, keep the two apart.
///
/// A timestamp and bytes are written in JSON as maps of one reserved key,
/// `{"$timestamp": "2026-12-03T21:00:00.123456Z"}` and `{"$bytes": "<base64>"}`, and read back from
/// exactly those forms. Field names may not begin with `$`, so no map of the user's reads as one of
/// them: any other map with such a key is refused when it is written (`validate`).
public enum Value: Hashable, Sendable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    /// A point in time, to the microsecond.
    case timestamp(Timestamp)
    /// Raw bytes.
    case bytes([UInt8])
    case array([Value])
    case map([String: Value])
}

extension Value {
    /// The map's entries, or `nil` when the value is not a map.
    public var mapValue: [String: Value]? {
        if case .map(let entries) = self { return entries }
        return nil
    }

    /// The string, or `nil` when the value is not a string.
    public var stringValue: String? {
        if case .string(let string) = self { return string }
        return nil
    }

    /// The integer, or `nil` when the value is not an integer.
    public var intValue: Int64? {
        if case .int(let int) = self { return int }
        return nil
    }

    /// The number, or `nil` when the value is not a number: an integer reads as a `Double` too
    /// (numbers compare as numbers, as in Firestore).
    public var doubleValue: Double? {
        switch self {
        case .double(let double): double
        case .int(let int): Double(int)
        default: nil
        }
    }

    /// The Boolean, or `nil` when the value is not one.
    public var boolValue: Bool? {
        if case .bool(let bool) = self { return bool }
        return nil
    }

    /// The timestamp, or `nil` when the value is not a timestamp.
    public var timestampValue: Timestamp? {
        if case .timestamp(let timestamp) = self { return timestamp }
        return nil
    }

    /// The bytes, or `nil` when the value is not bytes.
    public var bytesValue: [UInt8]? {
        if case .bytes(let bytes) = self { return bytes }
        return nil
    }

    /// The elements, or `nil` when the value is not an array.
    public var arrayValue: [Value]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    /// The value at a dotted path inside nested maps, or `nil` when there is none.
    public subscript(path: FieldPath) -> Value? {
        var current = self
        for segment in path.segments {
            guard case .map(let entries) = current, let next = entries[String(segment)] else { return nil }
            current = next
        }
        return current
    }
}

extension Value: ExpressibleByBooleanLiteral {
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}

extension Value: ExpressibleByIntegerLiteral {
    public init(integerLiteral value: Int64) { self = .int(value) }
}

extension Value: ExpressibleByFloatLiteral {
    public init(floatLiteral value: Double) { self = .double(value) }
}

extension Value: ExpressibleByStringLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
}

extension Value: ExpressibleByArrayLiteral {
    public init(arrayLiteral elements: Value...) { self = .array(elements) }
}

extension Value: ExpressibleByDictionaryLiteral {
    public init(dictionaryLiteral elements: (String, Value)...) {
        self = .map(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

extension Value: CustomStringConvertible {
    /// The canonical JSON encoding.
    public var description: String { canonicalJSON }
}

/// Through `Codable`, a timestamp and bytes are their JSON maps (`{"$timestamp": …}`), which a
/// decoded map of that one key becomes again.
extension Value: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let bool = try? container.decode(Bool.self) {
            self = .bool(bool)
        } else if let int = try? container.decode(Int64.self) {
            self = .int(int)
        } else if let double = try? container.decode(Double.self) {
            self = .double(double)
        } else if let string = try? container.decode(String.self) {
            self = .string(string)
        } else if let array = try? container.decode([Value].self) {
            self = .array(array)
        } else if let map = try? container.decode([String: Value].self) {
            if map.count == 1, let (key, value) = map.first, let tagged = Value.tagged(key: key, value: value) {
                self = tagged
            } else {
                self = .map(map)
            }
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a JSON value")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let bool): try container.encode(bool)
        case .int(let int): try container.encode(int)
        case .double(let double): try container.encode(double)
        case .string(let string): try container.encode(string)
        case .timestamp, .bytes: try container.encode(taggedMap)
        case .array(let array): try container.encode(array)
        case .map(let map): try container.encode(map)
        }
    }
}
