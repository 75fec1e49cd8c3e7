import AbrovaCore
import AbrovaSQLite

/// A part of the server's documents the store has not pulled yet since its scope was widened
/// (`LocalStore.setSyncScope(_:)`): all of it, or these parts.
package enum ScopeWidening: Equatable, Sendable {
    case everything
    case parts(SyncScope)

    /// The scope a pull of the widened part names (`nil`: all).
    package var scope: SyncScope? {
        if case .parts(let scope) = self { scope } else { nil }
    }

    /// The widening of these collections whole.
    package static func collections(_ names: [String]) throws(Refusal) -> ScopeWidening {
        .parts(try SyncScope(collections: names))
    }
}

extension LocalStore {
    /// The part of the server's documents the device keeps (`nil`: every one its user may read).
    ///
    /// - Throws: `StoreError`.
    package func syncScope() throws(StoreError) -> SyncScope? {
        try translatingErrors { try cachedScope() }
    }

    /// The scope, from memory once read (`nil`: all).
    private func cachedScope() throws -> SyncScope? {
        if scopeInMemory == nil { scopeInMemory = .some(try Self.scope(in: meta("scope"))) }
        return scopeInMemory ?? nil
    }

    /// Sets the collections the device keeps whole (`nil`: all), as `setSyncScope(_:)`.
    ///
    /// - Throws: `StoreError` `.invalidValue` for no or more than 100 names, or one that is no
    ///   collection's.
    @discardableResult
    package func setSyncScope(_ collections: [String]?) throws(StoreError) -> Bool {
        let scope: SyncScope?
        do {
            scope = try collections.map { names throws(Refusal) in try SyncScope(collections: names) }
        } catch {
            throw StoreError(.invalidValue, error.message)
        }
        return try setSyncScope(scope)
    }

    /// Sets the part of the server's documents the device keeps (`nil`: all). Documents it no
    /// longer covers go at once, but those with unsent changes, which stay until those are sent
    /// (and go at the end of the pull after). Parts it adds are pulled whole by the next pull
    /// (`scopeWidening()`), before it goes on from its cursor. Returns whether the scope changed.
    ///
    /// - Throws: `StoreError`.
    @discardableResult
    package func setSyncScope(_ scope: SyncScope?) throws(StoreError) -> Bool {
        try translatingErrors {
            let old = try cachedScope()
            guard scope != old else { return false }
            // What the cursor has not brought: an earlier widening not pulled yet, and the new one,
            // within the new scope. (Recorded even before the first pull ends: one may be under way
            // with the old scope.)
            let pending = try scopeWidening()
            var widening: ScopeWidening?
            if let scope {
                var added = scope.parts(beyond: old)
                switch pending {
                case .everything?: added = scope.parts
                case .parts(let earlier)?: added += scope.parts.filter { earlier.parts.contains($0) && !added.contains($0) }
                case nil: break
                }
                widening = added.isEmpty ? nil : .parts(try SyncScope(parts: added))
            } else {
                widening = .everything
            }
            try database.write { database in
                if let scope {
                    try setMeta("scope", scope.canonicalJSON, in: database)
                } else {
                    try database.run("DELETE FROM meta WHERE key = 'scope'")
                }
                try saveWidening(widening, in: database)
                try setMeta("scope_leftovers", "1", in: database)
            }
            scopeInMemory = .some(scope)
            try dropDocumentsOutsideScope()
            return true
        }
    }

    /// Whether the scope leaves out `key`'s document in `state`.
    func isOutsideScope(_ key: DocumentKey, state: DocumentState) throws -> Bool {
        guard let scope = try cachedScope() else { return false }
        return !scope.covers(key.collection, state: state)
    }

    /// Whether the scope leaves out `key`'s document in the state a page brought.
    func isOutsideScope(_ key: DocumentKey, pulled: PulledState) throws -> Bool {
        guard let scope = try cachedScope(), !scope.coversWhole(key.collection) else { return false }
        return !scope.covers(key.collection, pulled: pulled)
    }

    /// The scope and the part of it the cursor has not brought, read together (a pull that reads
    /// them apart may take a widening for the old scope).
    ///
    /// - Throws: `StoreError`.
    package func syncScopeAndWidening() throws(StoreError) -> (scope: SyncScope?, widening: ScopeWidening?) {
        (try syncScope(), try scopeWidening())
    }

