import AbrovaCore
import AbrovaHTTP
import AbrovaSQLite
import AbrovaServer
import AbrovaSync
import AbrovaTestSupport
import Foundation

/// Seed 001's "queue 2,000 operations offline" as a shopping-cart workload on two devices: adds,
/// quantity changes and removes of 200 items in 20 carts, queued offline on device 1, pushed when it
/// comes back, then pulled on device 2. Ours goes through the real SDK (`AbrovaSync`, its
/// HTTP transport: libcurl on Linux) to the project's server on loopback; the baseline is seed 001's naive
/// outbox: a local outbox table, one uncompressed JSON request per operation with an
/// `Idempotency-Key` carrying the cart as it is after the operation (the tutorial's `payload`), and
/// pulls of rows by a `seq` cursor. Both talk through a byte-counting proxy (`FaultProxy` with no
/// fault), so the bytes are the request and answer bytes as sent, HTTP heads included.
///
/// Then both SDK devices go offline once more and edit the same carts at once (device 1 removes an
/// item and changes a quantity in each; device 2 adds gift wrap and a note to each), sync, and must
/// end with equal carts holding exactly what the model says.
struct CartWorkloadBenchmarks {
    let options: BenchmarkOptions
    static let carts = 20
    static let items = 200
    static let user = "ana"

    func run(adding earlier: BenchmarkReport) async -> BenchmarkReport {
        var report = earlier
        print("## cart workload")
        do {
            try await measure(into: &report)
        } catch {
            print("cart workload failed: \(error)")
            report.add(
                BenchmarkRow(
                    name: "cart workload: failed", figure: "\(error)", baseline: "-", ratio: 0, goal: "runs",
                    isGoalMet: false))
        }
        return report
    }

    // MARK: - The workload

    /// One app write to a cart.
    enum Operation {
        case add(cart: Int, item: Int, quantity: Int)
        case setQuantity(cart: Int, item: Int, quantity: Int)
        case remove(cart: Int, item: Int)

        var cart: Int {
            switch self {
            case .add(let cart, _, _), .setQuantity(let cart, _, _), .remove(let cart, _): cart
            }
        }
    }

    /// A cart as the workload leaves it: item → quantity, plus what the merge round adds.
    struct Cart: Equatable {
        var quantities: [String: Int64] = [:]
        var note: String?

        /// The cart as a document: `{"items": set of item ids, "note"?, "owner", "qty": {item: n}}`
        /// (sets read back as sorted arrays). An empty set or map reads back the same as a missing one.
        init(document: Value?) throws {
            guard let fields = document?.mapValue else { throw BenchmarkFailure("a cart is missing") }
            let items = Set((fields["items"]?.arrayValue ?? []).compactMap(\.stringValue))
            for (item, quantity) in fields["qty"]?.mapValue ?? [:] {
                guard let quantity = quantity.intValue else { throw BenchmarkFailure("qty.\(item) is not a number") }
                quantities[item] = quantity
            }
            guard Set(quantities.keys) == items else {
                throw BenchmarkFailure("a cart's items \(items.sorted()) do not match its quantities \(quantities.keys.sorted())")
            }
            note = fields["note"]?.stringValue
        }

        init() {}

        /// The cart as the naive outbox sends it whole: canonical JSON.
        var json: String {
            var fields: [String: Value] = ["owner": .string(CartWorkloadBenchmarks.user)]
            if !quantities.isEmpty {
                fields["items"] = .array(quantities.keys.sorted().map(Value.string))
                fields["qty"] = .map(quantities.mapValues(Value.int))
            }
            if let note { fields["note"] = .string(note) }
            return Value.map(fields).canonicalJSON
        }
    }

    static func cartID(_ cart: Int) -> String { String(format: "cart%02d", cart) }
    static func itemID(_ item: Int) -> String { String(format: "sku%03d", item) }

