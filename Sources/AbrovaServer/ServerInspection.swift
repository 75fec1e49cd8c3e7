import AbrovaCore
import AbrovaPostgres
import AbrovaSQLite
import Foundation

/// What a server's database holds, read without changing it (`abrova inspect server`).
public struct ServerInspection: Sendable {
    /// Documents of one collection.
    public struct CollectionCount: Sendable, Equatable {
        public var collection: String
        public var live: Int
        /// Deleted documents whose tombstones are still kept.
        public var tombstones: Int
    }

    /// A client and the last batch it sent.
    public struct ClientBatch: Sendable, Equatable {
        public var user: String
        public var client: String
        public var lastBatch: Int64
    }

    /// The database, as it may be shown (a PostgreSQL password is hidden).
    public var database: String
    public var schemaVersion: Int
    /// The newest version a document holds: every version at or below it is committed.
    public var latestVersion: Version
    /// The highest version of a removed tombstone: a cursor below it is answered 410.
    public var tombstoneHorizon: Version
    public var collections: [CollectionCount]
    /// When the oldest kept tombstone was made (`nil`: none kept).
    public var oldestTombstone: Date?
    public var clientCount: Int
    /// The clients, at most `maximumListedClients` of them (by user and client id).
    public var clients: [ClientBatch]

    /// How many clients an inspection lists.
    public static let maximumListedClients = 100

    /// Reads the SQLite server database at `path` without writing to it.
    ///
    /// - Throws: `ServerStoreError` naming what is wrong: no file, not a database, not a server store.
    public static func read(sqlitePath path: String) throws(ServerStoreError) -> ServerInspection {
        guard FileManager.default.fileExists(atPath: path) else { throw ServerStoreError("no file at \(path)") }
        do {
            let database = try Database(readingOnly: path)
            let tables = Set(try database.query("SELECT name FROM sqlite_master WHERE type = 'table'") { $0.text(0) ?? "" })
            guard tables.isSuperset(of: ["meta", "documents", "clients"]) else {
                throw ServerStoreError("\(path) is an SQLite database but not an AbrovaSync server database")
            }
            let schema = Int(try database.queryFirst("PRAGMA user_version") { $0.integer(0) } ?? 0)
            let latest = try database.queryFirst("SELECT coalesce(max(version), 0) FROM documents") { $0.integer(0) } ?? 0
            let horizon = try database.queryFirst("SELECT value FROM meta WHERE key = 'horizon'") { $0.integer(0) } ?? 0
            let collections = try database.query(
                """
                SELECT collection, count(*) - count(deleted_at), count(deleted_at) FROM documents
                GROUP BY collection ORDER BY collection
                """
            ) { CollectionCount(collection: $0.text(0) ?? "", live: Int($0.integer(1)), tombstones: Int($0.integer(2))) }
            let oldest = try database.queryFirst("SELECT min(deleted_at) FROM documents") { $0.isNull(0) ? nil : $0.real(0) } ?? nil
            let clientCount = Int(try database.queryFirst("SELECT count(*) FROM clients") { $0.integer(0) } ?? 0)
            let clients = try database.query(
                "SELECT user_id, client_id, sequence FROM clients ORDER BY user_id, client_id LIMIT ?",
                [.integer(Int64(maximumListedClients))]
            ) { ClientBatch(user: $0.text(0) ?? "", client: $0.text(1) ?? "", lastBatch: $0.integer(2)) }
            return ServerInspection(
                database: path, schemaVersion: schema, latestVersion: Version(UInt64(bitPattern: latest)),
                tombstoneHorizon: Version(UInt64(bitPattern: horizon)), collections: collections,
                oldestTombstone: oldest.map(Date.init(timeIntervalSince1970:)), clientCount: clientCount, clients: clients)
        } catch let error as ServerStoreError {
            throw error
        } catch let error as SQLiteError {
            throw ServerStoreError("\(path) cannot be read: \(error.message)")
        } catch {
            throw ServerStoreError("\(path) cannot be read: \(error)")
        }
    }

