import AbrovaCore
import AbrovaStore

extension AbrovaSync {
    /// A query over one collection on the device, shaped as Firestore's: filters chained from the
    /// collection, then an order and a limit.
    ///
    ///     let cheap = try await items.whereField("price", isLessThan: 5).order(by: "price").limit(to: 10).getDocuments()
    ///
    /// Integers and doubles compare as numbers; otherwise a filter matches only a field of its
    /// value's kind (a string never is less than a number). A query that cannot run (an invalid
    /// path, an `in` of no or more than 30 values, a range over an array or a map) fails when it
    /// runs: `getDocuments` throws, and `snapshots()` ends at once.
    public struct Query: Sendable {
        let sync: AbrovaSync
        /// The query as the store runs it.
        public private(set) var query: DocumentQuery
        /// Why the query cannot run (the first problem found), if it cannot.
        private var invalidity: AbrovaSyncError?

        init(sync: AbrovaSync, query: DocumentQuery) {
            self.sync = sync
            self.query = query
        }

        /// The path a field names; the document itself (`""`) is no field.
        private static func path(_ field: String) throws(AbrovaSyncError) -> FieldPath {
            let path: FieldPath
            do {
                path = try FieldPath(field)
            } catch {
                throw AbrovaSyncError(.refused, reason: error.reason, message: error.description)
            }
            guard !path.isRoot else { throw AbrovaSyncError(.refused, reason: .invalid, message: "a query names a field, not \"\"") }
            return path
        }

        /// The filter, refused here when no query can run it (the store checks again when it runs).
        private static func runnable(_ filter: DocumentQuery.Filter) throws(AbrovaSyncError) -> DocumentQuery.Filter {
            do {
                try filter.checkRunnable()
            } catch {
                throw AbrovaSyncError(error)
            }
            return filter
        }

        func filtered(_ field: String, _ relation: DocumentQuery.Relation, _ value: Value) -> Query {
            var next = self
            do throws(AbrovaSyncError) {
                next.query = query.filtered(
                    try Self.runnable(DocumentQuery.Filter(path: try Self.path(field), relation: relation, value: value)))
            } catch {
                next.invalidity = next.invalidity ?? error
            }
            return next
        }

        /// The query ordered by the field.
        func ordered(by field: String, descending: Bool) -> Query {
            var next = self
            do {
                next.query = query.order(by: try Self.path(field), descending: descending)
            } catch {
                next.invalidity = next.invalidity ?? error
            }
            return next
        }

        /// The query limited to `count` documents.
        func limited(to count: Int) -> Query {
            var next = self
            next.query = query.limit(count)
            return next
        }

        /// The documents, as the seed's table says for `source`: by default the server's changes
        /// are pulled first when it can be reached; `.cache` reads the device only.
        ///
        /// - Throws: `AbrovaSyncError`: `.refused` (`invalid`) for a query that cannot run (an
        ///   invalid path, an `in` of no or too many values, a range over a map or an array);
        ///   `.unreachable` for `.server` when the server cannot be reached.
        public func getDocuments(source: Source = .default) async throws(AbrovaSyncError) -> [DocumentSnapshot] {
            if let invalidity { throw invalidity }
            return try await sync.documents(matching: query, source: source)
        }

        /// The documents on the device now and after every change to them (a query that cannot
        /// run ends the stream at once).
        public func snapshots() async -> AsyncStream<[DocumentSnapshot]> {
            guard invalidity == nil else { return AsyncStream { $0.finish() } }
            let query = query
            return await sync.followingStore { await $0.changes(matching: query) }
        }

        /// Calls `listener` on the main actor (as Firestore calls on the main queue) with the
        /// documents now and after every change, until the registration is removed.
        public func addSnapshotListener(_ listener: @escaping @MainActor @Sendable ([DocumentSnapshot]) -> Void) async
            -> ListenerRegistration
        {
            let stream = await snapshots()
            return ListenerRegistration(Task { @MainActor in for await documents in stream { listener(documents) } })
        }
    }
}

extension AbrovaSync {
    /// Where a query chain starts or goes on: a collection (every document, by id) or a query.
    /// Each call gives a new `Query`.
    public protocol Queryable: Sendable {
        /// This, as a query.
        var asQuery: Query { get }
    }
}

extension AbrovaSync.Query: AbrovaSync.Queryable {
    public var asQuery: AbrovaSync.Query { self }
}

