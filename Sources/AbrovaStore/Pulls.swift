import AbrovaCore
import AbrovaSQLite

extension LocalStore {
    /// Applies a pulled page of documents and the new cursor in one transaction. A document with
    /// unsent changes keeps them overlaid: the page replaces only its confirmed part. Without a
    /// cursor (documents read online), the cursor stays where it is: states join, so a later page
    /// holding the same documents changes nothing.
    package func applyPulledPage(_ documents: [(key: DocumentKey, state: DocumentState)], cursor: String?) throws(StoreError) {
        try applyPulledPage(pulled: documents.map { (key: $0.key, state: PulledState($0.state)) }, cursor: cursor)
    }

    /// `applyPulledPage(_:cursor:)` for states as a page brought them: a document the device does
    /// not hold yet is stored from the forms the page's reader wrote, its state never built.
    /// Documents in `left` (those a page said left the scope) leave the device, but those with
    /// unsent changes, which go once these are sent.
    package func applyPulledPage(
        pulled documents: [(key: DocumentKey, state: PulledState)], cursor: String?, left: [DocumentKey] = []
    ) throws(StoreError) {
        try translatingErrors {
            var updated: [DocumentKey: CachedDocument] = [:]
            // Inserted documents, kept as pulled: needed again only when a page repeats one.
            var inserted: [DocumentKey: PulledState] = [:]
            inserted.reserveCapacity(documents.count)
            var unsentViews: [DocumentKey: String?] = [:]
            var removed: [DocumentKey] = []
            try database.write { database in
                for (key, pulled) in documents {
                    // A document this device has never seen (the bulk of an initial sync) is just
                    // inserted; the insert tells whether it was there after all. It is not kept in
                    // memory: an initial sync would fill the cache, and empty it, again and again.
                    if memory.cache[key] == nil, memory.unsent[key] == nil, updated[key] == nil, inserted[key] == nil {
                        let (versions, view) = pulled.storedForms
                        try database.run(
                            """
                            INSERT INTO documents (collection, id, confirmed, view) VALUES (?, ?, ?, ?)
                            ON CONFLICT (collection, id) DO NOTHING
                            """, [.text(key.collection), .text(key.id), .blob(versions), SQLiteValue(view)])
                        if database.changes == 1 {
                            inserted[key] = pulled
                            continue
                        }
                    }
                    let state = pulled.state
                    let insertedEarlier = inserted.removeValue(forKey: key).map { earlier in
                        let state = earlier.state // built from the fields read, once
                        return CachedDocument(confirmed: state, view: state)
                    }
                    var document = try updated[key] ?? insertedEarlier ?? loaded(key)
                    document.confirmed.merge(state)
                    document.view = document.confirmed
                    if memory.unsent[key] != nil {
                        document.view = try reapplyUnsentChanges(of: key, onto: document.confirmed, in: database)
                        unsentViews[key] = .some(document.view.documentJSON)
                    }
                    try saveConfirmed(document.confirmed, for: key, in: database)
                    updated[key] = document
                }
                if let cursor { try setMeta("cursor", cursor, in: database) }
                // A page asked for before the scope narrowed: what it brought from outside goes.
                if try documents.contains(where: { try isOutsideScope($0.key, pulled: $0.state) }) {
                    try setMeta("scope_leftovers", "1", in: database)
                }
                removed = try removeLeftDocuments(left.filter { updated[$0] == nil && inserted[$0] == nil }, in: database)
                if memory.isResyncing {
                    for (key, _) in documents {
                        try database.run(
                            "DELETE FROM resync_unseen WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
                    }
                }
            }
            // Only now that the page is committed does memory follow it.
            memory.pulled(updated, unsentViews: unsentViews)
            for key in removed { memory.forget(key) }
            notify(changed: Set(inserted.keys).union(updated.keys).union(removed), unsentWritesChanged: false)
        }
    }

    /// The pull cursor saved with the last applied page, or `nil` before the first.
    package func pullCursor() throws(StoreError) -> String? {
        try translatingErrors { try meta("cursor") }
    }

    /// Starts a resync (the server said "resync required", or did not know the cursor): the next
    /// pull starts from the beginning, and when a pull ends (`endOfPull()`), every document it did
    /// not bring leaves the device, so that the device holds exactly the server's documents plus
    /// its own unsent writes. Until then confirmed states and unsent changes stay: pulled states
    /// join them. Kept in the file, so a resync cut short goes on at the next start.
    ///
    /// - Throws: `StoreError`.
    package func beginResync() throws(StoreError) {
        try translatingErrors {
            try database.write { database in
                try database.run("DELETE FROM meta WHERE key = 'cursor'")
                try database.run("DELETE FROM resync_unseen")
                try database.run("INSERT INTO resync_unseen (collection, id) SELECT collection, id FROM documents")
                try setMeta("resync", "1", in: database)
            }
            memory.beganResync()
        }
    }

    /// Before a pull from the beginning (no cursor yet): a store that holds documents already
    /// (pulled by a widening, written and sent, read online) follows the pull as a resync, so that
    /// what the pull does not bring leaves at its end. (A scope's pull from the beginning names in
    /// `left` only what changed since it started: a document this store took before may have
    /// left the scope unnamed.)
    ///
    /// - Throws: `StoreError`.
    package func beginPullFromTheBeginning() throws(StoreError) {
        let holdsDocuments = try translatingErrors {
            guard !memory.isResyncing, try meta("cursor") == nil else { return false }
            return try database.queryFirst("SELECT 1 FROM documents LIMIT 1") { _ in true } ?? false
        }
        if holdsDocuments { try beginResync() }
    }

    /// Ends a pull that reached the server's last page: when it was a resync's, the documents it
    /// did not bring leave the device. One that has unsent changes keeps them, on nothing
    /// confirmed (the server has no such document for this user any more). Returns the
    /// documents that left.
    ///
    /// - Throws: `StoreError`.
    @discardableResult
    package func endOfPull() throws(StoreError) -> Set<DocumentKey> {
        try translatingErrors {
            // What a narrowed scope kept for its unsent changes goes once they are sent.
            let outside = try dropDocumentsOutsideScope()
            guard memory.isResyncing else { return outside }
            let unseen = try database.query("SELECT collection, id FROM resync_unseen") { row in
                DocumentKey(collection: row.text(0) ?? "", id: row.text(1) ?? "")
            }
            var unsentViews: [DocumentKey: String?] = [:]
            try database.write { database in
                for key in unseen {
                    try database.run("DELETE FROM documents WHERE collection = ? AND id = ?", [.text(key.collection), .text(key.id)])
                    if memory.unsent[key] != nil {
                        unsentViews[key] = .some(try reapplyUnsentChanges(of: key, onto: DocumentState(), in: database).documentJSON)
                    }
                }
                try database.run("DELETE FROM resync_unseen")
                try database.run("DELETE FROM meta WHERE key = 'resync'")
            }
            memory.endedResync(left: unseen, unsentViews: unsentViews)
            let removed = Set(unseen)
            if !removed.isEmpty { notify(changed: removed, unsentWritesChanged: false) }
            return removed.union(outside)
        }
    }
}