    /// The part of the scope the cursor has not brought, to be pulled whole from the beginning;
    /// `nil` when there is none.
    ///
    /// - Throws: `StoreError`.
    package func scopeWidening() throws(StoreError) -> ScopeWidening? {
        try translatingErrors {
            guard let added = try meta("scope_added") else { return nil }
            guard added != "*" else { return .everything }
            guard let scope = try Self.scope(in: added) else { return nil }
            return .parts(scope)
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
            case (.parts(let waiting)?, .parts(let done)):
                let left = waiting.parts.filter { !done.parts.contains($0) }
                rest = left.isEmpty ? nil : .parts(try SyncScope(parts: left))
            case (.parts?, .everything), (nil, _), (.everything?, .everything):
                rest = nil
            case (.everything?, .parts):
                rest = .everything
            }
            try database.write { database in try saveWidening(rest, in: database) }
        }
    }

    private func saveWidening(_ widening: ScopeWidening?, in database: Database) throws {
        switch widening {
        case nil: try database.run("DELETE FROM meta WHERE key = 'scope_added'")
        case .everything?: try setMeta("scope_added", "*", in: database)
        case .parts(let scope)?: try setMeta("scope_added", scope.canonicalJSON, in: database)
        }
    }

    /// Removes the documents outside the scope that have no unsent change (those stay until their
    /// changes are sent), when a narrowing, a write or a page may have left some. Returns the
    /// documents removed.
    ///
    /// - Throws: `StoreError`.
    @discardableResult
    package func dropDocumentsOutsideScope() throws(StoreError) -> Set<DocumentKey> {
        try translatingErrors {
            guard try meta("scope_leftovers") != nil else { return [] }
            var outside: [DocumentKey] = []
            let scope = try cachedScope()
            if let scope {
                let collections = scope.collections
                let marks = Array(repeating: "?", count: collections.count).joined(separator: ", ")
                outside = try database.query(
                    "SELECT collection, id FROM documents WHERE collection NOT IN (\(marks))", collections.map(SQLiteValue.text)
                ) { row in DocumentKey(collection: row.text(0) ?? "", id: row.text(1) ?? "") }
                // Collections covered only in part: each document's view decides, as the server's pull does.
                let filtered = collections.filter { !scope.coversWhole($0) }
                for collection in filtered {
                    outside += try database.query(
                        "SELECT id, view FROM documents WHERE collection = ?", [.text(collection)]
                    ) { row -> DocumentKey? in
                        let document = try row.text(1).map { try Value(json: Array($0.utf8)) }
                        return scope.covers(collection, document: document)
                            ? nil : DocumentKey(collection: collection, id: row.text(0) ?? "")
                    }.compactMap { $0 }
                }
            }
            // Unsent changes, and conflicts left to the resolver, keep their documents for now.
            let isKept = { (key: DocumentKey) in self.memory.unsent[key] != nil || self.memory.heldDocuments.contains(key) }
            // A document a page said left, kept then, goes once settled unless a newer state came
            // since (its view then says): what it shows is older than what the server said.
            var stillLeft: [LeftDocument] = []
            for left in try leftDocuments() {
                if isKept(left.key) {
                    stillLeft.append(left)
                } else if try loaded(left.key).confirmed.version <= left.version, !outside.contains(left.key) {
                    outside.append(left.key)
                }
            }
            let leaving = outside.filter { !isKept($0) }
            // A document with unsent changes may have no row yet: one that may be outside keeps
            // the mark, so that it leaves once it has one.
            let mayBeOutside = { (key: DocumentKey) in scope.map { !$0.coversWhole(key.collection) } ?? false }
            let keepsSome =
                leaving.count < outside.count || memory.unsent.keys.contains(where: mayBeOutside)
                || memory.heldDocuments.contains(where: mayBeOutside) || !stillLeft.isEmpty
            try remove(leaving, keepingLeftovers: keepsSome, stillLeft: stillLeft)
            return Set(leaving)
        }
    }

    /// Removes documents a page said left the scope: at once, but those with unsent changes or
    /// conflicts left to the resolver, which go once settled (`meta.scope_left` keeps them with
    /// the version they had then).
    func removeLeftDocuments(_ keys: [DocumentKey], in database: Database) throws -> [DocumentKey] {
        var leaving: [DocumentKey] = []
        var kept: [LeftDocument] = []
        for key in keys {
            if memory.unsent[key] != nil || memory.heldDocuments.contains(key) {
                kept.append(LeftDocument(key: key, version: try loaded(key).confirmed.version))
                continue
            }
            try database.run("DELETE FROM documents WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
            if database.changes == 1 { leaving.append(key) }
        }
        if !kept.isEmpty {
            let earlier = try leftDocuments().filter { old in !kept.contains { $0.key == old.key } }
            try saveLeftDocuments(earlier + kept, in: database)
            try setMeta("scope_leftovers", "1", in: database)
        }
        return leaving
    }

    /// A document a page said left the scope, kept for its unsent changes, and the version of its
    /// confirmed state then.
    struct LeftDocument: Equatable {
        let key: DocumentKey
        let version: Version
    }

    private func leftDocuments() throws -> [LeftDocument] {
        guard let stored = try meta("scope_left"), case .array(let items) = try Value(json: Array(stored.utf8)) else { return [] }
        return items.compactMap { item in
            guard case .array(let parts) = item, parts.count == 3, case .string(let collection) = parts[0],
                case .string(let id) = parts[1], case .int(let version) = parts[2]
            else { return nil }
            return LeftDocument(key: DocumentKey(collection: collection, id: id), version: Version(UInt64(clamping: version)))
        }
    }

    private func saveLeftDocuments(_ documents: [LeftDocument], in database: Database) throws {
        guard !documents.isEmpty else {
            try database.run("DELETE FROM meta WHERE key = 'scope_left'")
            return
        }
        let items = documents.map {
            Value.array([.string($0.key.collection), .string($0.key.id), .int(Int64(clamping: $0.version.rawValue))])
        }
        try setMeta("scope_left", Value.array(items).canonicalJSON, in: database)
    }

    private func remove(_ leaving: [DocumentKey], keepingLeftovers: Bool, stillLeft: [LeftDocument]) throws {
        try database.write { database in
            try saveLeftDocuments(stillLeft, in: database)
            for key in leaving {
                try database.run("DELETE FROM documents WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
            }
            if !keepingLeftovers { try database.run("DELETE FROM meta WHERE key = 'scope_leftovers'") }
        }
        for key in leaving { memory.forget(key) }
        if !leaving.isEmpty { notify(changed: Set(leaving), unsentWritesChanged: false) }
    }

    /// The scope as `meta` stores it: the canonical JSON of `SyncScope` (a list of collection
    /// names is one).
    private static func scope(in stored: String?) throws -> SyncScope? {
        guard let stored else { return nil }
        do {
            return try SyncScope(jsonText: stored)
        } catch {
            throw StoreError(.corrupt, "the stored sync scope cannot be read: \(error.message)")
        }
    }
}