extension AbrovaSync.Queryable {
    /// Documents whose field equals `value`.
    public func whereField(_ field: String, isEqualTo value: Value) -> AbrovaSync.Query { asQuery.filtered(field, .equal, value) }
    /// Documents whose field exists, is not `null`, and does not equal `value`.
    public func whereField(_ field: String, isNotEqualTo value: Value) -> AbrovaSync.Query { asQuery.filtered(field, .notEqual, value) }
    /// Documents whose field is below `value`.
    public func whereField(_ field: String, isLessThan value: Value) -> AbrovaSync.Query { asQuery.filtered(field, .less, value) }
    /// Documents whose field is below or equal to `value`.
    public func whereField(_ field: String, isLessThanOrEqualTo value: Value) -> AbrovaSync.Query {
        asQuery.filtered(field, .lessOrEqual, value)
    }
    /// Documents whose field is above `value`.
    public func whereField(_ field: String, isGreaterThan value: Value) -> AbrovaSync.Query { asQuery.filtered(field, .greater, value) }
    /// Documents whose field is above or equal to `value`.
    public func whereField(_ field: String, isGreaterThanOrEqualTo value: Value) -> AbrovaSync.Query {
        asQuery.filtered(field, .greaterOrEqual, value)
    }
    /// Documents whose field equals one of `values` (1 to 30 of them).
    public func whereField(_ field: String, in values: [Value]) -> AbrovaSync.Query { asQuery.filtered(field, .isIn, .array(values)) }
    /// Documents whose field is an array holding `value`.
    public func whereField(_ field: String, arrayContains value: Value) -> AbrovaSync.Query {
        asQuery.filtered(field, .arrayContains, value)
    }

    /// Documents whose field equals `value` (a Swift value).
    @_disfavoredOverload
    public func whereField(_ field: String, isEqualTo value: some ValueConvertible) -> AbrovaSync.Query {
        whereField(field, isEqualTo: value.documentValue)
    }
    /// Documents whose field exists, is not `null`, and does not equal `value` (a Swift value).
    @_disfavoredOverload
    public func whereField(_ field: String, isNotEqualTo value: some ValueConvertible) -> AbrovaSync.Query {
        whereField(field, isNotEqualTo: value.documentValue)
    }
    /// Documents whose field is below `value` (a Swift value).
    @_disfavoredOverload
    public func whereField(_ field: String, isLessThan value: some ValueConvertible) -> AbrovaSync.Query {
        whereField(field, isLessThan: value.documentValue)
    }
    /// Documents whose field is below or equal to `value` (a Swift value).
    @_disfavoredOverload
    public func whereField(_ field: String, isLessThanOrEqualTo value: some ValueConvertible) -> AbrovaSync.Query {
        whereField(field, isLessThanOrEqualTo: value.documentValue)
    }
    /// Documents whose field is above `value` (a Swift value).
    @_disfavoredOverload
    public func whereField(_ field: String, isGreaterThan value: some ValueConvertible) -> AbrovaSync.Query {
        whereField(field, isGreaterThan: value.documentValue)
    }
    /// Documents whose field is above or equal to `value` (a Swift value).
    @_disfavoredOverload
    public func whereField(_ field: String, isGreaterThanOrEqualTo value: some ValueConvertible) -> AbrovaSync.Query {
        whereField(field, isGreaterThanOrEqualTo: value.documentValue)
    }
    /// Documents whose field equals one of `values` (Swift values; 1 to 30 of them).
    @_disfavoredOverload
    public func whereField(_ field: String, in values: [any ValueConvertible]) -> AbrovaSync.Query {
        whereField(field, in: values.map(\.documentValue))
    }
    /// Documents whose field is an array holding `value` (a Swift value).
    @_disfavoredOverload
    public func whereField(_ field: String, arrayContains value: some ValueConvertible) -> AbrovaSync.Query {
        whereField(field, arrayContains: value.documentValue)
    }

    /// Ordered by the field (documents without it first when ascending, last when descending;
    /// then by id).
    public func order(by field: String, descending: Bool = false) -> AbrovaSync.Query {
        asQuery.ordered(by: field, descending: descending)
    }

    /// At most `count` documents.
    public func limit(to count: Int) -> AbrovaSync.Query { asQuery.limited(to: count) }
}

extension AbrovaSync.CollectionReference: AbrovaSync.Queryable {
    /// This collection as a query: every document, by id.
    public var asQuery: AbrovaSync.Query { AbrovaSync.Query(sync: sync, query: query) }

    /// Every document of the collection, as `Query.getDocuments(source:)` reads them.
    public func getDocuments(source: AbrovaSync.Source) async throws(AbrovaSyncError) -> [DocumentSnapshot] {
        try await asQuery.getDocuments(source: source)
    }
}
