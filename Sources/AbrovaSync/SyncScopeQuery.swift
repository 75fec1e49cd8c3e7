import AbrovaCore

extension AbrovaSync {
    /// A part of what a device keeps (partial sync): one collection, all of it or the documents
    /// whose fields equal given values. A device keeps what any of its scope's queries covers,
    /// and only what its user may read.
    ///
    ///     let mine = SyncScopeQuery(collection: "carts").whereField("owner", isEqualTo: userId)
    ///     try await sync.setSyncScope([mine, SyncScopeQuery(collection: "catalog")])
    ///
    /// Integers and doubles compare as numbers; otherwise a field matches only a value of its own
    /// kind. Values are strings, numbers, booleans or `nil` (`null`). A query that cannot be
    /// (a bad name or path, another kind of value, more than 10 filters, one field twice) is
    /// refused where it is used: `build()` or `setSyncScope(_:)` throws.
    public struct SyncScopeQuery: Hashable, Sendable {
        /// The collection.
        public let collection: String
        /// The fields and the values they must equal, in the order given.
        public private(set) var equalities: [(field: String, value: Value)] = []

        /// The whole collection.
        public init(collection: String) {
            self.collection = collection
        }

        /// The documents of the query whose `field` (a dotted path into maps) equals `value`.
        public func whereField(_ field: String, isEqualTo value: Value) -> SyncScopeQuery {
            var next = self
            next.equalities.append((field, value))
            return next
        }

        /// The documents of the query whose `field` equals `value` (a Swift value).
        @_disfavoredOverload
        public func whereField(_ field: String, isEqualTo value: some ValueConvertible) -> SyncScopeQuery {
            whereField(field, isEqualTo: value.documentValue)
        }

        public static func == (left: SyncScopeQuery, right: SyncScopeQuery) -> Bool {
            left.collection == right.collection && left.equalities.map(\.field) == right.equalities.map(\.field)
                && left.equalities.map(\.value) == right.equalities.map(\.value)
        }

        public func hash(into hasher: inout Hasher) {
            hasher.combine(collection)
            for (field, value) in equalities {
                hasher.combine(field)
                hasher.combine(value)
            }
        }

        /// The part of a scope the query stands for.
        func part() throws(Refusal) -> SyncScope.Part {
            var parts: [SyncScope.Equality] = []
            for (field, value) in equalities {
                do {
                    parts.append(SyncScope.Equality(path: try FieldPath(field), value: value))
                } catch {
                    throw Refusal(error, context: "a sync scope's field of \(collection)")
                }
            }
            return SyncScope.Part(collection: collection, equalities: parts)
        }

        /// The scope of `queries`.
        ///
        /// - Throws: `Refusal` `.invalid` naming what is wrong (`SyncScope.init(parts:)`).
        static func scope(of queries: [SyncScopeQuery]) throws(Refusal) -> SyncScope {
            var parts: [SyncScope.Part] = []
            for query in queries { parts.append(try query.part()) }
            return try SyncScope(parts: parts)
        }
    }
}

/// A part of what a device keeps: `AbrovaSync.SyncScopeQuery`.
public typealias SyncScopeQuery = AbrovaSync.SyncScopeQuery
