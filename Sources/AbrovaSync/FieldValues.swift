import AbrovaCore
import Foundation

extension AbrovaSync {
    /// A Swift value an app writes as a field with `setData` or `add(data:)`: `String`, `Int`
    /// (and its sized kinds), `Double`, `Float`, `Bool`, `Date` (a timestamp), `Data` (bytes),
    /// `Timestamp`, `Value`, and arrays, `[String: …]` dictionaries and optionals (`nil` is `null`)
    /// of them.
    ///
    ///     try await cart.setData(["owner": name, "total": total, "tags": tags])
    public protocol ValueConvertible: FieldValueConvertible {
        /// The value as the document stores it.
        var documentValue: Value { get }
    }

    /// What an app writes as a field with `updateData`: any `ValueConvertible`, or a `FieldValue`
    /// (a removal, a set change).
    public protocol FieldValueConvertible: Sendable {
        /// The change to the field.
        var fieldValue: FieldValue { get }
    }

    /// A change to one field with `updateData`: a value, or one of the sentinels in the manner of
    /// Firestore's `FieldValue`.
    ///
    ///     try await cart.updateData(["qty.milk": 2, "items": .arrayUnion(["eggs"]), "coupon": .delete()])
    public struct FieldValue: Sendable, Equatable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
        ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
    {
        enum Change: Sendable, Equatable {
            case assign(Value)
            case remove
            case setAdd([Value])
            case setRemove([Value])
            case serverTimestamp
            case increment(Value)
        }

        let change: Change

        init(_ change: Change) { self.change = change }

        public init(stringLiteral value: String) { change = .assign(.string(value)) }
        public init(integerLiteral value: Int64) { change = .assign(.int(value)) }
        public init(floatLiteral value: Double) { change = .assign(.double(value)) }
        public init(booleanLiteral value: Bool) { change = .assign(.bool(value)) }
        public init(arrayLiteral elements: Value...) { change = .assign(.array(elements)) }
        public init(dictionaryLiteral elements: (String, Value)...) {
            change = .assign(.map(Dictionary(elements, uniquingKeysWith: { _, last in last })))
        }
    }
}

// The sentinels are declared here, not on `FieldValue` itself, so that they are found both where a
// `FieldValue` is expected and where any `FieldValueConvertible` is (`updateData` with Swift values).
extension AbrovaSync.FieldValueConvertible where Self == AbrovaSync.FieldValue {
    /// Sets the field.
    public static func value(_ value: Value) -> AbrovaSync.FieldValue { AbrovaSync.FieldValue(.assign(value)) }
    /// Removes the field.
    public static func delete() -> AbrovaSync.FieldValue { AbrovaSync.FieldValue(.remove) }
    /// Removes the field (as `delete()`).
    public static var remove: AbrovaSync.FieldValue { AbrovaSync.FieldValue(.remove) }
    /// Adds elements to the set field (an observed-remove set: a concurrent add wins over a remove).
    public static func arrayUnion(_ elements: [Value]) -> AbrovaSync.FieldValue { AbrovaSync.FieldValue(.setAdd(elements)) }
    /// Adds elements, given as Swift values, to the set field.
    @_disfavoredOverload
    public static func arrayUnion(_ elements: [any AbrovaSync.ValueConvertible]) -> AbrovaSync.FieldValue {
        AbrovaSync.FieldValue(.setAdd(elements.map(\.documentValue)))
    }
    /// Removes elements from the set field (only the adds this device has seen).
    public static func arrayRemove(_ elements: [Value]) -> AbrovaSync.FieldValue { AbrovaSync.FieldValue(.setRemove(elements)) }
    /// Removes elements, given as Swift values, from the set field.
    @_disfavoredOverload
    public static func arrayRemove(_ elements: [any AbrovaSync.ValueConvertible]) -> AbrovaSync.FieldValue {
        AbrovaSync.FieldValue(.setRemove(elements.map(\.documentValue)))
    }
    /// The server's time when it applies the write (a timestamp). Until then the device shows its
    /// own clock's time, and the server's comes back with the next sync.
    public static func serverTimestamp() -> AbrovaSync.FieldValue { AbrovaSync.FieldValue(.serverTimestamp) }
    /// Adds `amount` to the number in the field, making it a counter: increments from any number
    /// of devices, online or offline, each count exactly once and never conflict. A field that
    /// holds no number takes `amount`; integers stay integers (clamped to `Int64`'s range).
    ///
    ///     try await cart.updateData(["qty.milk": .increment(1)])
    public static func increment(_ amount: Int) -> AbrovaSync.FieldValue { AbrovaSync.FieldValue(.increment(.int(Int64(amount)))) }
    /// Adds `amount` to the number in the field (see `increment(_:)`); the field becomes a double.
    public static func increment(_ amount: Double) -> AbrovaSync.FieldValue { AbrovaSync.FieldValue(.increment(.double(amount))) }
    /// Adds an integer of any kind (see `increment(_:)`), clamped to `Int64`'s range.
    @_disfavoredOverload
    public static func increment(_ amount: some BinaryInteger) -> AbrovaSync.FieldValue {
        AbrovaSync.FieldValue(.increment(.int(Int64(clamping: amount))))
    }
    /// Adds elements to the set field (as `arrayUnion(_:)`).
    public static func setAdd(_ elements: [Value]) -> AbrovaSync.FieldValue { AbrovaSync.FieldValue(.setAdd(elements)) }
    /// Removes elements from the set field (as `arrayRemove(_:)`).
    public static func setRemove(_ elements: [Value]) -> AbrovaSync.FieldValue { AbrovaSync.FieldValue(.setRemove(elements)) }
}

