import AbrovaCore
import AbrovaSQLite

/// A query's filters as SQL conditions on a row's `view` (the document's canonical JSON), with
/// their bindings numbered after the ones a statement already has. Integers and doubles compare
/// as numbers; otherwise a value matches only a field of its own kind.
struct QueryConditions {
    private(set) var sql = ""
    private(set) var bindings: [SQLiteValue]

    /// Conditions for `filters`, their parameters numbered after `earlier`'s.
    init(_ filters: [DocumentQuery.Filter], after earlier: [SQLiteValue]) throws(StoreError) {
        bindings = earlier
        for filter in filters {
            try filter.checkRunnable()
            sql += " AND " + condition(filter, path: try Self.jsonPath(filter.path))
        }
    }

    /// The parameter `value` is bound to (`?N`).
    private mutating func bind(_ value: SQLiteValue) -> String {
        bindings.append(value)
        return "?\(bindings.count)"
    }

    /// The condition of one filter on the field at the JSON path `path`.
    private mutating func condition(_ filter: DocumentQuery.Filter, path: String) -> String {
        let type = "json_type(view, '\(path)')"
        let field = "json_extract(view, '\(path)')"
        switch filter.relation {
        case .equal:
            return equality(kind: Self.kind(of: type), field: field, filter.value)
        case .notEqual:
            return "\(type) IS NOT NULL AND \(type) <> 'null' AND NOT (\(equality(kind: Self.kind(of: type), field: field, filter.value)))"
        case .less, .lessOrEqual, .greater, .greaterOrEqual:
            return range(filter, type: type, field: field, path: path)
        case .isIn:
            guard case .array(let values) = filter.value else { return "0" } // refused by checkRunnable
            let kind = Self.kind(of: type)
            return "(" + values.map { equality(kind: kind, field: field, $0) }.joined(separator: " OR ") + ")"
        case .arrayContains:
            let element = equality(kind: Self.kind(of: "element.type"), field: "element.value", filter.value)
            return "\(type) = 'array' AND EXISTS (SELECT 1 FROM json_each(view, '\(path)') AS element WHERE \(element))"
        }
    }

    /// The field equals `value`: the same kind, and the same JSON.
    private mutating func equality(kind: String, field: String, _ value: Value) -> String {
        "\(kind) = \(bind(.text(Self.kindName(value)))) AND \(field) IS json_extract(\(bind(.text(value.canonicalJSON))), '$')"
    }

    private mutating func range(_ filter: DocumentQuery.Filter, type: String, field: String, path: String) -> String {
        let comparison =
            switch filter.relation {
            case .less: "<"
            case .lessOrEqual: "<="
            case .greater: ">"
            default: ">="
            }
        switch filter.value {
        case .int(let int):
            return "\(type) IN ('integer', 'real') AND \(field) \(comparison) \(bind(.integer(int)))"
        case .double(let double):
            return "\(type) IN ('integer', 'real') AND \(field) \(comparison) \(bind(.real(double)))"
        case .string(let string):
            return "\(type) = 'text' AND \(field) \(comparison) \(bind(.text(string)))"
        case .bool(let bool):
            return "\(type) IN ('true', 'false') AND \(field) \(comparison) \(bind(.integer(bool ? 1 : 0)))"
        case .null:
            // Only null is of null's kind, and it equals itself.
            return "\(type) = 'null'" + (comparison.hasSuffix("=") ? "" : " AND 0")
        case .timestamp(let timestamp) where timestamp.isStorable:
            // The RFC 3339 text has a fixed width, so text order is time order.
            var text: [UInt8] = []
            timestamp.writeRFC3339(to: &text)
            let instantPath = "'\(path).\"\(Value.timestampKey)\"'"
            return "json_type(view, \(instantPath)) = 'text' AND json_extract(view, \(instantPath)) \(comparison) "
                + bind(.text(String(decoding: text, as: UTF8.self)))
        case .timestamp:
            return "0" // no stored timestamp lies outside the storable years
        case .array, .map, .bytes:
            return "0" // refused by checkRunnable
        }
    }

    /// A JSON type (`json_type`'s or `json_each`'s) as a kind: both number types are "number".
    private static func kind(of type: String) -> String {
        "(CASE \(type) WHEN 'integer' THEN 'number' WHEN 'real' THEN 'number' ELSE \(type) END)"
    }

    private static func kindName(_ value: Value) -> String {
        switch value {
        case .null: "null"
        case .bool(let bool): bool ? "true" : "false"
        case .int, .double: "number"
        case .string: "text"
        case .array: "array"
        case .map, .timestamp, .bytes: "object"
        }
    }

    /// The JSON path of a field as an SQL literal (`'$."a"."b"'`): written into the statement, not
    /// bound, so that an index on `json_extract(view, '$."a"')` serves the query. Safe to write in:
    /// field names hold no `'` (`FieldPath.checkName`) and, here, no `"`.
    static func jsonPathLiteral(_ path: FieldPath) throws(StoreError) -> String {
        "'" + (try jsonPath(path)) + "'"
    }

    /// The value of a field, as an SQL expression over `view` (what an index on it is made of).
    static func field(_ path: FieldPath) throws(StoreError) -> String {
        "json_extract(view, \(try jsonPathLiteral(path)))"
    }

    /// The JSON path SQLite reads a field at (`$."a"."b"`).
    static func jsonPath(_ path: FieldPath) throws(StoreError) -> String {
        var result = "$"
        for segment in path.segments {
            guard !segment.contains("\"") else {
                throw StoreError(.invalidQuery, "a query path cannot hold a quotation mark", field: path.dotted)
            }
            result += ".\"\(segment)\""
        }
        return result
    }
}
