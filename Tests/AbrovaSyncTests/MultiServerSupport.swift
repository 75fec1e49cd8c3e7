import AbrovaCore
import AbrovaPostgres
import AbrovaServer
import AbrovaSync
import AbrovaTestSupport
import AbrovaWire
import Foundation

/// `abrova serve --postgres` in a child process (`ChildProcess`), on a free loopback port, in
/// development mode (any API key; a bearer token is its user's id). Its output goes to a log file.
/// `stop()` kills it (SIGKILL) and waits until it is gone; it dies with its value in any case.
final class ServerProcess: Sendable {
    /// The port it listens on.
    let port: UInt16
    /// The `application_name` of its PostgreSQL connections (`pg_stat_activity` shows them).
    let applicationName: String
    /// `http://127.0.0.1:<port>`.
    var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

    private let child: ChildProcess

    /// Starts a server on the database `databaseURL` names and waits (without blocking a thread)
    /// until it says which port it listens on.
    static func start(databaseURL: String, name: String, folder: TemporaryFolder, within seconds: Double = 30) async throws -> ServerProcess
    {
        let applicationName = "abrova-\(name)-\(UUID().uuidString.prefix(8).lowercased())"
        let child = try ChildProcess(
            "abrova", ["serve", "--postgres", databaseURL + "&application_name=\(applicationName)", "--port", "0", "--loopback"],
            logPath: folder.path("\(name).log"))
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1_000))
        do {
            while ContinuousClock.now < deadline && child.isRunning {
                let text = child.log
                if let range = text.range(of: #"on port \d+"#, options: .regularExpression),
                    let port = UInt16(text[range].split(separator: " ").last ?? "")
                {
                    return ServerProcess(port: port, applicationName: applicationName, child: child)
                }
                try await Task.sleep(for: .milliseconds(20))
            }
            throw Failure("\(name) did not start: \(child.log)")
        } catch {
            child.kill()
            throw error
        }
    }

    private init(port: UInt16, applicationName: String, child: ChildProcess) {
        self.port = port
        self.applicationName = applicationName
        self.child = child
    }

    /// Kills the server and waits until it is gone.
    func stop() async { await child.stop() }

    /// Its output so far: one line per request ("POST /v1/push 200 1.2 ms caller=ana").
    var log: String { child.log }

    /// How many requests it answered with `status`.
    func answers(_ status: Int, to route: String = "") -> Int {
        log.split(separator: "\n").filter { $0.hasPrefix(route.isEmpty ? "" : route) && $0.contains(" \(status) ") && $0.contains(" ms") }
            .count
    }

    /// One request over a plain socket, on a thread of its own: the answer's exact bytes.
    func send(_ method: String, _ path: String, body: [UInt8] = [], user: String = "ana") async throws -> RawHTTPConnection.Response {
        let port = port
        return try await onNewThread {
            let connection = try RawHTTPConnection(port: port)
            defer { connection.close() }
            var head =
                "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nX-API-Key: \(MultiServer.apiKey)\r\n"
                + "Authorization: Bearer \(user)\r\nConnection: close\r\n"
            if method == "POST" { head += "Content-Type: application/json\r\nContent-Length: \(body.count)\r\n" }
            try connection.send(head + "\r\n")
            try connection.send(body)
            return try connection.readResponse()
        }
    }
}

/// A failure of the test's own machinery.
struct Failure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// What the clients were told by the servers, across all of them: the versions every applied
/// change was acknowledged with, and whatever looked wrong on the way.
final class Acknowledgements: Sendable {
    private let versions = Locked<[DocumentKey: Set<Version>]>([:])
    private let wrong = Locked<[String]>([])
    /// Pushes answered (200).
    let answered = SharedCounter()
    /// Pushes that failed (no connection, 5xx): the SDK keeps the batch and sends it again.
    let failed = SharedCounter()
    /// Pushes sent again, by the test, to other server processes.
    let resent = SharedCounter()

    /// Records a push's answer: each applied change with its version.
    func record(body: [UInt8], answer: PushResponse) {
        guard let request = try? PushRequest(body: body) else { return problem("a push body the test cannot read") }
        guard request.batch.changes.count == answer.results.count else {
            return problem(
                "batch \(request.batch.sequence) of \(request.batch.clientID): \(answer.results.count) results for \(request.batch.changes.count) changes"
            )
        }
        for (change, result) in zip(request.batch.changes, answer.results) {
            guard case .applied(let version, _, _) = result else {
                problem("\(change.key) was not applied: \(result)")
                continue
            }
            versions.update { _ = $0[change.key, default: []].insert(version) }
        }
    }