    /// `count` operations from a seeded generator, and the carts they leave: about 35% adds (of an
    /// item not in the cart), 45% quantity changes and 20% removes, each of a random cart.
    static func workload(count: Int) -> (operations: [Operation], carts: [Cart]) {
        var generator = SplitMix64(seed: 2_000)
        var carts = Array(repeating: Cart(), count: Self.carts)
        var operations: [Operation] = []
        for _ in 0..<count {
            let cart = Int(generator.next() % UInt64(Self.carts))
            let present = carts[cart].quantities.keys.sorted()
            let roll = generator.next() % 100
            if present.isEmpty || (roll < 35 && present.count < Self.items) {
                var item = Int(generator.next() % UInt64(Self.items))
                while carts[cart].quantities[itemID(item)] != nil { item = (item + 1) % Self.items }
                let quantity = Int(generator.next() % 5) + 1
                carts[cart].quantities[itemID(item)] = Int64(quantity)
                operations.append(.add(cart: cart, item: item, quantity: quantity))
            } else {
                let id = present[Int(generator.next() % UInt64(present.count))]
                let item = Int(id.dropFirst(3))!
                if roll < 80 {
                    let quantity = Int((UInt64(carts[cart].quantities[id]!) + generator.next() % 8) % 9) + 1
                    carts[cart].quantities[id] = Int64(quantity)
                    operations.append(.setQuantity(cart: cart, item: item, quantity: quantity))
                } else {
                    carts[cart].quantities[id] = nil
                    operations.append(.remove(cart: cart, item: item))
                }
            }
        }
        return (operations, carts)
    }

    // MARK: - The measurement

    private struct Figures {
        var pushTime: Duration
        var pullTime: Duration
        var pushBytes: FaultProxy.ForwardedBytes
        var pullBytes: FaultProxy.ForwardedBytes
        /// The process's processor time in each sync run (seconds): both devices, the server and
        /// the proxy.
        var pushProcessor: Double = 0
        var pullProcessor: Double = 0
        var total: Duration { pushTime + pullTime }
        var bytes: Int { pushBytes.total + pullBytes.total }
    }

