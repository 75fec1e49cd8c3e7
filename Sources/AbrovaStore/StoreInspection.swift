import AbrovaCore
import AbrovaSQLite
import Foundation

/// What a device store file holds, read without changing it (`abrova inspect store`): for a
/// developer or support engineer looking into a store copied off a device.
package struct StoreInspection: Sendable {
    /// Documents of one collection.
    public struct CollectionCount: Sendable, Equatable {
        public var collection: String
        /// Documents that exist, as the device shows them.
        public var live: Int
        /// Documents the device holds as deleted (their state is kept for conflict checks).
        public var deleted: Int
    }

    public var path: String
    /// The file's and its write-ahead log's bytes.
    public var fileBytes: Int
    public var schemaVersion: Int
    /// The newest schema this build reads.
    public var readableSchemaVersion: Int
    public var clientID: String?
    /// The user whose store it is (`nil`: none named yet; "(anonymous)" for the anonymous caller).
    public var owner: String?
    public var cursor: String?
    public var isResyncing: Bool
    /// The sync scope's canonical JSON (`nil`: everything).
    public var syncScope: String?
    public var collections: [CollectionCount]
    /// Unsent changes and the app writes they hold, waiting in the queue.
    public var queuedChanges: Int
    public var queuedWrites: Int
    /// Atomic groups among them.
    public var queuedGroups: Int
    /// The frozen batch being sent (its number and changes), if any.
    public var frozenBatch: (sequence: Int64, changes: Int, writes: Int)?
    /// The number the next batch takes.
    public var nextBatchSequence: Int64?
    /// Documents whose conflicts wait for the app's resolver.
    public var unresolvedConflicts: [DocumentKey]

    /// Reads the store at `path` without writing to it.
    ///
    /// - Throws: `StoreError`: `.notAStore` for a file that is not an AbrovaSync store (or not
    ///   a database), `.io` when it cannot be opened (missing, or held by the app that uses it).
    package static func read(path: String) throws(StoreError) -> StoreInspection {
        guard FileManager.default.fileExists(atPath: path) else { throw StoreError(.database, "no file at \(path)") }
        let database: Database
        do {
            database = try Database(readingOnly: path)
        } catch {
            throw StoreError(.notAStore, "\(path) cannot be read as an SQLite database: \(error.message)")
        }
        do {
            return try read(database, path: path)
        } catch let error as StoreError {
            throw error
        } catch let error as SQLiteError where error.code.primary == .busy || error.code.primary == .locked {
            throw StoreError(.database, "\(path) is held by the app using it (it keeps its store locked); inspect a copy")
        } catch {
            throw StoreError(.notAStore, "\(path) is not an AbrovaSync store as this version reads it: \(error)")
        }
    }

    private static func read(_ database: Database, path: String) throws -> StoreInspection {
        let version = try Schema.readVersion(database)
        let tables = Set(try database.query("SELECT name FROM sqlite_master WHERE type = 'table'") { $0.text(0) ?? "" })
        guard version > 0, tables.isSuperset(of: ["meta", "documents", "pending"]) else {
            throw StoreError(.notAStore, "\(path) is an SQLite database but not an AbrovaSync store")
        }
        var meta: [String: String] = [:]
        for (key, value) in try database.query("SELECT key, value FROM meta", [], { ($0.text(0) ?? "", $0.text(1) ?? "") }) {
            meta[key] = value
        }
        let owner: String? = meta["owner"].map { stored in
            switch try? Value(json: Array(stored.utf8)) {
            case .string(let user)?: user
            case .null?: "(anonymous)"
            default: stored
            }
        }
        let collections = try database.query(
            "SELECT collection, count(view), count(*) - count(view) FROM documents GROUP BY collection ORDER BY collection"
        ) { row in
            CollectionCount(collection: row.text(0) ?? "", live: Int(row.integer(1)), deleted: Int(row.integer(2)))
        }
        let pendingColumns = Set(try database.query("PRAGMA table_info(pending)") { $0.text(1) ?? "" })
        let groups = pendingColumns.contains("group_id") ? "count(DISTINCT group_id)" : "0"
        let (changes, writes, groupCount) =
            try database.queryFirst("SELECT count(*), coalesce(sum(writes), 0), \(groups) FROM pending") {
                (Int($0.integer(0)), Int($0.integer(1)), Int($0.integer(2)))
            } ?? (0, 0, 0)
        var frozen: (sequence: Int64, changes: Int, writes: Int)?
        if tables.contains("batch"), tables.contains("inflight"),
            let sequence = try database.queryFirst("SELECT sequence FROM batch", [], { $0.integer(0) })
        {
            let (count, inflightWrites) =
                try database.queryFirst("SELECT count(*), coalesce(sum(writes), 0) FROM inflight") {
                    (Int($0.integer(0)), Int($0.integer(1)))
                }
                ?? (0, 0)
            frozen = (sequence, count, inflightWrites)
        }
        let unresolved =
            tables.contains("unresolved")
            ? try database.query("SELECT collection, id FROM unresolved ORDER BY collection, id") {
                DocumentKey(collection: $0.text(0) ?? "", id: $0.text(1) ?? "")
            } : []
        var bytes = 0
        for suffix in ["", "-wal"] {
            bytes += (try? FileManager.default.attributesOfItem(atPath: path + suffix)[.size] as? Int) ?? 0
        }
        return StoreInspection(
            path: path, fileBytes: bytes, schemaVersion: version, readableSchemaVersion: Schema.currentVersion,
            clientID: meta["client_id"], owner: owner, cursor: meta["cursor"], isResyncing: meta["resync"] != nil,
            syncScope: meta["scope"], collections: collections, queuedChanges: changes, queuedWrites: writes, queuedGroups: groupCount,
            frozenBatch: frozen, nextBatchSequence: meta["next_batch_sequence"].flatMap { Int64($0) }, unresolvedConflicts: unresolved)
    }

    /// The inspection as a JSON object (`--json`).
    public var json: Value {
        var parts: [String: Value] = [
            "path": .string(path), "fileBytes": .int(Int64(fileBytes)), "schemaVersion": .int(Int64(schemaVersion)),
            "resyncing": .bool(isResyncing),
            "collections": .array(
                collections.map {
                    .map(["collection": .string($0.collection), "live": .int(Int64($0.live)), "deleted": .int(Int64($0.deleted))])
                }),
            "queue": .map([
                "changes": .int(Int64(queuedChanges)), "writes": .int(Int64(queuedWrites)), "groups": .int(Int64(queuedGroups)),
            ]),
            "unresolvedConflicts": .array(unresolvedConflicts.map { .string($0.description) }),
        ]
        parts["clientId"] = clientID.map(Value.string) ?? .null
        parts["owner"] = owner.map(Value.string) ?? .null
        parts["cursor"] = cursor.map(Value.string) ?? .null
        parts["syncScope"] = syncScope.flatMap { try? Value(json: Array($0.utf8)) } ?? .null
        parts["nextBatchSequence"] = nextBatchSequence.map { .int($0) } ?? .null
        parts["frozenBatch"] =
            frozenBatch.map {
                .map(["sequence": .int($0.sequence), "changes": .int(Int64($0.changes)), "writes": .int(Int64($0.writes))])
            } ?? .null
        return .map(parts)
    }

    /// The inspection for people, a fact a line.
    public var text: String {
        var lines = ["device store \(path)"]
        lines.append("  size: \(fileBytes) bytes (with its write-ahead log)")
        let readable = schemaVersion > readableSchemaVersion ? " (newer than this abrova reads: \(readableSchemaVersion))" : ""
        lines.append("  schema version: \(schemaVersion)\(readable)")
        lines.append("  client id: \(clientID ?? "none yet")")
        lines.append("  user: \(owner ?? "none named yet")")
        lines.append("  pull cursor: \(cursor ?? "none (never pulled)")\(isResyncing ? ", resyncing" : "")")
        lines.append("  sync scope: \(syncScope ?? "everything the user may read")")
        let live = collections.reduce(0) { $0 + $1.live }
        let deleted = collections.reduce(0) { $0 + $1.deleted }
        lines.append("  documents: \(live) (and \(deleted) deleted)")
        for count in collections {
            lines.append("    \(count.collection): \(count.live)\(count.deleted > 0 ? " (and \(count.deleted) deleted)" : "")")
        }
        lines.append(
            "  unsent: \(queuedChanges) changes holding \(queuedWrites) writes in the queue"
                + (queuedGroups > 0 ? ", \(queuedGroups) atomic groups" : ""))
        if let frozenBatch {
            lines.append("  being sent: batch \(frozenBatch.sequence), \(frozenBatch.changes) changes holding \(frozenBatch.writes) writes")
        } else {
            lines.append("  being sent: nothing")
        }
        if let nextBatchSequence { lines.append("  next batch number: \(nextBatchSequence)") }
        lines.append("  conflicts waiting for the resolver: \(unresolvedConflicts.isEmpty ? "none" : "\(unresolvedConflicts.count)")")
        for key in unresolvedConflicts.prefix(20) { lines.append("    \(key)") }
        if unresolvedConflicts.count > 20 { lines.append("    and \(unresolvedConflicts.count - 20) more") }
        return lines.joined(separator: "\n")
    }
}