    func problem(_ text: String) { wrong.update { $0.append(text) } }

    /// Every version each document was acknowledged with.
    var byDocument: [DocumentKey: Set<Version>] { versions.value }
    /// What looked wrong.
    var problems: [String] { wrong.value }
}

/// The SDK's HTTP transport, watched: every push answer is recorded, and every `resendEvery`-th
/// answered batch is sent again, as is, to each of the other server processes, whose answers
/// must be the first answer byte for byte (a batch is applied once, whichever process gets it).
final class WatchedTransport: SyncTransport {
    let inner: HTTPTransport
    let acknowledgements: Acknowledgements
    let others: [ServerProcess]
    let resendEvery: Int
    private let pushes = SharedCounter()

    init(_ inner: HTTPTransport, acknowledgements: Acknowledgements, others: [ServerProcess], resendEvery: Int) {
        self.inner = inner
        self.acknowledgements = acknowledgements
        self.others = others
        self.resendEvery = resendEvery
    }

    func push(body: [UInt8], pullCursor: String?) async throws(TransportFailure) -> PushResponse {
        let answer: PushResponse
        do throws(TransportFailure) {
            answer = try await inner.push(body: body, pullCursor: pullCursor)
        } catch {
            acknowledgements.failed.increment()
            throw error
        }
        acknowledgements.answered.increment()
        acknowledgements.record(body: body, answer: answer)
        pushes.increment()
        // The engine sends this client's next batch only after this returns: the batch is still
        // the client's last, whose answer the database keeps.
        if resendEvery > 0, pushes.value % resendEvery == 0 { await resend(body, answered: answer) }
        return answer
    }

    private func resend(_ body: [UInt8], answered answer: PushResponse) async {
        acknowledgements.resent.increment()
        for other in others {
            do {
                let again = try await other.send("POST", "/v1/push", body: body)
                // The stored answer, byte for byte: the first one without its cursor.
                if again.status != 200 || again.body != PushResponse(results: answer.results).body {
                    acknowledgements.problem(
                        "a batch sent again to port \(other.port) was answered \(again.status) "
                            + "\(String(decoding: again.body, as: UTF8.self).prefix(300)), not \(String(decoding: answer.body, as: UTF8.self).prefix(300))"
                    )
                }
            } catch {
                acknowledgements.problem("sending a batch again to port \(other.port) failed: \(error)")
            }
        }
    }

    func pull(cursor: String?, limit: Int, scope: SyncScope?) async throws(TransportFailure) -> PullResponse {
        try await inner.pull(cursor: cursor, limit: limit, scope: scope)
    }

    func document(_ key: DocumentKey) async throws(TransportFailure) -> ServerDocument? {
        try await inner.document(key)
    }

    func isReachable() async -> Bool { await inner.isReachable() }
}

/// One device: an SDK instance on its own store, against one server process, all as user "ana"
/// (so every device may write the shared carts under the default owner-only rules).
struct MultiClient: Sendable {
    let name: String
    let sync: AbrovaSync

    init(
        name: String, server: ServerProcess, others: [ServerProcess], folder: TemporaryFolder,
        acknowledgements: Acknowledgements, resendEvery: Int
    ) throws {
        let url = server.url
        let config = try AbrovaSyncConfigBuilder(apiKey: MultiServer.apiKey)
            .serverURL(url)
            .storePath(folder.path("\(name).sqlite"))
            .authToken("ana")
            .conflictStrategy(.merge, for: "carts")
            .retryPolicy(RetryPolicy(initialDelay: .milliseconds(20), maximumDelay: .milliseconds(200)))
            .transport { token in
                WatchedTransport(
                    HTTPTransport(serverURL: url, apiKey: MultiServer.apiKey, token: token, timeout: .seconds(20)),
                    acknowledgements: acknowledgements, others: others, resendEvery: resendEvery)
            }
            .build()
        sync = try AbrovaSync(config: config)
        self.name = name
    }

    /// Every document on the device, of the collections the test writes, and those of them with
    /// writes not yet confirmed.
    func documents() async throws -> (documents: [DocumentKey: Value], pending: Set<DocumentKey>) {
        var documents: [DocumentKey: Value] = [:]
        var pending: Set<DocumentKey> = []
        for collection in MultiServer.collections {
            for snapshot in try await sync.collection(collection).getDocuments() {
                documents[snapshot.key] = snapshot.data
                if snapshot.metadata.hasPendingWrites { pending.insert(snapshot.key) }
            }
        }
        return (documents, pending)
    }
}