    private func measure(into report: inout BenchmarkReport) async throws {
        let count = options.isQuick ? 500 : 2_000
        let (operations, carts) = Self.workload(count: count)
        let adds = operations.filter { if case .add = $0 { true } else { false } }.count
        let removes = operations.filter { if case .remove = $0 { true } else { false } }.count
        print("")
        print(
            "\(count) operations (\(adds) adds, \(count - adds - removes) quantity changes, \(removes) removes) over \(Self.items) items in "
                + "\(Self.carts) carts, queued offline on device 1, pushed, then pulled on device 2; bytes counted at a proxy:")
        var ours: [Figures] = []
        var baseline: [Figures] = []
        var merges: [Bool] = []
        for _ in 0..<(options.isQuick ? 1 : 3) {
            baseline.append(try await onNewThread { try Self.measureBaseline(operations: operations, carts: carts) })
            let (figures, isMergeCorrect) = try await measureOurs(operations: operations, carts: carts)
            ours.append(figures)
            merges.append(isMergeCorrect)
        }
        func middle(_ values: [Figures], _ key: (Figures) -> Double) -> Double { median(values.map(key)) }
        let oursBytes = middle(ours) { Double($0.bytes) }
        let baselineBytes = middle(baseline) { Double($0.bytes) }
        let oursTotal = middle(ours) { seconds($0.total) }
        let baselineTotal = middle(baseline) { seconds($0.total) }
        let oursPush = middle(ours) { seconds($0.pushTime) }
        let baselinePush = middle(baseline) { seconds($0.pushTime) }
        let oursPull = middle(ours) { seconds($0.pullTime) }
        let baselinePull = middle(baseline) { seconds($0.pullTime) }
        for (name, figures) in [("ours", ours), ("baseline", baseline)] {
            for figure in figures {
                print(
                    String(
                        format: "  %@: push %.0f ms (%d B up, %d B down), pull %.1f ms (%d B up, %d B down)", name,
                        seconds(figure.pushTime) * 1e3, figure.pushBytes.towardServer, figure.pushBytes.towardClients,
                        seconds(figure.pullTime) * 1e3, figure.pullBytes.towardServer, figure.pullBytes.towardClients))
            }
        }
        let label = "\(count) cart operations, 2 devices"
        report.add(
            BenchmarkRow(
                name: "cart workload: bytes on the wire, push on device 1 + pull on device 2 (\(label))",
                figure: Self.formatBytes(oursBytes), baseline: Self.formatBytes(baselineBytes) + " (naive outbox: a JSON request each)",
                ratio: oursBytes / baselineBytes, goal: "≤ 10 kB (Yrs ≈ 13.7 kB, Loro ≈ 15 kB: Docs/BENCHMARKS.md)",
                isGoalMet: oursBytes <= 10_000))
        // Each part of the total against its own goal (the peers' figures are bodies alone).
        let parts: [(name: String, ours: Double, baseline: Double, goal: Double)] = [
            (
                "push: device 1's requests, bodies and heads", middle(ours) { Double($0.pushBytes.towardServer) },
                middle(baseline) { Double($0.pushBytes.towardServer) }, 5_000
            ),
            (
                "device 1's download in its push run (the push's answer, and a pull if the run makes one)",
                middle(ours) { Double($0.pushBytes.towardClients) },
                middle(baseline) { Double($0.pushBytes.towardClients) }, 500
            ),
            (
                "device 2's download (its pull), heads included", middle(ours) { Double($0.pullBytes.towardClients) },
                middle(baseline) { Double($0.pullBytes.towardClients) }, 3_000
            ),
        ]
        for part in parts {
            report.add(
                BenchmarkRow(
                    name: "cart workload: bytes, \(part.name)", figure: Self.formatBytes(part.ours),
                    baseline: Self.formatBytes(part.baseline) + " naive outbox", ratio: part.ours / part.baseline,
                    goal: "≤ " + Self.formatBytes(part.goal), isGoalMet: part.ours <= part.goal))
        }
        report.add(
            BenchmarkRow(
                name: "cart workload: time, push on device 1 + pull on device 2 (\(label))",
                figure: String(format: "%.0f ms", oursTotal * 1e3), baseline: String(format: "%.0f ms naive outbox", baselineTotal * 1e3),
                ratio: baselineTotal / oursTotal, goal: "≥ 30× (speed)", isGoalMet: baselineTotal / oursTotal >= 30))
        let processorPerOperation = middle(ours) { $0.pushProcessor + $0.pullProcessor } / Double(count) * 1e6
        report.add(
            BenchmarkRow(
                name: "cart workload: processor time per cart operation, push and pull (devices, server and proxy: one process)",
                figure: String(
                    format: "%.1f µs (push %.1f, pull %.1f)", processorPerOperation,
                    middle(ours) { $0.pushProcessor } / Double(count) * 1e6, middle(ours) { $0.pullProcessor } / Double(count) * 1e6),
                baseline: "-", ratio: processorPerOperation / 10,
                goal: "≤ 10 µs", isGoalMet: processorPerOperation <= 10))
        report.add(
            BenchmarkRow(
                name: "cart workload: push on device 1 alone (one sync run: the push, and a pull unless its answer carried the cursor)",
                figure: String(format: "%.0f ms", oursPush * 1e3),
                baseline: String(format: "%.0f ms, %d requests", baselinePush * 1e3, count),
                ratio: baselinePush / oursPush, goal: "reported (speed)", isGoalMet: nil))
        report.add(
            BenchmarkRow(
                name: "cart workload: pull on device 2 alone (\(Self.carts) carts)",
                figure: String(format: "%.1f ms", oursPull * 1e3), baseline: String(format: "%.1f ms by seq cursor", baselinePull * 1e3),
                ratio: baselinePull / oursPull, goal: "reported (speed)", isGoalMet: nil))
        let merged = merges.filter { $0 }.count
        report.add(
            BenchmarkRow(
                name: "cart workload: both devices end equal and as the model says, after concurrent offline edits",
                figure: "\(merged) of \(merges.count) runs", baseline: "-", ratio: Double(merged) / Double(merges.count),
                goal: "every run", isGoalMet: merged == merges.count))
    }

