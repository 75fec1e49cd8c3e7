import AbrovaCore
import AbrovaSQLite
import AbrovaTestSupport
import Foundation
import Testing

@testable import AbrovaStore

/// Every filter relation, run in SQLite over documents confirmed and written on the device, finds
/// exactly the documents a plain model of Spec/storage.md's rules finds: numbers compare as numbers,
/// any other value only with a field of its kind, `notEqual` needs a field that is there and not
/// null, timestamps compare as times, a range over an array, a map or bytes is refused.
@Suite struct QueryPropertyTests {
    /// A field's value, or `nil` for a document without it. Strings are ASCII (SQLite compares
    /// UTF-8 bytes; the model compares the same).
    static func value(_ choices: inout Choices, allowMissing: Bool) -> Value? {
        switch choices.below(allowMissing ? 11 : 10) {
        case 0: return .null
        case 1: return .bool(choices.chance(oneIn: 2))
        case 2, 3: return .int(Int64(choices.int(in: -3...3)))
        case 4: return .double(Double(choices.int(in: -7...7)) / 2)
        case 5, 6: return .string(choices.element(of: ["", "a", "ab", "b", "B"]))
        case 7:
            return choices.chance(oneIn: 2)
                ? .array((0..<choices.below(4)).map { _ in choices.chance(oneIn: 2) ? .int(Int64(choices.int(in: 0...2))) : "a" })
                : .map(["x": .int(Int64(choices.int(in: 0...1)))])
        case 8:
            // Either side of the epoch and of a year 0000 / 9999 boundary, as text and time agree.
            return .timestamp(
                Timestamp(
                    microsecondsSince1970: choices.element(of: [-62_167_219_200_000_000, -1, 0, 1, 1_000_000, 253_402_300_799_999_999])))
        case 9: return .bytes(choices.element(of: [[], [0], [0xFF], [1, 2], [0xFB, 0xFF]]))
        default: return nil
        }
    }

    static func number(_ value: Value) -> Double? {
        switch value {
        case .int(let int): Double(int)
        case .double(let double): double
        default: nil
        }
    }

    /// The model's equality: numbers as numbers, everything else by kind and canonical form.
    static func equal(_ field: Value, _ value: Value) -> Bool {
        if let left = number(field), let right = number(value) { return left == right }
        return field.canonicalJSON == value.canonicalJSON
    }

    /// Whether a document whose field is `field` matches; `nil` when the query must be refused.
    static func matches(_ field: Value?, _ relation: DocumentQuery.Relation, _ value: Value) -> Bool? {
        switch relation {
        case .equal:
            return field.map { equal($0, value) } ?? false
        case .notEqual:
            guard let field, field != .null else { return false }
            return !equal(field, value)
        case .less, .lessOrEqual, .greater, .greaterOrEqual:
            let order: (Int) -> Bool =
                switch relation {
                case .less: { $0 < 0 }
                case .lessOrEqual: { $0 <= 0 }
                case .greater: { $0 > 0 }
                default: { $0 >= 0 }
                }
            func compared<T: Comparable>(_ left: T, _ right: T) -> Int { left < right ? -1 : left == right ? 0 : 1 }
            switch (field, value) {
            case (_, .array), (_, .map), (_, .bytes): return nil
            case (.timestamp(let left)?, .timestamp(let right)): return order(compared(left, right))
            case (let field?, _) where number(field) != nil && number(value) != nil:
                return order(compared(number(field)!, number(value)!))
            case (.string(let left)?, .string(let right)):
                let (a, b) = (Array(left.utf8), Array(right.utf8))
                return order(a == b ? 0 : a.lexicographicallyPrecedes(b) ? -1 : 1)
            case (.bool(let left)?, .bool(let right)): return order(compared(left ? 1 : 0, right ? 1 : 0))
            case (.null?, .null): return order(0)
            default: return false
            }
        case .isIn:
            guard case .array(let values) = value, !values.isEmpty else { return nil }
            return field.map { field in values.contains { equal(field, $0) } } ?? false
        case .arrayContains:
            guard case .array(let elements)? = field else { return false }
            return elements.contains { equal($0, value) }
        }
    }

    @Test func everyRelationFindsWhatTheModelFinds() async {
        let relations: [DocumentQuery.Relation] = [
            .equal, .notEqual, .less, .lessOrEqual, .greater, .greaterOrEqual, .isIn, .arrayContains,
        ]
        let failure = await Property.checkCatching(
            "query relations as the model", cases: 60,
            generate: { (choices: inout Choices) -> ([Value?], DocumentQuery.Relation, Value) in
                let fields = (0..<12).map { _ in Self.value(&choices, allowMissing: true) }
                let relation = choices.element(of: relations)
                let value: Value =
                    relation == .isIn
                    ? .array((0..<choices.int(in: 1...3)).map { _ in Self.value(&choices, allowMissing: false)! })
                    : Self.value(&choices, allowMissing: false)!
                return (fields, relation, value)
            },
            property: { (input: ([Value?], DocumentQuery.Relation, Value)) in
                let (fields, relation, value) = input
                let folder = TemporaryFolder()
                let store = try LocalStore(path: folder.path("store.sqlite"))
                // Even documents come from the server, odd ones from local writes.
                var page: [(key: DocumentKey, state: DocumentState)] = []
                for (index, field) in fields.enumerated() {
                    let key = DocumentKey(collection: "c", id: "d\(index)")
                    let data: [String: Value] = field.map { ["f": $0, "n": .int(Int64(index))] } ?? ["n": .int(Int64(index))]
                    if index.isMultiple(of: 2) {
                        var state = DocumentState()
                        state.applyLocally(try DocumentDelta.create(data, base: .zero), at: Version(UInt64(index + 1)))
                        page.append((key, state))
                    } else {
                        try await store.setData(data, for: key)
                    }
                }
                try await store.applyPulledPage(page, cursor: "100")
                let query = DocumentQuery(collection: "c").filtered(.init(path: path("f"), relation: relation, value: value))
                let expected = fields.indices.map { Self.matches(fields[$0], relation, value) }
                if expected.contains(nil) {
                    do {
                        _ = try await store.documents(matching: query)
                        return "a range over \(value) was not refused"
                    } catch let error as StoreError {
                        return error.code == .invalidQuery ? nil : "refused as \(error.code)"
                    }
                }
                let found = Set(try await store.documents(matching: query).map(\.key.id))
                let wanted = Set(fields.indices.filter { expected[$0] == true }.map { "d\($0)" })
                guard found == wanted else {
                    return
                        "\(relation) \(value.canonicalJSON) over \(fields.map { $0?.canonicalJSON ?? "-" }): found \(found.sorted()), wanted \(wanted.sorted())"
                }
                return nil
            })
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
    }
}