/// What one client wrote, so that the end state can be predicted: its own notes (each written
/// once), the elements it added to and removed from the carts' item sets, and the last value of
/// its own quantity field in each cart.
struct WriteLog: Sendable {
    var notes: [String: Int64] = [:]
    var added: Set<String> = []
    var removed: Set<String> = []
    var quantities: [String: Int64] = [:] // cart id → the client's last quantity
}

/// The workload and the checks both tests share.
enum MultiServer {
    static let apiKey = "multi-key"
    static let collections = ["notes", "carts"]
    static let carts = ["cart-0", "cart-1"]

    /// Writes until `stop` is set: each iteration a new note of its own; every second one an
    /// element added to a cart's item set (an observed-remove set, merged across clients) with the
    /// client's own quantity field; every sixth, from the fifth, the element it added two
    /// iterations before removed; a sync now and then. With `goesOffline`, the client disconnects
    /// for iterations 3 to 10 of every 12 (its writes queue) and reconnects: one batch then holds
    /// a cart twice or more, with a quantity written again and an element added and removed.
    ///
    /// It goes on past `stop` until it made `minimumIterations` (on a loaded machine a few
    /// seconds may hold only a few).
    static func write(_ client: MultiClient, until stop: SharedFlag, goesOffline: Bool, minimumIterations: Int64 = 12) async throws
        -> WriteLog
    {
        var log = WriteLog()
        var iteration: Int64 = 0
        while !stop.value || iteration < minimumIterations {
            let id = "\(client.name)-\(iteration)"
            try await client.sync.collection("notes").document(id).setData(["by": .string(client.name), "n": .int(iteration)])
            log.notes[id] = iteration
            if iteration % 2 == 0 {
                let cart = carts[Int(iteration / 2) % carts.count]
                try await client.sync.collection("carts").document(cart)
                    .updateData(["items": .arrayUnion([.string(id)]), "qty.\(client.name)": .value(.int(iteration))])
                log.added.insert(id)
                log.quantities[cart] = iteration
            }
            if iteration % 6 == 4 {
                let earlier = iteration - 2
                let cart = carts[Int(earlier / 2) % carts.count]
                let element = "\(client.name)-\(earlier)"
                try await client.sync.collection("carts").document(cart).updateData(["items": .arrayRemove([.string(element)])])
                log.removed.insert(element)
            }
            if iteration % 5 == 0 { await client.sync.syncNow() }
            if goesOffline {
                if iteration % 12 == 3 { await client.sync.disconnect() }
                if iteration % 12 == 11 { await client.sync.reconnect() }
            }
            iteration += 1
            // Paced, so that a client offline (whose writes return at once) queues tens of
            // writes a second rather than thousands.
            try await Task.sleep(for: .milliseconds(25))
        }
        if goesOffline { await client.sync.reconnect() }
        return log
    }

    /// The first client makes the carts; every client syncs until it has them.
    static func makeCarts(_ clients: [MultiClient]) async throws {
        for cart in carts {
            try await clients[0].sync.collection("carts").document(cart).setData(["name": .string(cart), "qty": .map([:])])
        }
        let ready = await withTaskGroup(of: Bool.self) { group in
            for client in clients {
                group.addTask {
                    await eventually(20) {
                        await client.sync.syncNow()
                        let have =
                            (try? await client.sync.collection("carts").getDocuments().filter { !$0.metadata.hasPendingWrites }.count) ?? 0
                        return have == carts.count
                    }
                }
            }
            return await group.allSatisfy { $0 }
        }
        guard ready else { throw Failure("a client did not get the carts") }
    }

    /// The database's documents, read directly (another "process" on it).
    static func database(_ url: String) async throws -> [DocumentKey: StoredDocument] {
        try await onNewThread {
            let store = try PostgresServerStore(url: url, maximumConnections: 1)
            let rows = try store.changes(after: .zero, limit: 1_000_000, collections: nil)
            return Dictionary(rows.map { ($0.key, $0) }, uniquingKeysWith: { _, last in last })
        }
    }