    static func formatBytes(_ bytes: Double) -> String {
        bytes >= 1e6 ? String(format: "%.2f MB", bytes / 1e6) : String(format: "%.1f kB", bytes / 1e3)
    }

    // MARK: - Ours: the SDK

    /// The SDK on two devices against our server on a fresh SQLite database; returns the figures
    /// and whether the merge round ended as the model says.
    private func measureOurs(operations: [Operation], carts expected: [Cart]) async throws -> (Figures, Bool) {
        let folder = TemporaryFolder()
        let server = try await onNewThread { try BenchmarkSyncServer(store: try SQLiteServerStore(path: folder.path("server.sqlite"))) }
        let proxy = try FaultProxy(upstreamPort: server.port)
        var devices: [AbrovaSync] = []
        func device(_ name: String) throws -> AbrovaSync {
            let sync = try AbrovaSync(
                config: try AbrovaSyncConfigBuilder(apiKey: "bench")
                    .serverURL(URL(string: "http://127.0.0.1:\(proxy.port)")!)
                    .storePath(folder.path("\(name).sqlite"))
                    .authToken(Self.user)
                    .conflictStrategy(.merge)
                    .syncOnReconnect(false)
                    .build())
            devices.append(sync)
            return sync
        }
        do {
            let first = try device("device-1")
            let second = try device("device-2")
            // Device 1 creates the empty carts; device 2 pulls them. Then both go offline.
            await first.syncNow()
            await second.syncNow()
            await first.disconnect()
            for cart in 0..<Self.carts {
                try await first.collection("carts").document(Self.cartID(cart)).setData(["owner": .string(Self.user)])
            }
            await first.reconnect()
            await first.syncNow()
            await second.syncNow()
            await first.disconnect()
            await second.disconnect()

            for operation in operations { try await Self.write(operation, on: first) }
            guard await first.pendingCount == operations.count else {
                throw BenchmarkFailure("device 1 queued \(await first.pendingCount) of \(operations.count) writes")
            }

            let (pushTime, pushProcessor, pushBytes) = await Self.reconnectAndSync(first, through: proxy)
            guard await first.pendingCount == 0 else {
                throw BenchmarkFailure("device 1 still has \(await first.pendingCount) writes queued")
            }
            let (pullTime, pullProcessor, pullBytes) = await Self.reconnectAndSync(second, through: proxy)

            for (number, device) in [first, second].enumerated() {
                let found = try await Self.carts(on: device)
                guard found == expected else {
                    throw BenchmarkFailure("device \(number + 1)'s carts are not the workload's after the sync")
                }
            }
            let isMergeCorrect = try await mergeRound(first, second, carts: expected)
            for device in devices { await device.close() }
            proxy.stop()
            server.stop()
            return (
                Figures(
                    pushTime: pushTime, pullTime: pullTime, pushBytes: pushBytes, pullBytes: pullBytes, pushProcessor: pushProcessor,
                    pullProcessor: pullProcessor),
                isMergeCorrect
            )
        } catch {
            for device in devices { await device.close() }
            proxy.stop()
            server.stop()
            throw error
        }
    }

    /// Reconnects `device` and times one sync run (push, then pull), with the processor time the
    /// process spent meanwhile and the bytes it moved through `proxy`.
    private static func reconnectAndSync(_ device: AbrovaSync, through proxy: FaultProxy) async -> (
        Duration, processor: Double, FaultProxy.ForwardedBytes
    ) {
        await device.reconnect()
        let before = proxy.forwardedBytes
        let start = ContinuousClock.now
        let processorBefore = processorSeconds()
        await device.syncNow()
        let processor = processorSeconds() - processorBefore
        let time = ContinuousClock.now - start
        return (time, processor, await settledBytes(proxy, since: before))
    }