    /// Reads the PostgreSQL server database at `url` without writing to it (the tables in the
    /// first schema of the search path that holds them, as the server finds them).
    ///
    /// - Throws: `ServerStoreError` naming what is wrong: unreachable, or no server's tables.
    public static func read(postgresURL url: String) throws(ServerStoreError) -> ServerInspection {
        let shown = redactingPassword(url)
        do {
            let connection = try PostgresConnection(url: url)
            func rows(_ name: String, _ sql: String, _ values: [PostgresValue] = [], types: [PostgresStatement.ParameterType] = [])
                throws -> PostgresRows
            {
                try connection.run(PostgresStatement(name, sql, parameters: types), values)
            }
            let exists = try rows("inspect_exists", "SELECT (to_regclass('abrova_meta') IS NOT NULL)::int::bigint")
            guard exists.count > 0, exists.integer(0, 0) == 1 else {
                throw ServerStoreError("\(shown) holds no AbrovaSync server tables (abrova serve makes them at its first start)")
            }
            let schema = try rows("inspect_schema", "SELECT number FROM abrova_meta WHERE key = 'schema'")
            let horizon = try rows("inspect_horizon", "SELECT number FROM abrova_meta WHERE key = 'horizon'")
            let latest = try rows("inspect_latest", "SELECT coalesce(max(version), 0) FROM abrova_documents")
            let counts = try rows(
                "inspect_collections",
                """
                SELECT collection, (count(*) - count(deleted_at))::bigint, count(deleted_at)::bigint FROM abrova_documents
                GROUP BY collection ORDER BY collection
                """)
            let oldest = try rows("inspect_oldest", "SELECT min(deleted_at)::text FROM abrova_documents")
            let clientCount = try rows("inspect_client_count", "SELECT count(*)::bigint FROM abrova_clients")
            let clients = try rows(
                "inspect_clients", "SELECT user_id, client_id, sequence FROM abrova_clients ORDER BY user_id, client_id LIMIT $1",
                [.integer(Int64(maximumListedClients))], types: [.integer])
            return ServerInspection(
                database: shown, schemaVersion: schema.count > 0 ? Int(schema.integer(0, 0)) : 0,
                latestVersion: Version(UInt64(bitPattern: latest.integer(0, 0))),
                tombstoneHorizon: Version(UInt64(bitPattern: horizon.count > 0 ? horizon.integer(0, 0) : 0)),
                collections: (0..<counts.count).map {
                    CollectionCount(
                        collection: counts.text($0, 0), live: Int(counts.integer($0, 1)), tombstones: Int(counts.integer($0, 2)))
                },
                oldestTombstone: oldest.isNull(0, 0) ? nil : Double(oldest.text(0, 0)).map(Date.init(timeIntervalSince1970:)),
                clientCount: Int(clientCount.integer(0, 0)),
                clients: (0..<clients.count).map {
                    ClientBatch(user: clients.text($0, 0), client: clients.text($0, 1), lastBatch: clients.integer($0, 2))
                })
        } catch let error as ServerStoreError {
            throw error
        } catch let error as PostgresError {
            throw ServerStoreError("\(shown) cannot be read: \(error.message)")
        } catch {
            throw ServerStoreError("\(shown) cannot be read: \(error)")
        }
    }

    /// The inspection as a JSON object (`--json`).
    public var json: Value {
        var parts: [String: Value] = [
            "database": .string(database), "schemaVersion": .int(Int64(schemaVersion)),
            "latestVersion": .int(Int64(clamping: latestVersion.rawValue)),
            "tombstoneHorizon": .int(Int64(clamping: tombstoneHorizon.rawValue)),
            "collections": .array(
                collections.map {
                    .map(["collection": .string($0.collection), "live": .int(Int64($0.live)), "tombstones": .int(Int64($0.tombstones))])
                }),
            "clientCount": .int(Int64(clientCount)),
            "clients": .array(
                clients.map { .map(["user": .string($0.user), "clientId": .string($0.client), "lastBatch": .int($0.lastBatch)]) }),
        ]
        parts["oldestTombstone"] = oldestTombstone.map { .string(LogFormat.timestamp($0)) } ?? .null
        return .map(parts)
    }

    /// The inspection for people, a fact a line.
    public var text: String {
        var lines = ["server database \(database)", "  schema version: \(schemaVersion)"]
        lines.append("  latest version: \(latestVersion.rawValue)")
        lines.append(
            "  tombstone horizon: \(tombstoneHorizon.rawValue)"
                + (tombstoneHorizon == .zero ? " (no tombstone removed yet)" : " (a cursor below it must resync)"))
        let live = collections.reduce(0) { $0 + $1.live }
        let tombstones = collections.reduce(0) { $0 + $1.tombstones }
        lines.append("  documents: \(live) (and \(tombstones) tombstones kept)")
        for count in collections {
            lines.append("    \(count.collection): \(count.live)\(count.tombstones > 0 ? " (and \(count.tombstones) tombstones)" : "")")
        }
        if let oldestTombstone {
            lines.append(
                "  oldest tombstone: deleted \(LogFormat.timestamp(oldestTombstone)) (removed after the retention abrova serve is given)")
        }
        lines.append("  clients: \(clientCount)")
        for client in clients { lines.append("    \(client.user) / \(client.client): last batch \(client.lastBatch)") }
        if clientCount > clients.count { lines.append("    and \(clientCount - clients.count) more") }
        return lines.joined(separator: "\n")
    }
}

/// The URL as it may be shown or logged: a password in it becomes `***`.
public func redactingPassword(_ url: String) -> String {
    guard var components = URLComponents(string: url), components.password != nil else { return url }
    components.password = "***"
    return components.string ?? url
}