    /// Syncs every client until all have sent everything and each holds the database's documents.
    /// Returns what was left different, for the report (empty when everything converged).
    static func converge(_ clients: [MultiClient], databaseURL: String, within seconds: Double = 30) async throws -> [String] {
        var differences: [String] = []
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1_000))
        repeat {
            await withTaskGroup(of: Void.self) { group in
                for client in clients { group.addTask { await client.sync.syncNow() } }
            }
            // A second round: every client pulls what the others pushed in the first.
            for client in clients { await client.sync.syncNow() }
            let stored = try await database(databaseURL)
            let expected = stored.compactMapValues { $0.state.document }
            differences = []
            for client in clients {
                let pending = await client.sync.pendingCount
                if pending != 0 { differences.append("\(client.name) has \(pending) writes pending") }
                let (documents, unconfirmed) = try await client.documents()
                if !unconfirmed.isEmpty { differences.append("\(client.name) shows \(unconfirmed.count) documents with pending writes") }
                if documents != expected {
                    let keys = Set(documents.keys).union(expected.keys).filter { documents[$0] != expected[$0] }.sorted()
                    differences.append(
                        "\(client.name) differs from the database on \(keys.count) documents, first "
                            + "\(keys.first.map { "\($0): device \(String(describing: documents[$0])) database \(String(describing: expected[$0]))" } ?? "")"
                    )
                }
            }
            if differences.isEmpty { return [] }
            try await Task.sleep(for: .milliseconds(50))
        } while ContinuousClock.now < deadline
        return differences
    }

    /// What the database must hold after the clients' writes, and how each acknowledgement must
    /// show in it. Returns every mismatch.
    static func check(
        _ logs: [String: WriteLog], database stored: [DocumentKey: StoredDocument],
        acknowledgements: Acknowledgements
    ) -> [String] {
        var mismatches: [String] = []
        let acknowledged = acknowledgements.byDocument
        // Notes: each written once, by one client, so applied once: at the version it was
        // acknowledged with. A batch applied twice (a retry or a resend not recognised) would
        // have moved it to a later version, or given it two acknowledged versions.
        var expectedNotes: Set<String> = []
        for (name, log) in logs {
            for (id, n) in log.notes {
                expectedNotes.insert(id)
                let key = DocumentKey(collection: "notes", id: id)
                guard let document = stored[key] else {
                    mismatches.append("note \(id) is not in the database")
                    continue
                }
                if document.state.document != .map(["by": .string(name), "n": .int(n)]) {
                    mismatches.append("note \(id) holds \(String(describing: document.state.document))")
                }
                let versions = acknowledged[key] ?? []
                if versions != [document.version] {
                    mismatches.append("note \(id) is at version \(document.version) but was acknowledged with \(versions.sorted())")
                }
            }
        }
        let storedNotes = Set(stored.keys.filter { $0.collection == "notes" }.map(\.id))
        if storedNotes != expectedNotes {
            mismatches.append("notes nobody wrote: \(storedNotes.subtracting(expectedNotes).sorted().prefix(5))")
        }
        // Carts: every element added and not removed by its client, every client's last quantity.
        var items: Set<String> = []
        for log in logs.values { items.formUnion(log.added.subtracting(log.removed)) }
        var storedItems: Set<String> = []
        for cart in carts {
            let key = DocumentKey(collection: "carts", id: cart)
            guard let fields = stored[key]?.state.document?.mapValue else {
                mismatches.append("\(cart) is not in the database")
                continue
            }
            let elements = fields["items"]?.arrayValue?.compactMap(\.stringValue) ?? []
            if Set(elements).count != elements.count { mismatches.append("\(cart) holds an element twice: \(elements)") }
            storedItems.formUnion(elements)
            let quantities = fields["qty"]?.mapValue ?? [:]
            for (name, log) in logs where quantities[name]?.intValue != log.quantities[cart] {
                mismatches.append(
                    "\(cart).qty.\(name) is \(String(describing: quantities[name])), the client last wrote \(String(describing: log.quantities[cart]))"
                )
            }
            if !(acknowledged[key] ?? []).contains(stored[key]!.version) {
                mismatches.append("\(cart) is at version \(stored[key]!.version), which no client was told of")
            }
        }
        if storedItems != items {
            mismatches.append(
                "cart items missing: \(items.subtracting(storedItems).sorted().prefix(5)); "
                    + "not expected: \(storedItems.subtracting(items).sorted().prefix(5))")
        }
        // Versions are unique: no two acknowledged changes share one.
        let all = acknowledged.values.flatMap { $0 }
        if Set(all).count != all.count { mismatches.append("two acknowledged changes share a version") }
        return mismatches + acknowledgements.problems
    }
}