    /// The write `operation` makes through the SDK, as an app would make it.
    private static func write(_ operation: Operation, on device: AbrovaSync) async throws {
        let cart = device.collection("carts").document(cartID(operation.cart))
        switch operation {
        case .add(_, let item, let quantity):
            try await cart.updateData(["items": .arrayUnion([.string(itemID(item))]), "qty.\(itemID(item))": .value(.int(Int64(quantity)))])
        case .setQuantity(_, let item, let quantity):
            try await cart.updateData(["qty.\(itemID(item))": .value(.int(Int64(quantity)))])
        case .remove(_, let item):
            try await cart.updateData(["items": .arrayRemove([.string(itemID(item))]), "qty.\(itemID(item))": .delete()])
        }
    }

    /// The bytes forwarded since `earlier`, once the proxy has counted the last answer (it counts
    /// a chunk after handing it on, so the client may have it a moment before).
    private static func settledBytes(_ proxy: FaultProxy, since earlier: FaultProxy.ForwardedBytes) async -> FaultProxy.ForwardedBytes {
        try? await Task.sleep(for: .milliseconds(50))
        return proxy.forwardedBytes.since(earlier)
    }

    private static func carts(on device: AbrovaSync) async throws -> [Cart] {
        var carts: [Cart] = []
        for cart in 0..<Self.carts {
            carts.append(try Cart(document: try await device.collection("carts").document(cartID(cart)).getDocument(source: .cache).data))
        }
        return carts
    }

    /// Both devices offline edit every cart at once: device 1 removes its first item and changes
    /// its last item's quantity; device 2 adds gift wrap (an item) and a note. Under merge both
    /// survive. Returns whether both devices end with the model's carts.
    private func mergeRound(_ first: AbrovaSync, _ second: AbrovaSync, carts: [Cart]) async throws -> Bool {
        var expected = carts
        await first.disconnect()
        await second.disconnect()
        for cart in 0..<Self.carts {
            let reference = first.collection("carts").document(Self.cartID(cart))
            let present = carts[cart].quantities.keys.sorted()
            if let removed = present.first {
                try await reference.updateData(["items": .arrayRemove([.string(removed)]), "qty.\(removed)": .delete()])
                expected[cart].quantities[removed] = nil
            }
            if present.count >= 2, let changed = present.last {
                let quantity = (carts[cart].quantities[changed] ?? 0) + 10
                try await reference.updateData(["qty.\(changed)": .value(.int(quantity))])
                expected[cart].quantities[changed] = quantity
            }
            try await second.collection("carts").document(Self.cartID(cart))
                .updateData(["items": .arrayUnion(["giftwrap"]), "qty.giftwrap": 1, "note": "leave at the door"])
            expected[cart].quantities["giftwrap"] = 1
            expected[cart].note = "leave at the door"
        }
        await first.reconnect()
        await second.reconnect()
        await first.syncNow()
        await second.syncNow()
        await first.syncNow()
        let onFirst = try await Self.carts(on: first)
        let onSecond = try await Self.carts(on: second)
        let isCorrect = onFirst == onSecond && onFirst == expected
        print(
            "  merge round: device 1 removed an item and changed a quantity in every cart while device 2 added gift wrap and a note; "
                + (isCorrect
                    ? "both devices hold the same \(Self.carts) carts, as expected"
                    : "THE DEVICES DISAGREE OR DIFFER FROM THE MODEL (\(zip(onFirst, expected).filter { $0 != $1 }.count) carts differ on device 1, "
                        + "\(zip(onSecond, expected).filter { $0 != $1 }.count) on device 2)"))
        return isCorrect
    }

    // MARK: - The baseline: seed 001's naive outbox

