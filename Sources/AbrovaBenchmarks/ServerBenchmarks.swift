import AbrovaCore
import AbrovaHTTP
import AbrovaLocking
import AbrovaServer
import AbrovaTestSupport
import AbrovaWire
import Dispatch
import Foundation

/// The sync server over loopback HTTP against seed 001's design (one request per operation with
/// an Idempotency-Key and a processed-operations table), both on the same HTTP server and SQLite
/// settings (WAL, a sync to disk at every commit), in the same run.
struct ServerBenchmarks {
    let options: BenchmarkOptions
    /// Operations queued offline, as in seed 001's test ("queue 2,000 operations offline").
    let operations = 2_000
    /// The batch size and zstd level the client SDK uses, chosen from the tuning figures below.
    static let batchSize = 500
    static let compressionLevel: Int32 = 1

    func run(into report: inout BenchmarkReport) {
        print("## server")
        do {
            if options.runs("server-push") { try PushConcurrencyBenchmarks(options: options).run(into: &report) }
            if options.runs("server-tuning") { try measureTuning() }
            if options.runs("server-pull") { try measurePull(into: &report) }
            if options.runs("server-pull-memory") {
                #if os(Linux)
                    try PullMemoryBenchmarks(options: options).run(into: &report)
                #else
                    print("pull memory: skipped, Linux only (it reads the server's /proc status)")
                #endif
            }
            if options.runs("server-deferred-memory") { try DeferredMemoryBenchmarks(options: options).run(into: &report) }
            if options.runs("server-processes") {
                #if os(Linux)
                    try ProcessBenchmarks(options: options).run(into: &report)
                #else
                    print("push by server processes: skipped, Linux only (the servers run under GNU timeout)")
                #endif
            }
        } catch {
            print("server benchmarks failed: \(error)")
        }
    }

    /// A 10-field document of about 200 bytes.
    static func document(_ index: Int) -> [String: Value] {
        [
            "title": .string("Item number \(index)"), "qty": .int(Int64(index % 7)), "price": .double(Double(index % 100) / 4),
            "done": .bool(index % 2 == 0), "owner": "ana", "list": .string("list-\(index % 20)"), "note": "bring the bags",
            "rank": .int(Int64(index)), "color": "green", "updated": .int(1_700_000_000 + Int64(index)),
        ]
    }

    // MARK: - Push

    /// Operations per second of our server for `operations` creates in batches of `batchSize`,
    /// compressed at `level` (0: identity), on a fresh database.
    private func oursPushRate(clients: Int, batchSize: Int, level: Int32) throws -> Double {
        let folder = TemporaryFolder()
        let server = try OurServer(path: folder.path("server.sqlite"))
        defer { server.stop() }
        let perClient = operations / clients
        let requests = try Self.pushRequests(clients: clients, perClient: perClient, batchSize: batchSize)
        let port = server.port
        let elapsed = try runConcurrently(clients) { client in
            try Self.push(requests[client], as: client, on: RawHTTPConnection(port: port), level: level)
        }
        return Double(perClient * clients) / seconds(elapsed)
    }

    /// The batches of `clients` clients, each of `perClient` creates of its own documents, as the
    /// SDK queues them: client `c` is `client-c` and creates `i(c × perClient)` onwards.
    static func pushRequests(clients: Int, perClient: Int, batchSize: Int) throws -> [[PushRequest]] {
        try (0..<clients).map { client in
            let changes = try (0..<perClient).map { offset in
                let index = client * perClient + offset
                return BatchChange(
                    key: DocumentKey(collection: "items", id: "i\(index)"),
                    delta: try DocumentDelta.create(document(index), base: .zero), writes: 1)
            }
            return stride(from: 0, to: changes.count, by: batchSize).enumerated().map { number, start in
                PushRequest(
                    batch: Batch(
                        clientID: "client-\(client)", sequence: Int64(number + 1),
                        changes: Array(changes[start..<min(start + batchSize, changes.count)])), strategy: .merge)
            }
        }
    }

