import AbrovaCore
import AbrovaSQLite

/// A part of the server's documents the store has not pulled yet since its scope was widened
/// (`LocalStore.setSyncScope(_:)`): all of it, or these collections.
package enum ScopeWidening: Equatable, Sendable {
    case everything
    case collections([String])

    /// The collections a pull of the widened part names (`nil`: all).
    package var collections: [String]? {
        if case .collections(let names) = self { names } else { nil }
    }
}

extension LocalStore {
    /// The collections the device keeps (`nil`: every one its user may read), sorted.
    ///
    /// - Throws: `StoreError`.
    package func syncScope() throws(StoreError) -> [String]? {
        try translatingErrors { try Self.collections(in: meta("scope")) }
    }

    /// Sets the collections the device keeps (`nil`: all). Documents of collections it leaves go
    /// at once, but those with unsent changes, which stay until those are sent (and go at the
    /// end of the pull after). Collections it adds are pulled whole by the next pull
    /// (`scopeWidening()`), before it goes on from its cursor. Returns whether the scope changed.
    ///
    /// - Throws: `StoreError` `.invalidValue` for a name that is no collection's.
    @discardableResult
    package func setSyncScope(_ collections: [String]?) throws(StoreError) -> Bool {
        let scope = collections.map { Array(Set($0)).sorted() }
        for name in scope ?? [] {
            do {
                try DocumentKey(collection: name, id: "x").validate()
            } catch {
                throw StoreError(error)
            }
        }
        return try translatingErrors {
            let old = try Self.collections(in: meta("scope"))
            guard scope != old else { return false }
            // What the cursor has not brought: an earlier widening not pulled yet, and the new one.
            let pending = try scopeWidening()
            var widening: ScopeWidening?
            if try meta("cursor") != nil {
                switch (old, scope) {
                case (nil, _): widening = pending
                case (_, nil): widening = .everything
                case (let old?, let new?):
                    let added = Set(new).subtracting(old).union(pending?.collections ?? [])
                    widening = pending == .everything ? .everything : added.isEmpty ? nil : .collections(added.sorted())
                }
            }
            try database.write { database in
                if let scope {
                    try setMeta("scope", Self.encode(scope), in: database)
                } else {
                    try database.run("DELETE FROM meta WHERE key = 'scope'")
                }
                switch widening {
                case nil: try database.run("DELETE FROM meta WHERE key = 'scope_added'")
                case .everything?: try setMeta("scope_added", "*", in: database)
                case .collections(let names)?: try setMeta("scope_added", Self.encode(names), in: database)
                }
                try setMeta("scope_leftovers", "1", in: database)
            }
            scopeCollections = .some(scope.map(Set.init))
            try dropDocumentsOutsideScope()
            return true
        }
    }

    /// Whether `key`'s collection lies outside the sync scope.
    func isOutsideScope(_ key: DocumentKey) throws -> Bool {
        if scopeCollections == nil { scopeCollections = .some(try Self.collections(in: meta("scope")).map(Set.init)) }
        guard let scope = scopeCollections ?? nil else { return false }
        return !scope.contains(key.collection)
    }

    /// The part of the scope the cursor has not brought, to be pulled whole from the beginning;
    /// `nil` when there is none.
    ///
    /// - Throws: `StoreError`.
    package func scopeWidening() throws(StoreError) -> ScopeWidening? {
        try translatingErrors {
            guard let added = try meta("scope_added") else { return nil }
            return added == "*" ? .everything : .collections(try Self.collections(in: added) ?? [])
        }
    }

    /// The widened part was pulled whole.
    ///
    /// - Throws: `StoreError`.
    package func finishScopeWidening() throws(StoreError) {
        try translatingErrors {
            try database.write { database in try database.run("DELETE FROM meta WHERE key = 'scope_added'") }
        }
    }

    /// Removes the documents outside the scope that have no unsent change (those stay until their
    /// changes are sent), when a narrowing may have left some. Returns the documents removed.
    ///
    /// - Throws: `StoreError`.
    @discardableResult
    package func dropDocumentsOutsideScope() throws(StoreError) -> Set<DocumentKey> {
        try translatingErrors {
            guard try meta("scope_leftovers") != nil else { return [] }
            let scope = try Self.collections(in: meta("scope"))
            var outside: [DocumentKey] = []
            if let scope {
                let marks = Array(repeating: "?", count: scope.count).joined(separator: ", ")
                outside = try database.query(
                    "SELECT collection, id FROM documents WHERE collection NOT IN (\(marks))", scope.map(SQLiteValue.text)
                ) { row in DocumentKey(collection: row.text(0) ?? "", id: row.text(1) ?? "") }
            }
            let leaving = outside.filter { memory.unsent[$0] == nil }
            // Unsent changes outside the scope (of documents confirmed or not yet) leave later.
            let keepsSome = scope.map { scope in memory.unsent.keys.contains { !scope.contains($0.collection) } } ?? false
            try database.write { database in
                for key in leaving {
                    try database.run("DELETE FROM documents WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
                }
                if !keepsSome { try database.run("DELETE FROM meta WHERE key = 'scope_leftovers'") }
            }
            for key in leaving { memory.forget(key) }
            let removed = Set(leaving)
            if !removed.isEmpty { notify(changed: removed, unsentWritesChanged: false) }
            return removed
        }
    }

    private static func encode(_ collections: [String]) -> String {
        Value.array(collections.map(Value.string)).canonicalJSON
    }

    private static func collections(in stored: String?) throws -> [String]? {
        guard let stored else { return nil }
        guard case .array(let items) = try Value(json: Array(stored.utf8)) else {
            throw StoreError(.corrupt, "the stored sync scope is not a list")
        }
        return items.compactMap(\.stringValue)
    }
}