    /// The naive outbox on two devices against the baseline server on a fresh SQLite database.
    private static func measureBaseline(operations: [Operation], carts expected: [Cart]) throws -> Figures {
        let folder = TemporaryFolder()
        let server = try BaselineServer(path: folder.path("baseline.sqlite"), threads: 8)
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.server?.port ?? 0)
        defer { proxy.stop() }
        let empty = Cart().json
        // Both devices have the 20 empty carts at version 1, as after a first sync.
        try server.preload((0..<Self.carts).map { (cartID($0), empty) })
        let first = try NaiveOutboxDevice(path: folder.path("device-1.sqlite"))
        let second = try NaiveOutboxDevice(path: folder.path("device-2.sqlite"))
        for device in [first, second] {
            try device.database.write { database in
                for cart in 0..<Self.carts {
                    try database.run("INSERT INTO notes (id, body, version) VALUES (?, ?, 1)", [.text(cartID(cart)), .text(empty)])
                }
                try database.run("INSERT INTO meta (key, value) VALUES ('cursor', ?)", [.integer(Int64(Self.carts))])
            }
        }
        var carts = Array(repeating: Cart(), count: Self.carts)
        for operation in operations {
            switch operation {
            case .add(let cart, let item, let quantity), .setQuantity(let cart, let item, let quantity):
                carts[cart].quantities[itemID(item)] = Int64(quantity)
            case .remove(let cart, let item):
                carts[cart].quantities[itemID(item)] = nil
            }
            try first.queue(id: cartID(operation.cart), body: carts[operation.cart].json)
        }

        let clock = ContinuousClock()
        let connection = try RawHTTPConnection(port: proxy.port)
        let beforePush = proxy.forwardedBytes
        let pushTime = try clock.measure { try first.pushAll(on: connection, port: proxy.port) }
        Thread.sleep(forTimeInterval: 0.05)
        let pushBytes = proxy.forwardedBytes.since(beforePush)
        let secondConnection = try RawHTTPConnection(port: proxy.port)
        let beforePull = proxy.forwardedBytes
        let pullTime = try clock.measure { try second.pullAll(on: secondConnection, port: proxy.port) }
        Thread.sleep(forTimeInterval: 0.05)
        let pullBytes = proxy.forwardedBytes.since(beforePull)
        for (number, device) in [first, second].enumerated() {
            guard try device.carts() == expected else {
                throw BenchmarkFailure("baseline device \(number + 1)'s carts are not the workload's")
            }
        }
        return Figures(pushTime: pushTime, pullTime: pullTime, pushBytes: pushBytes, pullBytes: pullBytes)
    }
}

/// A device of seed 001's design: the local table is the source of truth, every change commits
/// with an outbox row (steps 1 and 2), the outbox is sent oldest first, one request each with its
/// `Idempotency-Key`, and a row leaves the outbox only once the server confirmed it (step 3); pulls
/// apply pages of rows after a `seq` cursor, each page with its cursor in one transaction (step 5).
/// The base version of an operation is the one the device knows when it sends it (the server's
/// answer to the previous operation on that row), so that queued edits of one row do not conflict
/// with each other.
final class NaiveOutboxDevice {
    let database: Database

    init(path: String) throws {
        database = try Database(path: path, isExclusive: true)
        try database.execute(
            """
            CREATE TABLE notes (id TEXT PRIMARY KEY, body TEXT, version INTEGER NOT NULL DEFAULT 0, deleted INTEGER NOT NULL DEFAULT 0,
                                dirty INTEGER NOT NULL DEFAULT 0);
            CREATE TABLE outbox (position INTEGER PRIMARY KEY, op_id TEXT NOT NULL, entity_id TEXT NOT NULL, op TEXT NOT NULL, payload TEXT NOT NULL);
            CREATE TABLE meta (key TEXT PRIMARY KEY, value);
            """)
    }

    /// Step 2: the change and its outbox row in one transaction.
    func queue(id: String, body: String) throws {
        try database.write { database in
            try database.run("UPDATE notes SET body = ?, dirty = 1 WHERE id = ?", [.text(body), .text(id)])
            try database.run(
                "INSERT INTO outbox (op_id, entity_id, op, payload) VALUES (?, ?, 'upsert', ?)",
                [.text(UUID().uuidString.lowercased()), .text(id), .text(body)])
        }
    }

