import AbrovaCore
import AbrovaSQLite

extension LocalStore {
    /// The view of a document with unsent changes: they are applied again on `confirmed`; only the
    /// newest keeps its view, written here (the others' are never shown).
    func reapplyUnsentChanges(of key: DocumentKey, onto confirmed: DocumentState, in database: Database) throws -> DocumentState {
        var view = confirmed
        let changes = try unsentChanges(of: key)
        for change in changes { view.applyLocally(change.delta, at: Self.localVersion) }
        if let newest = changes.last {
            try database.run(
                newest.isInflight
                    ? "UPDATE inflight SET view = ? WHERE position = ?"
                    : "UPDATE pending SET view = ? WHERE sequence = ?",
                [SQLiteValue(view.documentJSON), .integer(newest.sequence)])
        }
        return view
    }

    /// Writes a document's confirmed state and the view it shows.
    func saveConfirmed(_ state: DocumentState, for key: DocumentKey, in database: Database) throws {
        let (versions, view) = state.storedForms
        try database.run(
            """
            INSERT INTO documents (collection, id, confirmed, view) VALUES (?1, ?2, ?3, ?4)
            ON CONFLICT (collection, id) DO UPDATE SET confirmed = ?3, view = ?4
            """, [.text(key.collection), .text(key.id), .blob(versions), SQLiteValue(view)])
    }

    /// The document as the app has it now (its confirmed state with every unsent change), without
    /// caching it.
    func appsView(of key: DocumentKey) throws -> DocumentState {
        if let cached = memory.cache[key] { return cached.view }
        var view = try confirmedState(of: key)
        if memory.unsent[key] != nil {
            for change in try unsentChanges(of: key) { view.applyLocally(change.delta, at: Self.localVersion) }
        }
        return view
    }
}