extension AbrovaSync.ValueConvertible {
    public var fieldValue: AbrovaSync.FieldValue { AbrovaSync.FieldValue(.assign(documentValue)) }
}

extension AbrovaSync.FieldValue: AbrovaSync.FieldValueConvertible {
    public var fieldValue: AbrovaSync.FieldValue { self }
}

extension Value: AbrovaSync.ValueConvertible {
    public var documentValue: Value { self }
}

extension String: AbrovaSync.ValueConvertible {
    public var documentValue: Value { .string(self) }
}

extension Substring: AbrovaSync.ValueConvertible {
    public var documentValue: Value { .string(String(self)) }
}

extension Bool: AbrovaSync.ValueConvertible {
    public var documentValue: Value { .bool(self) }
}

extension Int: AbrovaSync.ValueConvertible {
    public var documentValue: Value { .int(Int64(self)) }
}

extension Int64: AbrovaSync.ValueConvertible {
    public var documentValue: Value { .int(self) }
}

extension Int32: AbrovaSync.ValueConvertible {
    public var documentValue: Value { .int(Int64(self)) }
}

extension Int16: AbrovaSync.ValueConvertible {
    public var documentValue: Value { .int(Int64(self)) }
}

extension Int8: AbrovaSync.ValueConvertible {
    public var documentValue: Value { .int(Int64(self)) }
}

extension Double: AbrovaSync.ValueConvertible {
    public var documentValue: Value { .double(self) }
}

extension Float: AbrovaSync.ValueConvertible {
    public var documentValue: Value { .double(Double(self)) }
}

extension Date: AbrovaSync.ValueConvertible {
    /// A timestamp, to the nearest microsecond.
    public var documentValue: Value { .timestamp(Timestamp(self)) }
}

extension Timestamp: AbrovaSync.ValueConvertible {
    public var documentValue: Value { .timestamp(self) }
}

extension Data: AbrovaSync.ValueConvertible {
    public var documentValue: Value { .bytes([UInt8](self)) }
}

extension Timestamp {
    /// The date's timestamp, to the nearest microsecond.
    public init(_ date: Date) {
        self.init(secondsSince1970: date.timeIntervalSince1970)
    }

    /// The timestamp as a `Date`.
    public var dateValue: Date { Date(timeIntervalSince1970: secondsSince1970) }
}

extension Value {
    /// The timestamp as a `Date`, or `nil` when the value is not a timestamp.
    public var dateValue: Date? { timestampValue?.dateValue }

    /// The bytes as `Data`, or `nil` when the value is not bytes.
    public var dataValue: Data? { bytesValue.map { Data($0) } }
}

extension Array: AbrovaSync.FieldValueConvertible where Element: AbrovaSync.ValueConvertible {}

extension Array: AbrovaSync.ValueConvertible where Element: AbrovaSync.ValueConvertible {
    public var documentValue: Value { .array(map(\.documentValue)) }
}

extension Dictionary: AbrovaSync.FieldValueConvertible where Key == String, Value: AbrovaSync.ValueConvertible {}

extension Dictionary: AbrovaSync.ValueConvertible where Key == String, Value: AbrovaSync.ValueConvertible {
    public var documentValue: AbrovaCore.Value { .map(mapValues(\.documentValue)) }
}

extension Optional: AbrovaSync.FieldValueConvertible where Wrapped: AbrovaSync.ValueConvertible {}

extension Optional: AbrovaSync.ValueConvertible where Wrapped: AbrovaSync.ValueConvertible {
    public var documentValue: Value { map(\.documentValue) ?? .null }
}

/// `AbrovaSync.FieldValue`, by its short name.
public typealias FieldValue = AbrovaSync.FieldValue
/// `AbrovaSync.ValueConvertible`, by its short name.
public typealias ValueConvertible = AbrovaSync.ValueConvertible
/// `AbrovaSync.FieldValueConvertible`, by its short name.
public typealias FieldValueConvertible = AbrovaSync.FieldValueConvertible
