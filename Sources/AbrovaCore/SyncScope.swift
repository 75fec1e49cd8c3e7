/// What a device keeps of the documents its user may read (Spec/protocol.md, a pull's `scope`):
/// parts, each the documents of one collection, all of them or those whose fields equal given
/// values. A document is covered when any part covers it; rules still apply on top.
///
///     let scope = try SyncScope(parts: [
///         SyncScope.Part(collection: "carts", equalities: [SyncScope.Equality(path: FieldPath("owner"), value: "u1")]),
///         SyncScope.Part(collection: "lists"),
///     ])
public struct SyncScope: Hashable, Sendable {
    /// At most this many parts.
    public static let maximumParts = 100
    /// At most this many equalities in one part.
    public static let maximumEqualities = 10
    /// The canonical JSON of a scope holds at most this many bytes (it travels in a URL).
    public static let maximumEncodedBytes = 4096

    /// A field's value must equal `value`: a field holding an integer and one holding a double
    /// are equal when their numbers are; otherwise the value and its kind must be the same.
    public struct Equality: Hashable, Sendable {
        /// The field.
        public let path: FieldPath
        /// A string, a number, a boolean or `null`.
        public let value: Value

        /// An equality of the field at `path` with `value`.
        public init(path: FieldPath, value: Value) {
            self.path = path
            self.value = value
        }

        /// Whether `field` (the field's value, `nil` when the document has none there) equals the value.
        public func holds(for field: Value?) -> Bool {
            switch (field, value) {
            case (.int(let field)?, .double(let value)): Double(field) == value
            case (.double(let field)?, .int(let value)): field == Double(value)
            case (let field?, let value): field == value
            case (nil, _): false
            }
        }
    }

    /// The documents of one collection: all of them, or those where every equality holds.
    public struct Part: Hashable, Sendable {
        /// The collection.
        public let collection: String
        /// What the document's fields must equal, by path; none: the whole collection.
        public let equalities: [Equality]

        /// A part of `collection`; the equalities are kept sorted by path.
        public init(collection: String, equalities: [Equality] = []) {
            self.collection = collection
            self.equalities = equalities.sorted { $0.path < $1.path }
        }

        /// Whether the part is its collection whole.
        public var isWholeCollection: Bool { equalities.isEmpty }

        /// Whether the part covers a document of its collection that exists or not, whose field
        /// at a path `field` gives (only a whole collection covers a deleted document).
        public func covers(exists: Bool, field: (FieldPath) -> Value?) -> Bool {
            if equalities.isEmpty { return true }
            guard exists else { return false }
            return equalities.allSatisfy { $0.holds(for: field($0.path)) }
        }

        /// `covers(exists:field:)` for a document as apps see it (`nil`: it does not exist).
        public func covers(document: Value?) -> Bool {
            covers(exists: document != nil) { document?[$0] }
        }

        /// `covers(exists:field:)` for a document's state.
        public func covers(_ state: DocumentState) -> Bool {
            covers(exists: state.exists) { state.liveValue(within: $0) }
        }

        /// The part as the wire and the store write it: a whole collection as its name,
        /// otherwise `{"collection", "where": {path: value}}`.
        public var json: Value {
            if equalities.isEmpty { return .string(collection) }
            let filters = Dictionary(uniqueKeysWithValues: equalities.map { ($0.path.dotted, $0.value) })
            return .map(["collection": .string(collection), "where": .map(filters)])
        }
    }

    /// The parts, distinct, in canonical order.
    public let parts: [Part]

    /// A scope of `parts` (repeated ones count once).
    ///
    /// - Throws: `Refusal` `.invalid` for no or more than `maximumParts` parts, a name that is no
    ///   collection's, a part of more than `maximumEqualities` equalities or of one field twice,
    ///   a value that is not a string, a number, a boolean or `null`, or a scope whose canonical
    ///   JSON holds more than `maximumEncodedBytes`.
    public init(parts: [Part]) throws(Refusal) {
        guard !parts.isEmpty, parts.count <= Self.maximumParts else {
            throw Refusal.invalid("a sync scope has 1 to \(Self.maximumParts) parts, not \(parts.count)")
        }
        for part in parts { try Self.check(part) }
        var seen = Set<Part>()
        self.parts = parts.filter { seen.insert($0).inserted }.sorted { $0.json.canonicalJSON < $1.json.canonicalJSON }
        let size = canonicalJSON.utf8.count
        guard size <= Self.maximumEncodedBytes else {
            throw Refusal.invalid("a sync scope's JSON holds \(size) bytes; the limit is \(Self.maximumEncodedBytes)")
        }
    }

    /// The scope of whole collections.
    ///
    /// - Throws: `Refusal` as `init(parts:)`.
    public init(collections: [String]) throws(Refusal) {
        try self.init(parts: collections.map { Part(collection: $0) })
    }