    /// Pushes `requests` one after another on `connection` as the SDK does (as user `user-client`,
    /// compressed at `level`, 0 for identity) and checks that every change was applied.
    static func push(_ requests: [PushRequest], as client: Int, on connection: RawHTTPConnection, level: Int32) throws {
        for request in requests {
            var body = request.body
            var head = "POST /v1/push HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: bench\r\nAuthorization: Bearer user-\(client)\r\n"
            if level > 0 {
                body = try Zstd.compress(body, level: level)
                head += "Content-Encoding: zstd\r\nAccept-Encoding: zstd\r\n"
            }
            try connection.send(Array((head + "Content-Length: \(body.count)\r\n\r\n").utf8) + body)
            let response = try connection.readResponse()
            let answer =
                response.headers["content-encoding"] == "zstd" ? try Zstd.decompress(response.body, limit: 64 << 20) : response.body
            guard response.status == 200 else {
                throw BenchmarkFailure("push answered \(response.status): \(String(decoding: answer, as: UTF8.self))")
            }
            let results = try PushResponse(body: answer).results
            guard results.count == request.batch.changes.count, results.allSatisfy({ if case .applied = $0 { true } else { false } }) else {
                throw BenchmarkFailure(
                    "push applied \(results.filter { if case .applied = $0 { true } else { false } }.count) of \(request.batch.changes.count) changes"
                )
            }
        }
    }

    /// Batch sizes and zstd levels for one client, printed to choose the defaults.
    private func measureTuning() throws {
        print("")
        print("push tuning, 1 client, \(operations) operations (ops/s; request bytes per operation):")
        print("")
        print("| batch size | identity | zstd 1 | zstd 3 | zstd 9 |")
        print("| --- | --- | --- | --- | --- |")
        for batchSize in [50, 200, 500, 1_000] {
            var cells: [String] = []
            for level: Int32 in [0, 1, 3, 9] {
                let rate = median(
                    try (0..<(options.isQuick ? 1 : 3)).map { _ in try oursPushRate(clients: 1, batchSize: batchSize, level: level) })
                cells.append(String(format: "%.0f; %.0f B", rate, try requestBytesPerOperation(batchSize: batchSize, level: level)))
            }
            print("| \(batchSize) | \(cells.joined(separator: " | ")) |")
        }
        print("")
    }

    private func requestBytesPerOperation(batchSize: Int, level: Int32) throws -> Double {
        let changes = try (0..<batchSize).map { index in
            BatchChange(
                key: DocumentKey(collection: "items", id: "i\(index)"), delta: try DocumentDelta.create(Self.document(index), base: .zero),
                writes: 1)
        }
        let body = PushRequest(batch: Batch(clientID: "client", sequence: 1, changes: changes), strategy: .merge).body
        return Double(level > 0 ? try Zstd.compress(body, level: level).count : body.count) / Double(batchSize)
    }

    // MARK: - Pull