    /// Step 3: sends the outbox oldest first on `connection`, removing each operation once confirmed.
    func pushAll(on connection: RawHTTPConnection, port: UInt16) throws {
        while let (position, operationID, id, payload) = try database.queryFirst(
            "SELECT position, op_id, entity_id, payload FROM outbox ORDER BY position LIMIT 1", [],
            { row in
                (row.integer(0), row.text(1) ?? "", row.text(2) ?? "", row.text(3) ?? "")
            })
        {
            let base = try database.queryFirst("SELECT version FROM notes WHERE id = ?", [.text(id)]) { $0.integer(0) } ?? 0
            let body = Array(
                #"{"baseVersion":\#(base),"entityId":\#(Value.string(id).canonicalJSON),"op":"upsert","payload":\#(payload)}"#.utf8)
            let head =
                "POST /ops HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nContent-Type: application/json\r\nIdempotency-Key: \(operationID)\r\n"
                + "Content-Length: \(body.count)\r\n\r\n"
            try connection.send(Array(head.utf8) + body)
            let response = try connection.readResponse()
            guard response.status == 200, let version = try Value(json: response.body).mapValue?["version"]?.intValue else {
                throw BenchmarkFailure("the baseline answered \(response.status): \(String(decoding: response.body, as: UTF8.self))")
            }
            try database.write { database in
                try database.run("DELETE FROM outbox WHERE position = ?", [.integer(position)])
                let isLast = try database.queryFirst("SELECT 1 FROM outbox WHERE entity_id = ? LIMIT 1", [.text(id)]) { _ in true } == nil
                try database.run(
                    "UPDATE notes SET version = ?, dirty = ? WHERE id = ?", [.integer(version), .integer(isLast ? 0 : 1), .text(id)])
            }
        }
    }

    /// Step 5: pulls pages of 500 rows after the saved cursor until none is left.
    func pullAll(on connection: RawHTTPConnection, port: UInt16) throws {
        while true {
            let cursor = try database.queryFirst("SELECT value FROM meta WHERE key = 'cursor'") { $0.integer(0) } ?? 0
            try connection.send("GET /changes?after=\(cursor)&limit=500 HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n")
            let response = try connection.readResponse()
            guard response.status == 200, let rows = try Value(json: response.body).mapValue?["changes"]?.arrayValue else {
                throw BenchmarkFailure("the baseline answered \(response.status) to a pull")
            }
            if rows.isEmpty { return }
            try database.write { database in
                for row in rows {
                    guard let fields = row.mapValue, let id = fields["id"]?.stringValue, let version = fields["version"]?.intValue else {
                        continue
                    }
                    try database.run(
                        """
                        INSERT INTO notes (id, body, version, deleted) VALUES (?1, ?2, ?3, ?4)
                        ON CONFLICT (id) DO UPDATE SET body = ?2, version = ?3, deleted = ?4 WHERE dirty = 0
                        """,
                        [
                            .text(id), .text(fields["body"]?.canonicalJSON ?? "null"), .integer(version),
                            .integer(fields["deleted"] == .bool(true) ? 1 : 0),
                        ])
                }
                let last = rows.last?.mapValue?["seq"]?.intValue ?? cursor
                try database.run("UPDATE meta SET value = ? WHERE key = 'cursor'", [.integer(last)])
            }
        }
    }

    /// The carts this device holds, in order.
    func carts() throws -> [CartWorkloadBenchmarks.Cart] {
        try database.query("SELECT body FROM notes ORDER BY id") { row in
            try CartWorkloadBenchmarks.Cart(document: try Value(json: row.text(0) ?? "null"))
        }
    }
}

/// Our sync server in this process: the service on `store`, its routes, the HTTP server on a free
/// loopback port.
final class BenchmarkSyncServer: Sendable {
    let server: HTTPServer

    init(store: any ServerStore, threads: Int = 8) throws {
        let service = try SyncService(store: store)
        let handler = SyncHTTPHandler(service: service, authenticator: DevelopmentAuthenticator())
        server = try HTTPServer(
            configuration: HTTPServerConfiguration(port: 0, threadCount: threads, workerCount: threads, loopbackOnly: true)
        ) {
            handler.handle($0)
        }
    }

    var port: UInt16 { server.port }
    func stop() { server.shutdown() }
}