    /// Reads a scope as `json` writes it: a list of parts, each a collection's name or
    /// `{"collection": name, "where": {field: value, ...}}` (a field as a dotted path).
    ///
    /// - Throws: `Refusal` `.invalid` naming what is wrong, and as `init(parts:)`.
    public init(json: Value) throws(Refusal) {
        guard case .array(let items) = json else { throw Refusal.invalid("a sync scope is a JSON list of parts") }
        var parts: [Part] = []
        for (index, item) in items.enumerated() {
            switch item {
            case .string(let collection):
                parts.append(Part(collection: collection))
            case .map(let entries):
                if let unknown = entries.keys.sorted().first(where: { $0 != "collection" && $0 != "where" }) {
                    throw Refusal.invalid("scope[\(index)] has an unknown key \"\(unknown.prefix(60))\"; allowed: collection, where")
                }
                guard case .string(let collection)? = entries["collection"] else {
                    throw Refusal.invalid("scope[\(index)].collection must be a string")
                }
                guard case .map(let filters)? = entries["where"], !filters.isEmpty else {
                    throw Refusal.invalid("scope[\(index)].where must be a non-empty JSON object of field paths and values")
                }
                var equalities: [Equality] = []
                for (dotted, value) in filters.sorted(by: { $0.key < $1.key }) {
                    do {
                        equalities.append(Equality(path: try FieldPath(dotted), value: value))
                    } catch {
                        throw Refusal(error, context: "scope[\(index)].where")
                    }
                }
                parts.append(Part(collection: collection, equalities: equalities))
            default:
                throw Refusal.invalid("scope[\(index)] must be a collection's name or an object with collection and where")
            }
        }
        try self.init(parts: parts)
    }

    /// Reads a scope from its JSON text (a pull's `scope` parameter).
    ///
    /// - Throws: `Refusal` `.invalid` for text that is not JSON, and as `init(json:)`.
    public init(jsonText text: String) throws(Refusal) {
        guard text.utf8.count <= Self.maximumEncodedBytes * 2 else {
            throw Refusal.invalid("a sync scope's JSON holds more than \(Self.maximumEncodedBytes) bytes")
        }
        let json: Value
        do {
            json = try Value(json: Array(text.utf8), maximumDepth: 4)
        } catch {
            throw Refusal(error, context: "scope is not valid JSON")
        }
        try self.init(json: json)
    }

    /// The scope as a JSON list (`init(json:)`).
    public var json: Value { .array(parts.map(\.json)) }

    /// `json` as canonical text.
    public var canonicalJSON: String { json.canonicalJSON }

    /// The collections the parts name, sorted.
    public var collections: [String] { Array(Set(parts.map(\.collection))).sorted() }

    /// Whether some part has equalities (otherwise the scope is its collections whole).
    public var hasEqualities: Bool { parts.contains { !$0.isWholeCollection } }

    /// Whether a part covers `collection` whole.
    public func coversWhole(_ collection: String) -> Bool {
        parts.contains { $0.collection == collection && $0.isWholeCollection }
    }

    /// Whether no part names `collection`: none of its documents is covered.
    public func excludes(_ collection: String) -> Bool {
        !parts.contains { $0.collection == collection }
    }

    /// Whether the scope covers a document of `collection` given as apps see it (`nil`: it does
    /// not exist).
    public func covers(_ collection: String, document: Value?) -> Bool {
        parts.contains { $0.collection == collection && $0.covers(document: document) }
    }

    /// Whether the scope covers a document of `collection` in `state`.
    public func covers(_ collection: String, state: DocumentState) -> Bool {
        parts.contains { $0.collection == collection && $0.covers(state) }
    }

    /// Whether the scope covers a document of `collection` in the state a page brought.
    public func covers(_ collection: String, pulled: PulledState) -> Bool {
        parts.contains { $0.collection == collection && $0.covers(exists: pulled.exists, field: pulled.liveValue(at:)) }
    }

    /// The parts of `self` that `other` (`nil`: everything) does not already cover: those it
    /// does not have, unless it has their collection whole.
    public func parts(beyond other: SyncScope?) -> [Part] {
        guard let other else { return [] }
        return parts.filter { !other.parts.contains($0) && !other.coversWhole($0.collection) }
    }

    private static func check(_ part: Part) throws(Refusal) {
        do {
            try DocumentKey(collection: part.collection, id: "x").validate()
        } catch {
            throw Refusal(error, context: "a sync scope's collection")
        }
        guard part.equalities.count <= maximumEqualities else {
            throw Refusal.invalid(
                "a sync scope's part of \(part.collection) has \(part.equalities.count) equalities; the limit is \(maximumEqualities)")
        }
        for (index, equality) in part.equalities.enumerated() {
            guard !equality.path.isRoot else { throw Refusal.invalid("a sync scope's equality names a field, not \"\"") }
            if index > 0, part.equalities[index - 1].path == equality.path {
                throw Refusal.invalid("a sync scope's part of \(part.collection) names the field \(equality.path) twice")
            }
            switch equality.value {
            case .string, .int, .bool, .null: break
            case .double(let number) where number.isFinite: break
            default:
                throw Refusal.invalid(
                    "a sync scope's equality on \(equality.path) compares with a string, a number, a boolean or null")
            }
        }
    }
}
