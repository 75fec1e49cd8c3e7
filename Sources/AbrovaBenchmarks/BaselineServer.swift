import AbrovaCore
import AbrovaHTTP
import AbrovaSQLite
import Foundation

/// The design of seed 001, built as that tutorial describes it, on the same HTTP server and the
/// same SQLite settings as ours so that only the protocol differs: one HTTP request per operation
/// with an `Idempotency-Key` header, a `processed_ops` row per operation recorded in the write's
/// transaction, optimistic version checks (409 on a stale version), and pulls of rows with
/// `seq > cursor ORDER BY seq LIMIT n`.
final class BaselineServer: @unchecked Sendable {
    // @unchecked: `database` is only used while `lock` is held.
    fileprivate let database: Database
    fileprivate let lock = NSLock()
    private(set) var server: HTTPServer?

    init(path: String, threads: Int) throws {
        database = try Database(path: path, durability: .full)
        try database.execute(
            """
            CREATE TABLE IF NOT EXISTS notes (id TEXT PRIMARY KEY, body TEXT, version INTEGER NOT NULL DEFAULT 0,
                                              deleted INTEGER NOT NULL DEFAULT 0, seq INTEGER NOT NULL);
            CREATE INDEX IF NOT EXISTS notes_by_seq ON notes (seq);
            CREATE TABLE IF NOT EXISTS processed_ops (op_id TEXT PRIMARY KEY, result TEXT);
            CREATE TABLE IF NOT EXISTS sync_seq (value INTEGER NOT NULL);
            INSERT INTO sync_seq SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM sync_seq);
            """)
        server = try HTTPServer(configuration: HTTPServerConfiguration(port: 0, threadCount: threads, loopbackOnly: true)) {
            [unowned self] request in
            self.handle(request)
        }
    }

    func stop() {
        server?.shutdown()
        server = nil
    }

    private func handle(_ request: HTTPRequest) -> HTTPResponse {
        do {
            switch (request.method, request.path) {
            case ("POST", "/ops"): return try applyOperation(request)
            case ("GET", "/changes"): return try changes(request)
            default: return .json(status: 404, Array(#"{"error":"no route"}"#.utf8))
            }
        } catch {
            return .json(status: 400, Array(#"{"error":"bad request"}"#.utf8))
        }
    }

    /// `{"entityId", "op": "upsert", "payload": {...}, "baseVersion": n}` under an Idempotency-Key.
    private func applyOperation(_ request: HTTPRequest) throws -> HTTPResponse {
        guard let operationID = request.headers["idempotency-key"] else { return .json(status: 400, []) }
        let operation = try Value(json: request.body)
        guard let fields = operation.mapValue, let entity = fields["entityId"]?.stringValue,
            let payload = fields["payload"], let base = fields["baseVersion"]?.intValue
        else { return .json(status: 400, []) }
        return try lock.withLock {
            try database.write { database in
                let isNew =
                    try database.queryFirst(
                        "INSERT INTO processed_ops (op_id) VALUES (?) ON CONFLICT (op_id) DO NOTHING RETURNING op_id",
                        [.text(operationID)]
                    ) { _ in true } ?? false
                guard isNew else {
                    let stored =
                        try database.queryFirst("SELECT result FROM processed_ops WHERE op_id = ?", [.text(operationID)]) { $0.text(0) }
                        ?? nil
                    return .json(status: 200, Array((stored ?? "{}").utf8))
                }
                let seq = try database.queryFirst("UPDATE sync_seq SET value = value + 1 RETURNING value") { $0.integer(0) } ?? 0
                let body = payload.canonicalJSON
                if base == 0 {
                    try database.run(
                        "INSERT INTO notes (id, body, version, seq) VALUES (?, ?, 1, ?) ON CONFLICT (id) DO NOTHING",
                        [.text(entity), .text(body), .integer(seq)])
                } else {
                    try database.run(
                        "UPDATE notes SET body = ?, version = version + 1, seq = ? WHERE id = ? AND version = ?",
                        [.text(body), .integer(seq), .text(entity), .integer(base)])
                }
                guard database.changes == 1 else {
                    let current =
                        try database.queryFirst("SELECT body, version FROM notes WHERE id = ?", [.text(entity)]) { row in
                            #"{"body":\#(row.text(0) ?? "null"),"version":\#(row.integer(1))}"#
                        } ?? "{}"
                    return .json(status: 409, Array(current.utf8))
                }
                let result = #"{"seq":\#(seq),"version":\#(base + 1)}"#
                try database.run("UPDATE processed_ops SET result = ? WHERE op_id = ?", [.text(result), .text(operationID)])
                return .json(status: 200, Array(result.utf8))
            }
        }
    }

    /// `GET /changes?after=&limit=`: `{"changes": [{"body", "deleted", "id", "seq", "version"}]}`.
    private func changes(_ request: HTTPRequest) throws -> HTTPResponse {
        let after = Int64(request.query["after"] ?? "0") ?? 0
        let limit = Int64(request.query["limit"] ?? "500") ?? 500
        let rows = try lock.withLock {
            try database.query(
                "SELECT id, body, version, deleted, seq FROM notes WHERE seq > ? ORDER BY seq LIMIT ?",
                [.integer(after), .integer(limit)]
            ) { row in
                var json = #"{"body":"#
                json += row.text(1) ?? "null"
                json += #","deleted":\#(row.integer(3) != 0),"id":"#
                json += Value.string(row.text(0) ?? "").canonicalJSON
                json += #","seq":\#(row.integer(4)),"version":\#(row.integer(2))}"#
                return json
            }
        }
        return .json(status: 200, Array((#"{"changes":["# + rows.joined(separator: ",") + "]}").utf8))
    }
}

extension BaselineServer {
    /// Writes rows straight into the table, in one transaction, for the pull figures; the first
    /// takes seq `firstSequence`.
    func preload(_ rows: [(id: String, body: String)], firstSequence: Int64 = 1) throws {
        try lock.withLock {
            try database.write { database in
                for (index, row) in rows.enumerated() {
                    try database.run(
                        "INSERT INTO notes (id, body, version, seq) VALUES (?, ?, 1, ?)",
                        [.text(row.id), .text(row.body), .integer(firstSequence + Int64(index))])
                }
                try database.run("UPDATE sync_seq SET value = ?", [.integer(firstSequence + Int64(rows.count) - 1)])
            }
        }
    }
}
