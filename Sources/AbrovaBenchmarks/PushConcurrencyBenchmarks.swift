import AbrovaCore
import AbrovaHTTP
import AbrovaPostgres
import AbrovaServer
import AbrovaTestSupport
import AbrovaWire
import Foundation

/// Server push throughput with 1, 8 and 32 clients pushing at once, on SQLite and on PostgreSQL,
/// each against seed 001's naive design on the same database measured in the same run: 2,000
/// queued creates split over the clients, ours in the SDK's batches (500 changes, zstd 1), the
/// baseline one request per operation with an `Idempotency-Key` (`BaselineServer` on SQLite,
/// `PostgresBaselineServer`, the tutorial's own SQL, on PostgreSQL). Both run in this process
/// behind the same HTTP server (8 threads); every measurement gets a fresh SQLite file or a fresh
/// PostgreSQL schema, and ours and the baseline alternate so that both see the same machine load.
struct PushConcurrencyBenchmarks {
    let options: BenchmarkOptions
    static let clientCounts = [1, 8, 32]
    /// Operations queued offline, as in seed 001's test ("queue 2,000 operations offline").
    static let operations = 2_000

    enum Store: String {
        case sqlite = "SQLite"
        case postgres = "PostgreSQL"
    }

    func run(into report: inout BenchmarkReport) throws {
        var stores: [Store] = [.sqlite]
        if PostgresTestDatabase.isAvailable {
            stores.append(.postgres)
        } else {
            print("push on PostgreSQL: skipped, ABROVA_POSTGRES_URL is not set (`.ci/postgres` starts a server and prints its URL)")
        }
        for store in stores {
            for clients in Self.clientCounts {
                try measure(store, clients: clients, into: &report)
            }
        }
    }

    private func measure(_ store: Store, clients: Int, into report: inout BenchmarkReport) throws {
        let perClient = Self.operations / clients
        var oursRates: [Double] = []
        var baselineRates: [Double] = []
        for _ in 0..<(options.isQuick ? 1 : 3) {
            baselineRates.append(try baselineRate(store, clients: clients, perClient: perClient))
            oursRates.append(try oursRate(store, clients: clients, perClient: perClient))
        }
        let ours = median(oursRates)
        let baseline = median(baselineRates)
        let goal = store == .sqlite ? "≥ 10×" : "reported"
        report.add(
            BenchmarkRow(
                name: "server: push of \(perClient * clients) queued creates, \(clients) client\(clients == 1 ? "" : "s"), "
                    + "\(store.rawValue) (loopback HTTP)",
                figure: formatRate(ours, "ops"), baseline: formatRate(baseline, "ops") + " (a request each, Idempotency-Key)",
                ratio: ours / baseline, goal: goal, isGoalMet: store == .sqlite ? ours / baseline >= 10 : nil))
    }

    /// Runs `body` with a fresh database of `store`: a SQLite file's path, or a PostgreSQL URL
    /// whose schema is dropped afterwards.
    private func withFreshDatabase<Result>(_ store: Store, _ body: (String) throws -> Result) throws -> Result {
        switch store {
        case .sqlite:
            let folder = TemporaryFolder()
            return try withExtendedLifetime(folder) { try body(folder.path("server.sqlite")) }
        case .postgres:
            let database = try PostgresTestDatabase()
            return try withExtendedLifetime(database) { try body(database.url + "&application_name=abrova-bench") }
        }
    }

    /// Operations per second of our server: each client pushes its creates in the SDK's batches.
    private func oursRate(_ store: Store, clients: Int, perClient: Int) throws -> Double {
        let requests = try ServerBenchmarks.pushRequests(clients: clients, perClient: perClient, batchSize: ServerBenchmarks.batchSize)
        return try withFreshDatabase(store) { location in
            let serverStore: any ServerStore =
                switch store {
                case .sqlite: try SQLiteServerStore(path: location)
                case .postgres: try PostgresServerStore(url: location)
                }
            let server = try BenchmarkSyncServer(store: serverStore)
            defer { server.stop() }
            let port = server.port
            let elapsed = try runConcurrently(clients) { client in
                try ServerBenchmarks.push(
                    requests[client], as: client, on: RawHTTPConnection(port: port), level: ServerBenchmarks.compressionLevel)
            }
            return Double(perClient * clients) / seconds(elapsed)
        }
    }

    /// Operations per second of the baseline: each create its own request, with its own
    /// Idempotency-Key, recorded in processed_ops in the write's transaction.
    private func baselineRate(_ store: Store, clients: Int, perClient: Int) throws -> Double {
        try withFreshDatabase(store) { location in
            let port: UInt16
            let stop: () -> Void
            switch store {
            case .sqlite:
                let server = try BaselineServer(path: location, threads: 8)
                port = server.server?.port ?? 0
                stop = server.stop
            case .postgres:
                let server = try PostgresBaselineServer(url: location, threads: 8)
                port = server.port
                stop = server.stop
            }
            defer { stop() }
            let elapsed = try runConcurrently(clients) { client in
                let connection = try RawHTTPConnection(port: port)
                for offset in 0..<perClient {
                    let index = client * perClient + offset
                    let body = Array(
                        Value.map([
                            "entityId": .string("i\(index)"), "op": "upsert", "payload": .map(ServerBenchmarks.document(index)),
                            "baseVersion": 0,
                        ]).canonicalJSON.utf8)
                    let head =
                        "POST /ops HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nIdempotency-Key: \(UUID().uuidString)\r\n"
                        + "Content-Length: \(body.count)\r\n\r\n"
                    try connection.send(Array(head.utf8) + body)
                    let response = try connection.readResponse()
                    guard response.status == 200, (try Value(json: response.body)).mapValue?["version"] != nil else {
                        throw BenchmarkFailure("baseline answered \(response.status): \(String(decoding: response.body, as: UTF8.self))")
                    }
                }
            }
            return Double(perClient * clients) / seconds(elapsed)
        }
    }
}

