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
        try translatingErrors { try cachedScope()?.sorted() }
    }

    /// The scope's collections, from memory once read (`nil`: all).
    private func cachedScope() throws -> Set<String>? {
        if scopeCollections == nil { scopeCollections = .some(try Self.collections(in: meta("scope")).map(Set.init)) }
        return scopeCollections ?? nil
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
            let old = try cachedScope()?.sorted()
            guard scope != old else { return false }
            // What the cursor has not brought: an earlier widening not pulled yet, and the new one,
            // within the new scope. (Recorded even before the first pull ends: one may be under way
            // with the old scope.)
            let pending = try scopeWidening()
            var widening: ScopeWidening?
            switch (old, scope) {
            case (_, nil):
                widening = .everything
            case (let old, let new?):
                var added = Set(new).subtracting(old ?? new)
                switch pending {
                case .everything?: added = Set(new)
                case .collections(let names)?: added.formUnion(Set(names).intersection(new))
                case nil: break
                }
                widening = added.isEmpty ? nil : .collections(added.sorted())
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
        guard let scope = try cachedScope() else { return false }
        return !scope.contains(key.collection)
    }

    /// The scope and the part of it the cursor has not brought, read together (a pull that reads
    /// them apart may take a widening for the old scope).
    ///
    /// - Throws: `StoreError`.
    package func syncScopeAndWidening() throws(StoreError) -> (scope: [String]?, widening: ScopeWidening?) {
        (try syncScope(), try scopeWidening())
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

    /// The widened part `pulled` was pulled whole; what a later widening added meanwhile stays.
    ///
    /// - Throws: `StoreError`.
    package func finishScopeWidening(_ pulled: ScopeWidening) throws(StoreError) {
        try translatingErrors {
            let current = try scopeWidening()
            var rest: ScopeWidening?
            switch (current, pulled) {
            case (.collections(let names)?, .collections(let done)):
                let left = Set(names).subtracting(done)
                rest = left.isEmpty ? nil : .collections(left.sorted())
            case (.collections?, .everything), (nil, _), (.everything?, .everything):
                rest = nil
            case (.everything?, .collections):
                rest = .everything
            }
            try database.write { database in
                switch rest {
                case nil: try database.run("DELETE FROM meta WHERE key = 'scope_added'")
                case .everything?: try setMeta("scope_added", "*", in: database)
                case .collections(let names)?: try setMeta("scope_added", Self.encode(names), in: database)
                }
            }
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
            let scope = try cachedScope()?.sorted()
            var outside: [DocumentKey] = []
            if let scope {
                let marks = Array(repeating: "?", count: scope.count).joined(separator: ", ")
                outside = try database.query(
                    "SELECT collection, id FROM documents WHERE collection NOT IN (\(marks))", scope.map(SQLiteValue.text)
                ) { row in DocumentKey(collection: row.text(0) ?? "", id: row.text(1) ?? "") }
            }
            // Unsent changes, and conflicts left to the resolver, keep their documents for now.
            let isKept = { (key: DocumentKey) in self.memory.unsent[key] != nil || self.memory.heldDocuments.contains(key) }
            let leaving = outside.filter { !isKept($0) }
            let keepsSome =
                scope.map { scope in
                    memory.unsent.keys.contains { !scope.contains($0.collection) }
                        || memory.heldDocuments.contains { !scope.contains($0.collection) }
                } ?? false
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
