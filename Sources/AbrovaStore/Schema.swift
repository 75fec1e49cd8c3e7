import AbrovaSQLite

/// The store's schema and its migrations. The file records its version in `PRAGMA user_version`;
/// each migration takes a file from one version to the next, in its own transaction (a new file
/// gets them all in one).
enum Schema {
    /// The version this code writes.
    static let currentVersion = 8

    /// Migration `i` takes a file from version `i` to version `i + 1`.
    static let migrations: [String] = [
        // 0 -> 1: the first layout.
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;
        CREATE TABLE documents (
            collection TEXT NOT NULL,
            id TEXT NOT NULL,
            confirmed BLOB,
            view TEXT,
            PRIMARY KEY (collection, id)
        ) WITHOUT ROWID;
        CREATE TABLE pending (
            sequence INTEGER PRIMARY KEY,
            collection TEXT NOT NULL,
            id TEXT NOT NULL,
            delta BLOB NOT NULL,
            writes INTEGER NOT NULL,
            view TEXT
        );
        CREATE TABLE inflight (
            position INTEGER PRIMARY KEY,
            collection TEXT NOT NULL,
            id TEXT NOT NULL,
            delta BLOB NOT NULL,
            writes INTEGER NOT NULL,
            view TEXT
        );
        CREATE TABLE batch (sequence INTEGER PRIMARY KEY, body BLOB NOT NULL);
        """,
        // 1 -> 2: a document's in-flight changes are found without a scan. (Pending changes have no
        // such index on purpose: every local write would pay for it; they are read rarely, when
        // a document with unsent changes is not in memory.)
        """
        CREATE INDEX inflight_by_document ON inflight (collection, id);
        """,
        // 2 -> 3: conflicts the manual strategy left to the app's resolver, kept until the
        // resolution is written, so that an app ended meanwhile is asked again at its next start.
        """
        CREATE TABLE unresolved (
            collection TEXT NOT NULL,
            id TEXT NOT NULL,
            local TEXT,
            conflicts TEXT NOT NULL,
            PRIMARY KEY (collection, id)
        ) WITHOUT ROWID;
        """,
        // 3 -> 4: during a resync, the documents the full pull has not brought yet; those left at
        // its end are no longer the server's to give, and leave the device. And the writes a
        // composed change holds, each as it was made (`parts`, NULL for a change of one write), so
        // that a refusal of the change is sent again write by write and lands on the one at fault.
        """
        CREATE TABLE resync_unseen (
            collection TEXT NOT NULL,
            id TEXT NOT NULL,
            PRIMARY KEY (collection, id)
        ) WITHOUT ROWID;
        ALTER TABLE pending ADD COLUMN parts BLOB;
        ALTER TABLE inflight ADD COLUMN parts BLOB;
        """,
        // 4 -> 5: a change made of writes the app made while the server answered, which the
        // server saves as written rather than settling by the collection's strategy; and each
        // change's own id (`origin`), kept while it is frozen, unfrozen or rebased (sequence
        // numbers are not: SQLite hands a freed one out again), so a write's call finds its answer.
        """
        ALTER TABLE pending ADD COLUMN as_written INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE inflight ADD COLUMN as_written INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE pending ADD COLUMN origin INTEGER;
        ALTER TABLE inflight ADD COLUMN origin INTEGER;
        """,
        // 5 -> 6: a write sent again by itself after the server refused the change that held it
        // (`alone`): it never composes with another again, or the same refusal would come back.
        """
        ALTER TABLE pending ADD COLUMN alone INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE inflight ADD COLUMN alone INTEGER NOT NULL DEFAULT 0;
        """,
        // 6 -> 7: `documents.confirmed` may say once the version most live registers hold ("d")
        // instead of listing each. Nothing in the file changes (the old form still reads); the
        // version keeps an older AbrovaSync from reading the new form as a state without fields.
        """
        -- no change to the tables
        """,
        // 7 -> 8: the atomic group a change belongs to (`WriteBatch`), sent with it: the server
        // applies a group's changes all or none. A group's rows are also `alone`: they never
        // compose with another change, so that a group holds exactly its own writes.
        """
        ALTER TABLE pending ADD COLUMN group_id INTEGER;
        ALTER TABLE inflight ADD COLUMN group_id INTEGER;
        """,
    ]

    /// Brings the file to `target` (the current version unless a test asks for an older one).
    ///
    /// - Throws: `StoreError` `.newerSchema` for a file from a newer version, `.notAStore` for a
    ///   database that holds other tables, `.corrupt` or `.notAStore` when SQLite cannot read it.
    static func migrate(_ database: Database, to target: Int = currentVersion) throws {
        let version = try readVersion(database)
        if version > currentVersion {
            throw StoreError(
                .newerSchema, "the store has schema version \(version); this version of AbrovaSync reads up to \(currentVersion)")
        }
        if version == 0 {
            let tables = try database.queryFirst("SELECT count(*) FROM sqlite_master") { $0.integer(0) } ?? 0
            if tables > 0 { throw StoreError(.notAStore, "the file is an SQLite database but not an AbrovaSync store") }
        }
        if version == 0, target > 0 {
            // A new store is made in one transaction: each commit of a step would write the
            // schema's pages again, and an app's first start waits for them.
            try database.write { database in
                for step in 0..<target { try database.execute(migrations[step]) }
                try database.execute("PRAGMA user_version = \(target)")
            }
            return
        }
        for step in version..<max(version, target) {
            try database.write { database in
                try database.execute(migrations[step])
                try database.execute("PRAGMA user_version = \(step + 1)")
            }
        }
    }

    static func readVersion(_ database: Database) throws -> Int {
        Int(try database.queryFirst("PRAGMA user_version") { $0.integer(0) } ?? 0)
    }
}