/// Seed 001's server on PostgreSQL, with the tutorial's SQL: one request per operation under an
/// `Idempotency-Key`, the key recorded in `processed_ops` in the write's transaction (a repeat gets
/// the stored answer), versions checked optimistically (409 on a stale one), `seq` from
/// `nextval`. Connections come from a pool as large as the HTTP server's thread count. The pull
/// route is not served: only pushes are measured on PostgreSQL.
final class PostgresBaselineServer: Sendable {
    private let pool: PostgresPool
    private let server: HTTPServer

    private enum Statements {
        static let claim = PostgresStatement(
            "baseline_claim",
            "INSERT INTO processed_ops (op_id) VALUES ($1) ON CONFLICT (op_id) DO NOTHING RETURNING op_id",
            parameters: [.text])
        static let stored = PostgresStatement("baseline_stored", "SELECT result FROM processed_ops WHERE op_id = $1", parameters: [.text])
        static let insert = PostgresStatement(
            "baseline_insert",
            """
            INSERT INTO notes (id, body, version, seq) VALUES ($1, $2, 1, nextval('sync_seq')) ON CONFLICT (id) DO NOTHING RETURNING seq
            """, parameters: [.text, .text])
        static let update = PostgresStatement(
            "baseline_update",
            """
            UPDATE notes SET body = $1, version = version + 1, seq = nextval('sync_seq') WHERE id = $2 AND version = $3 RETURNING seq
            """, parameters: [.text, .text, .integer])
        static let current = PostgresStatement("baseline_current", "SELECT body, version FROM notes WHERE id = $1", parameters: [.text])
        static let record = PostgresStatement(
            "baseline_record", "UPDATE processed_ops SET result = $1 WHERE op_id = $2",
            parameters: [.text, .text])
    }

    /// Creates the tables in the first schema of `url`'s search path and serves on a free loopback port.
    init(url: String, threads: Int) throws {
        let pool = PostgresPool(url: url, maximumConnections: threads)
        try pool.withConnection { connection in
            try connection.execute(
                """
                CREATE TABLE notes (id TEXT PRIMARY KEY, body TEXT, version BIGINT NOT NULL DEFAULT 0,
                                    deleted BOOLEAN NOT NULL DEFAULT false, seq BIGINT NOT NULL);
                CREATE INDEX notes_by_seq ON notes (seq);
                CREATE TABLE processed_ops (op_id TEXT PRIMARY KEY, result TEXT);
                CREATE SEQUENCE sync_seq;
                """)
        }
        self.pool = pool
        server = try HTTPServer(configuration: HTTPServerConfiguration(port: 0, threadCount: threads, loopbackOnly: true)) { request in
            Self.handle(request, pool: pool)
        }
    }

    var port: UInt16 { server.port }
    func stop() { server.shutdown() }

    private static func handle(_ request: HTTPRequest, pool: PostgresPool) -> HTTPResponse {
        guard request.method == "POST", request.path == "/ops" else { return .json(status: 404, Array(#"{"error":"no route"}"#.utf8)) }
        do {
            return try applyOperation(request, pool: pool)
        } catch {
            return .json(status: 500, Array(#"{"error":"\#(error)"}"#.utf8))
        }
    }

    /// `{"entityId", "op": "upsert", "payload": {...}, "baseVersion": n}` under an Idempotency-Key.
    private static func applyOperation(_ request: HTTPRequest, pool: PostgresPool) throws -> HTTPResponse {
        guard let operationID = request.headers["idempotency-key"],
            let fields = try? Value(json: request.body).mapValue, let entity = fields["entityId"]?.stringValue,
            let payload = fields["payload"], let base = fields["baseVersion"]?.intValue
        else {
            return .json(status: 400, Array(#"{"error":"bad request"}"#.utf8))
        }
        return try pool.withConnection { connection in
            try connection.transaction { connection in
                guard try connection.run(Statements.claim, [.text(operationID)]).count == 1 else {
                    let stored = try connection.run(Statements.stored, [.text(operationID)])
                    return .json(status: 200, Array((stored.count == 1 ? stored.text(0, 0) : "{}").utf8))
                }
                let body = payload.canonicalJSON
                let written: PostgresRows
                if base == 0 {
                    written = try connection.run(Statements.insert, [.text(entity), .text(body)])
                } else {
                    written = try connection.run(Statements.update, [.text(body), .text(entity), .integer(base)])
                }
                guard written.count == 1 else {
                    let current = try connection.run(Statements.current, [.text(entity)])
                    let answer = current.count == 1 ? #"{"body":\#(current.text(0, 0)),"version":\#(current.integer(0, 1))}"# : "{}"
                    return .json(status: 409, Array(answer.utf8))
                }
                let result = #"{"seq":\#(written.integer(0, 0)),"version":\#(base + 1)}"#
                try connection.run(Statements.record, [.text(result), .text(operationID)])
                return .json(status: 200, Array(result.utf8))
            }
        }
    }
}