    /// 10,000 documents pulled in pages of 500 from a fresh device's cursor, decoded: ours with
    /// states and zstd, the baseline rows of JSON. Reported, no goal.
    private func measurePull(into report: inout BenchmarkReport) throws {
        let count = options.isQuick ? 2_000 : 10_000
        let folder = TemporaryFolder()
        let ours = try OurServer(path: folder.path("server.sqlite"))
        defer { ours.stop() }
        let baseline = try BaselineServer(path: folder.path("baseline.sqlite"), threads: 8)
        defer { baseline.stop() }
        // Loading: ours through pushes of 1,000 changes, the baseline through its own writes in
        // one transaction (its one-request-per-operation path would take minutes).
        let loader = try RawHTTPConnection(port: ours.port)
        for (number, start) in stride(from: 0, to: count, by: 1_000).enumerated() {
            let changes = try (start..<start + 1_000).map { index in
                BatchChange(
                    key: DocumentKey(collection: "items", id: "i\(index)"),
                    delta: try DocumentDelta.create(Self.document(index), base: .zero), writes: 1)
            }
            let body = PushRequest(batch: Batch(clientID: "loader", sequence: Int64(number + 1), changes: changes), strategy: .merge).body
            try loader.send(
                Array(
                    "POST /v1/push HTTP/1.1\r\nHost: x\r\nX-API-Key: bench\r\nAuthorization: Bearer reader\r\nContent-Length: \(body.count)\r\n\r\n"
                        .utf8) + body)
            guard try loader.readResponse().status == 200 else { throw BenchmarkFailure("loading failed") }
        }
        try baseline.preload((0..<count).map { ("i\($0)", Value.map(Self.document($0)).canonicalJSON) })

        let rates = compare(
            operations: count, repetitions: options.isQuick ? 3 : 5,
            ours: {
                do {
                    let connection = try RawHTTPConnection(port: ours.port)
                    var cursor = ""
                    var pulled = 0
                    while true {
                        try connection.send(
                            "GET /v1/pull?limit=500&cursor=\(cursor) HTTP/1.1\r\nHost: x\r\nX-API-Key: bench\r\nAuthorization: Bearer reader\r\nAccept-Encoding: zstd\r\n\r\n"
                        )
                        let response = try connection.readResponse()
                        let body =
                            response.headers["content-encoding"] == "zstd"
                            ? try Zstd.decompress(response.body, limit: 64 << 20) : response.body
                        let page = try PullResponse(body: body)
                        pulled += page.documents.count
                        cursor = page.cursor
                        if !page.hasMore { break }
                    }
                    precondition(pulled == count, "pulled \(pulled)")
                } catch {
                    fatalError("pull failed: \(error)")
                }
            },
            baseline: {
                do {
                    let connection = try RawHTTPConnection(port: baseline.server?.port ?? 0)
                    var after: Int64 = 0
                    var pulled = 0
                    while true {
                        try connection.send("GET /changes?after=\(after)&limit=500 HTTP/1.1\r\nHost: x\r\n\r\n")
                        let rows = try Value(json: try connection.readResponse().body).mapValue?["changes"]?.arrayValue ?? []
                        if rows.isEmpty { break }
                        pulled += rows.count
                        after = rows.last?.mapValue?["seq"]?.intValue ?? after
                    }
                    precondition(pulled == count, "pulled \(pulled)")
                } catch {
                    fatalError("baseline pull failed: \(error)")
                }
            })
        report.add(
            BenchmarkRow(
                name: "server: pull of \(count) documents in pages of 500 (loopback HTTP, decoded)",
                figure: formatRate(rates.ours, "documents"), baseline: formatRate(rates.baseline, "rows by seq cursor"),
                ratio: rates.ours / rates.baseline, goal: "reported", isGoalMet: nil))
    }
}

/// Our server on a fresh SQLite database: the service, the routes, the HTTP server.
private final class OurServer: Sendable {
    let server: HTTPServer

    init(path: String) throws {
        let service = try SyncService(store: try SQLiteServerStore(path: path))
        let handler = SyncHTTPHandler(service: service, authenticator: DevelopmentAuthenticator())
        server = try HTTPServer(configuration: HTTPServerConfiguration(port: 0, threadCount: 8, loopbackOnly: true)) { handler.handle($0) }
    }

    var port: UInt16 { server.port }
    func stop() { server.shutdown() }
}

struct BenchmarkFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Runs `body` for each client on its own thread (the clients block on their sockets) and
/// returns the wall time until all are done.
func runConcurrently(_ clients: Int, _ body: @escaping @Sendable (Int) throws -> Void) throws -> Duration {
    let group = DispatchGroup()
    let failure = Protected<String?>(nil)
    let start = ContinuousClock.now
    for client in 0..<clients {
        group.enter()
        let thread = Thread {
            defer { group.leave() }
            do {
                try body(client)
            } catch {
                failure.withLock { $0 = "\(error)" }
            }
        }
        thread.start()
    }
    group.wait()
    let elapsed = ContinuousClock.now - start
    if let message = failure.withLock({ $0 }) { throw BenchmarkFailure(message) }
    return elapsed
}
