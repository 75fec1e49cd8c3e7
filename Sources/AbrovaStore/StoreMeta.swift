import AbrovaCore
import AbrovaSQLite

extension LocalStore {
    func meta(_ key: String) throws -> String? {
        try database.queryFirst("SELECT value FROM meta WHERE key = ?", [.text(key)]) { $0.text(0) } ?? nil
    }

    func setMeta(_ key: String, _ value: String, in database: Database) throws {
        try Self.setMeta(key, value, in: database)
    }

    /// `setMeta` where there is no store yet (while it opens).
    static func setMeta(_ key: String, _ value: String, in database: Database) throws {
        try database.run(
            "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [.text(key), .text(value)])
    }
}

extension LocalStore {
    /// The user whose store this is: `.some(nil)` for the anonymous caller, `nil` while no user
    /// has been named (the SDK names one when it opens the store for a configured user, or when
    /// the server first says whose token it syncs with). One store never holds two users' data.
    ///
    /// - Throws: `StoreError`.
    package func owner() throws(StoreError) -> String?? {
        try translatingErrors { try Self.readOwner(database) }
    }

    /// Names the store's user (see `owner()`); done once, when no user is named yet.
    ///
    /// - Throws: `StoreError`.
    package func adoptOwner(_ user: String?) throws(StoreError) {
        try translatingErrors {
            try database.write { database in try Self.writeOwner(user, in: database) }
        }
    }

    static func readOwner(_ database: Database) throws -> String?? {
        guard let stored = try database.queryFirst("SELECT value FROM meta WHERE key = 'owner'", [], { $0.text(0) }) ?? nil else {
            return nil
        }
        guard let value = try? Value(json: Array(stored.utf8)) else { throw StoreError(.corrupt, "the store's owner cannot be read") }
        if value == .null { return .some(nil) }
        guard let user = value.stringValue else { throw StoreError(.corrupt, "the store's owner is not a user id") }
        return .some(user)
    }

    static func writeOwner(_ user: String?, in database: Database) throws {
        try setMeta("owner", (user.map(Value.string) ?? .null).canonicalJSON, in: database)
    }
}
