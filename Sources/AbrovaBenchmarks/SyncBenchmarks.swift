import AbrovaCore
import AbrovaHTTP
import AbrovaLocking
import AbrovaSQLite
import AbrovaServer
import AbrovaStore
import AbrovaSync
import AbrovaTestSupport
import Foundation

/// The SDK end to end, against the real server on loopback HTTP: the initial sync of an empty
/// device (documents per second and the device's peak memory, measured in a process of its own
/// so that the server's memory is not counted), and how push and pull times grow with the work.
struct SyncBenchmarks {
    let options: BenchmarkOptions

    /// Initial syncs, in documents on the server. The first is only for the growth figure.
    private var sizes: [Int] { options.isQuick ? [1_000, 2_000, 10_000] : [1_000, 10_000, 100_000, 1_000_000] }
    /// Pending writes pushed, for the growth figure.
    private var pushSizes: [Int] { options.isQuick ? [500, 2_000, 5_000] : [1_000, 10_000, 100_000] }

    func run(adding earlier: BenchmarkReport) async -> BenchmarkReport {
        var report = earlier
        print("## sync")
        do {
            // The growth of pulls is read from the initial syncs.
            if options.runs("sync-initial") || options.runs("sync-growth-pull") { try measureInitialSync(into: &report) }
            if options.runs("sync-growth-push") { try await measurePushGrowth(into: &report) }
            if options.runs("sync-write-during-pull") { try await measureWriteDuringFirstSync(into: &report) }
            if options.runs("sync-live-listener") { try await measureLiveListener(into: &report) }
            if options.runs("sync-scope") { try measureScopedInitialSync(into: &report) }
        } catch {
            print("sync benchmarks failed: \(error)")
        }
        return report
    }

    // MARK: - Initial sync

    /// An empty device pulls every document of a server holding 1k, 10k, 100k and 1M of them (the
    /// server's store is filled directly, in large transactions), against plain rows pulled by seq
    /// cursor over the same HTTP server and inserted into an empty table: three alternating rounds
    /// up to 100k (medians compared), one at 1M. Goal: at least 0.8× their rate, the device's peak
    /// resident memory (the highest of the rounds) under 150 MB and flat across the sizes; and a
    /// store at most 1.3× the plain table's size at the largest.
    private func measureInitialSync(into report: inout BenchmarkReport) throws {
        let folder = TemporaryFolder()
        let store = try SQLiteServerStore(path: folder.path("server.sqlite"), durability: .normal)
        let server = try SyncServer(store: store)
        defer { server.stop() }
        let baseline = try BaselineServer(path: folder.path("baseline.sqlite"), threads: 8)
        defer { baseline.stop() }
        var seeded = 0
        var results: [(size: Int, device: DeviceResult, baselineRate: Double, baselineBytes: Int)] = []
        let clock = ContinuousClock()
        for size in sizes {
            let seeding = try clock.measure {
                try Self.seed(store, from: seeded, to: size)
                try baseline.preload(
                    (seeded..<size).map { ("i\($0)", Value.map(ServerBenchmarks.document($0)).canonicalJSON) },
                    firstSequence: Int64(seeded + 1))
            }
            seeded = size
            print("seeded \(size) documents in \(String(format: "%.1f", seconds(seeding))) s (both servers)")
            // Rounds alternate the device and the baseline, so that both see the machine's load
            // as it changes (this machine is shared); medians are compared.
            var devices: [DeviceResult] = []
            var baselines: [(rate: Double, storeBytes: Int)] = []
            for _ in 0..<(options.isQuick || size > 100_000 ? 1 : 3) {
                let device = try runDevice(port: server.port, expected: size, folder: folder)
                let plain = try baselinePull(port: baseline.server?.port ?? 0, expected: size, folder: folder)
                print(
                    String(
                        format:
                            "initial sync of %d: %.0f documents/s, peak %.1f MB (%.1f MB at start), %d progress reports; baseline %.0f rows/s",
                        size, device.rate, device.peakMB, device.startMB, device.progressReports, plain.rate))
                devices.append(device)
                baselines.append(plain)
            }
            var device = devices[0]
            device.rate = median(devices.map(\.rate))
            device.peakMB = devices.map(\.peakMB).max() ?? device.peakMB
            device.roundRatios = zip(devices, baselines).map { $0.rate / $1.rate }
            results.append((size, device, median(baselines.map(\.rate)), baselines[0].storeBytes))
        }
        let measured = results.filter { $0.size >= (options.isQuick ? 2_000 : 10_000) }
        let smallestPeak = measured.first?.device.peakMB ?? 0
        if options.runs("sync-initial") {
            for (size, device, baselineRate, _) in measured {
                let isFlat = device.peakMB <= smallestPeak * 1.25
                report.add(
                    BenchmarkRow(
                        name: "sync: initial sync of an empty device, \(size) documents (loopback HTTP, own process)",
                        figure: formatRate(device.rate, "documents")
                            + String(format: ", peak %.0f MB, %d progress reports", device.peakMB, device.progressReports)
                            + (device.roundRatios.count > 1
                                ? ", rounds " + device.roundRatios.map { String(format: "%.2f×", $0) }.joined(separator: " ") : ""),
                        baseline: formatRate(baselineRate, "rows by seq cursor into an empty table"),
                        ratio: device.rate / baselineRate,
                        goal: String(format: "≥ 0.8×, peak < 150 MB, ≤ 1.25× the smallest size's (%.0f MB)", smallestPeak),
                        isGoalMet: device.rate / baselineRate >= 0.8 && device.peakMB < 150 && isFlat))
            }
        }
        if options.runs("sync-initial"), let largest = results.last {
            let ratio = Double(largest.device.storeBytes) / Double(max(largest.baselineBytes, 1))
            report.add(
                BenchmarkRow(
                    name: "sync: device store size after the initial sync of \(largest.size) documents",
                    figure: String(format: "%.0f bytes a document", Double(largest.device.storeBytes) / Double(largest.size)),
                    baseline: String(
                        format: "%.0f bytes a document in a plain table (id, JSON body, version)",
                        Double(largest.baselineBytes) / Double(largest.size)),
                    ratio: ratio, goal: "≤ 1.3×", isGoalMet: ratio <= 1.3))
        }
        if options.runs("sync-growth-pull") {
            let growth = results.prefix(3).map { (items: $0.size, seconds: Double($0.size) / $0.device.rate) }
            report.add(growthRow(name: "sync: growth of an initial pull", unit: "document", growth))
        }
    }

    /// Partial sync: an empty device whose scope is one collection holding a tenth of a server's
    /// 100,000 documents (every tenth document is a cart, the rest orders) syncs once, against a
    /// device that syncs everything; time and bytes on the wire (through a counting proxy, heads
    /// included), three alternating rounds, medians. Reported.
    private func measureScopedInitialSync(into report: inout BenchmarkReport) throws {
        let size = options.isQuick ? 10_000 : 100_000
        let folder = TemporaryFolder()
        let store = try SQLiteServerStore(path: folder.path("server.sqlite"), durability: .normal)
        try Self.seed(store, from: 0, to: size) { $0 % 10 == 0 ? "carts" : "orders" }
        let server = try SyncServer(store: store)
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        // A tenth of the documents as a collection, and as two equality queries (`list` is
        // `list-<index % 20>`, and odd indexes are orders).
        let filtered = #"[{"collection":"orders","where":{"list":"list-1"}},{"collection":"orders","where":{"list":"list-3"}}]"#
        let scopes: [String?] = [nil, "carts", filtered]
        var measured: [String: [(seconds: Double, bytes: Int)]] = [:]
        for _ in 0..<(options.isQuick ? 1 : 3) {
            for scope in scopes {
                let before = proxy.forwardedBytes
                let expected = scope == nil ? size : size / 10
                let device = try runDevice(port: proxy.port, expected: expected, folder: folder, scope: scope)
                measured[scope ?? "", default: []].append(
                    (seconds: Double(expected) / device.rate, bytes: proxy.forwardedBytes.since(before).total))
            }
        }
        let wholeSeconds = median(measured[""]!.map(\.seconds))
        let wholeBytes = median(measured[""]!.map { Double($0.bytes) })
        for (scope, label) in [("carts", "a collection"), (filtered, "two equality queries")] {
            let seconds = median(measured[scope]!.map(\.seconds))
            let bytes = median(measured[scope]!.map { Double($0.bytes) })
            report.add(
                BenchmarkRow(
                    name: "sync: initial sync of a scope holding 10% of \(size) documents (\(label), loopback HTTP, own process)",
                    figure: String(format: "%.2f s, %.0f kB on the wire (%.2f× the bytes)", seconds, bytes / 1_000, bytes / wholeBytes),
                    baseline: String(format: "everything: %.2f s, %.0f kB", wholeSeconds, wholeBytes / 1_000),
                    ratio: seconds / wholeSeconds, goal: "reported (time and bytes against syncing everything)", isGoalMet: nil))
        }
    }

    /// Writes documents `start..<end` straight into the server's store, 50,000 a transaction, as
    /// pushes of creates by the device's user would leave them (the rules are owner-only), each in
    /// the collection `collection` names (`items` by default).
    private static func seed(
        _ store: SQLiteServerStore, from start: Int, to end: Int, collection: (Int) -> String = { _ in "items" }
    ) throws {
        let now = Date()
        for chunk in stride(from: start, to: end, by: 50_000) {
            try store.write { transaction in
                for index in chunk..<min(chunk + 50_000, end) {
                    let version = try transaction.nextVersion()
                    var state = DocumentState()
                    state.applyLocally(try DocumentDelta.create(ServerBenchmarks.document(index), base: .zero), at: version)
                    try transaction.saveDocument(
                        StoredDocument(
                            key: DocumentKey(collection: collection(index), id: "i\(index)"), owner: "reader",
                            version: version, state: state), at: now)
                }
            }
        }
    }

    struct DeviceResult {
        var rate: Double
        var peakMB: Double
        var startMB: Double
        var progressReports: Int
        /// The store file's size once its log is folded in.
        var storeBytes: Int
        /// Each round's rate over the baseline's in the same round, when there were several.
        var roundRatios: [Double] = []
    }

    /// The size of a closed SQLite file with its write-ahead log folded in (what it holds, free
    /// pages included, as a device's disk holds it).
    static func fileBytes(of path: String) throws -> Int {
        try Database(path: path).execute("PRAGMA wal_checkpoint(TRUNCATE)")
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        return (attributes[.size] as? Int) ?? 0
    }

    /// Runs this benchmark again as the device (`InitialSyncDevice`) and reads what it reports.
    private func runDevice(port: UInt16, expected: Int, folder: TemporaryFolder, scope: String? = nil) throws -> DeviceResult {
        let storePath = folder.path("device-\(expected).sqlite")
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: storePath + suffix) } }
        let (line, fields) = try Self.runItself(
            InitialSyncDevice.flag, [String(port), storePath, String(expected)] + (scope.map { [$0] } ?? []), reporting: "device")
        let storeBytes = try? Self.fileBytes(of: storePath)
        guard let pulled = fields["pulled"], Int(pulled) == expected, let elapsed = fields["seconds"], let peak = fields["peakKiB"],
            let start = fields["startKiB"], let reports = fields["reports"]
        else {
            throw BenchmarkFailure("the device pulled other than \(expected) documents: \(line)")
        }
        return DeviceResult(
            rate: Double(expected) / elapsed, peakMB: peak / 1024, startMB: start / 1024, progressReports: Int(reports),
            storeBytes: storeBytes ?? 0)
    }

    /// Rows per second of the baseline (`InitialSyncBaselineDevice`, in its own process as the
    /// device is, so that both start as cold as an app does), and its table's size.
    private func baselinePull(port: UInt16, expected: Int, folder: TemporaryFolder) throws -> (rate: Double, storeBytes: Int) {
        let path = folder.path("baseline-device-\(expected).sqlite")
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let (line, fields) = try Self.runItself(
            InitialSyncBaselineDevice.flag, [String(port), path, String(expected)], reporting: "baseline")
        guard let pulled = fields["pulled"], Int(pulled) == expected, let elapsed = fields["seconds"] else {
            throw BenchmarkFailure("the baseline pulled other than \(expected) rows: \(line)")
        }
        return (Double(expected) / elapsed, try Self.fileBytes(of: path))
    }

    /// Runs this benchmark again with `flag` and `arguments`, and reads the last line it prints
    /// that starts with `name`: its `key=number` fields.
    private static func runItself(
        _ flag: String, _ arguments: [String], reporting name: String
    ) throws -> (line: Substring, fields: [String: Double]) {
        let executable = (Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])).resolvingSymlinksInPath()
        let process = try SpawnedProcess(executable.path, [flag] + arguments, standardOutput: .pipe)
        let data = process.output?.readDataToEndOfFile() ?? Data()
        let termination = process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        guard termination == .exited(0), let line = text.split(separator: "\n").last(where: { $0.hasPrefix(name + " ") }) else {
            throw BenchmarkFailure("the \(name) process failed (\(termination)): \(text)")
        }
        var fields: [String: Double] = [:]
        for part in line.split(separator: " ").dropFirst() {
            let pair = part.split(separator: "=")
            if pair.count == 2 { fields[String(pair[0])] = Double(pair[1]) }
        }
        return (line, fields)
    }

    // MARK: - Push growth

    /// A device with 1k, 10k and 100k pending creates (written offline) starts and pushes them in
    /// the SDK's batches; the time until nothing is pending, per write (the median of 5, 3 and 1
    /// runs: the small sizes take a fraction of a second, where the machine's noise is largest).
    /// The goal is judged on the processor time of the device and the server (both in this
    /// process) over the same span: on this shared machine the wall time swings with the others'
    /// load far more than the work does.
    private func measurePushGrowth(into report: inout BenchmarkReport) async throws {
        var wall: [(items: Int, seconds: Double)] = []
        var processor: [(items: Int, seconds: Double)] = []
        for (position, size) in pushSizes.enumerated() {
            var times: [(wall: Double, processor: Double)] = []
            for _ in 0..<(options.isQuick ? 1 : [5, 3, 1][position]) { times.append(try await pushTime(size)) }
            let time = median(times.map(\.wall))
            let processorTime = median(times.map(\.processor))
            print(
                String(
                    format: "push of %d pending writes: %.2f s, %.1f µs a write, %.1f µs of processor time a write (median of %d)",
                    size, time, time / Double(size) * 1e6, processorTime / Double(size) * 1e6, times.count))
            wall.append((size, time))
            processor.append((size, processorTime))
        }
        var row = growthRow(name: "sync: growth of a push of pending writes", unit: "write", processor)
        let wallPerItem = wall.map { $0.seconds / Double($0.items) * 1e6 }
        row.figure =
            wallPerItem.map { String(format: "%.1f", $0) }.joined(separator: " / ") + " µs a write (wall); processor "
            + row.figure
        row.baseline += " (processor)"
        report.add(row)
    }

    /// An online write made while the device's first sync pulls 5,000 documents, against the same
    /// write on the device once it is idle. The write waits for its own push, which the run sends
    /// between two pages; before, it waited for every page and then a run of its own. Goal: at
    /// most 20× the idle write (one page of 500 and a push), where the whole pull is about 10×
    /// that. Median of 5.
    private func measureWriteDuringFirstSync(into report: inout BenchmarkReport) async throws {
        let documents = options.isQuick ? 2_000 : 5_000
        let folder = TemporaryFolder()
        let store = try SQLiteServerStore(path: folder.path("server.sqlite"), durability: .normal)
        try Self.seed(store, from: 0, to: documents)
        let server = try SyncServer(store: store)
        defer { server.stop() }
        var during: [Double] = []
        var idle: [Double] = []
        var firstSync: [Double] = []
        let clock = ContinuousClock()
        for round in 0..<5 {
            let config = try AbrovaSyncConfigBuilder(apiKey: "bench").serverURL(URL(string: "http://127.0.0.1:\(server.port)")!)
                .storePath(folder.path("device-\(round).sqlite")).authToken("reader").build()
            let start = clock.now
            let sync = try AbrovaSync(config: config)
            var progress = sync.syncProgressChanges.makeAsyncIterator()
            // The first page is in: the run is pulling the rest.
            while let step = await progress.next(), step.pulledDocuments == 0 {}
            let write = clock.now
            try await sync.collection("notes").document("during-\(round)").setData(["n": 1])
            during.append(seconds(clock.now - write))
            while let step = await progress.next(), step.pulledDocuments < documents || step.isPulling {}
            firstSync.append(seconds(clock.now - start))
            let later = clock.now
            try await sync.collection("notes").document("idle-\(round)").setData(["n": 2])
            idle.append(seconds(clock.now - later))
            await sync.close()
        }
        let (duringTime, idleTime) = (median(during), median(idle))
        print(
            String(
                format: "online write during a first sync of %d documents: %.1f ms; idle: %.1f ms; the first sync %.0f ms",
                documents, duringTime * 1000, idleTime * 1000, median(firstSync) * 1000))
        report.add(
            BenchmarkRow(
                name: "sync: an online write during a first sync of \(documents) documents (loopback HTTP)",
                figure: String(format: "%.1f ms (the first sync: %.0f ms)", duringTime * 1000, median(firstSync) * 1000),
                baseline: String(format: "%.1f ms, the same write on the idle device", idleTime * 1000),
                ratio: duringTime / idleTime, goal: "≤ 20×", isGoalMet: duringTime / idleTime <= 20))
    }

    /// Live updates as an app sees them: from device A's `updateData` returning to device B's
    /// snapshot listener showing it, with no call on B, over loopback HTTP: both devices on one
    /// server (SQLite), then on two servers over one PostgreSQL database (when
    /// `ABROVA_POSTGRES_URL` names one), woken through LISTEN/NOTIFY. Goals: p50 ≤ 20 ms and p99
    /// ≤ 100 ms on SQLite, p99 ≤ 150 ms across servers.
    private func measureLiveListener(into report: inout BenchmarkReport) async throws {
        let rounds = options.isQuick ? 20 : 100
        let folder = TemporaryFolder()
        let sqlite = try SyncServer(store: try SQLiteServerStore(path: folder.path("server.sqlite"), durability: .normal))
        defer { sqlite.stop() }
        let onOne = try await listenerLatencies(writer: sqlite.port, reader: sqlite.port, rounds: rounds, folder: folder, name: "sqlite")
        report.add(
            Self.latencyRow(
                "sync: another device's write shown by a listener, one server (SQLite, loopback)", onOne, p50Goal: 0.020, p99Goal: 0.100))
        guard PostgresTestDatabase.isAvailable else {
            print("live listener across servers: skipped (\(PostgresTestDatabase.skipReason))")
            return
        }
        let database = try PostgresTestDatabase()
        let first = try SyncServer(store: try PostgresServerStore(url: database.url, maximumConnections: 4))
        let second = try SyncServer(store: try PostgresServerStore(url: database.url, maximumConnections: 4))
        defer {
            first.stop()
            second.stop()
        }
        let across = try await listenerLatencies(writer: first.port, reader: second.port, rounds: rounds, folder: folder, name: "postgres")
        report.add(
            Self.latencyRow(
                "sync: another device's write shown by a listener, across two servers (PostgreSQL)", across, p50Goal: nil, p99Goal: 0.150))
    }

    /// Seconds from each write's return on the writer to the reader's listener showing it, sorted,
    /// and the same from the call's start (which includes the writer's own push).
    private func listenerLatencies(
        writer: UInt16, reader: UInt16, rounds: Int, folder: TemporaryFolder, name: String
    ) async throws -> (fromReturn: [Double], fromCall: [Double]) {
        func device(_ port: UInt16, _ role: String) throws -> AbrovaSync {
            try AbrovaSync(
                config: try AbrovaSyncConfigBuilder(apiKey: "bench").serverURL(URL(string: "http://127.0.0.1:\(port)")!)
                    .storePath(folder.path("\(name)-\(role).sqlite")).authToken("ana").build())
        }
        let phone = try device(writer, "phone")
        let laptop = try device(reader, "laptop")
        defer {
            Task {
                await phone.close()
                await laptop.close()
            }
        }
        let cart = phone.collection("carts").document("c1")
        try await cart.setData(["n": -1])
        let shown = Protected<[Int64: ContinuousClock.Instant]>([:])
        let registration = await laptop.collection("carts").document("c1").addSnapshotListener { snapshot in
            guard let n = snapshot.data?.mapValue?["n"]?.intValue else { return }
            shown.withLock { $0[n] = $0[n] ?? .now }
        }
        defer { registration.remove() }
        var states = laptop.connectionStateChanges.makeAsyncIterator()
        while let state = await states.next(), state != .live {}
        var latencies: [Double] = []
        var fromCall: [Double] = []
        for round in 0..<rounds {
            let called = ContinuousClock.now
            try await cart.updateData(["n": .value(.int(Int64(round)))])
            let written = ContinuousClock.now
            let deadline = written + .seconds(10)
            while shown.withLock({ $0[Int64(round)] }) == nil, ContinuousClock.now < deadline {
                try await Task.sleep(for: .microseconds(200))
            }
            guard let at = shown.withLock({ $0[Int64(round)] }) else {
                throw BenchmarkFailure("round \(round): the listener never showed it")
            }
            latencies.append(seconds(max(at - written, .zero)))
            fromCall.append(seconds(at - called))
        }
        return (latencies.sorted(), fromCall.sorted())
    }

    private static func latencyRow(
        _ name: String, _ latencies: (fromReturn: [Double], fromCall: [Double]), p50Goal: Double?, p99Goal: Double
    ) -> BenchmarkRow {
        func percentile(_ sorted: [Double], _ fraction: Double) -> Double {
            sorted[min(sorted.count - 1, Int(Double(sorted.count) * fraction))]
        }
        let (p50, p99) = (percentile(latencies.fromReturn, 0.5), percentile(latencies.fromReturn, 0.99))
        let (callP50, callP99) = (percentile(latencies.fromCall, 0.5), percentile(latencies.fromCall, 0.99))
        print(
            String(
                format: "%@: p50 %.1f ms, p99 %.1f ms after the write returned (%.1f / %.1f ms from its call) over %d writes", name,
                p50 * 1000, p99 * 1000, callP50 * 1000, callP99 * 1000, latencies.fromReturn.count))
        let goal = (p50Goal.map { String(format: "p50 ≤ %.0f ms, ", $0 * 1000) } ?? "") + String(format: "p99 ≤ %.0f ms", p99Goal * 1000)
        return BenchmarkRow(
            name: name,
            figure: String(
                format: "p50 %.1f ms, p99 %.1f ms after the write returned (from its call: p50 %.1f, p99 %.1f ms)", p50 * 1000, p99 * 1000,
                callP50 * 1000, callP99 * 1000),
            baseline: "pulling every 5 s: 2,500 ms on average", ratio: p99 / p99Goal, goal: goal,
            isGoalMet: p99 <= p99Goal && (p50Goal.map { p50 <= $0 } ?? true))
    }

    /// Wall and processor seconds from the start of a device holding `size` pending creates until
    /// it has pushed them.
    private func pushTime(_ size: Int) async throws -> (wall: Double, processor: Double) {
        let folder = TemporaryFolder()
        let server = try SyncServer(store: try SQLiteServerStore(path: folder.path("server.sqlite")))
        defer { server.stop() }
        let storePath = folder.path("device.sqlite")
        let store = try LocalStore(path: storePath)
        for index in 0..<size {
            try await store.setData(ServerBenchmarks.document(index), for: DocumentKey(collection: "items", id: "i\(index)"))
        }
        await store.close()
        let config = try AbrovaSyncConfigBuilder(apiKey: "bench").serverURL(URL(string: "http://127.0.0.1:\(server.port)")!)
            .storePath(storePath).authToken("writer").build()
        let clock = ContinuousClock()
        let start = clock.now
        let processorStart = processorSeconds()
        let sync = try AbrovaSync(config: config)
        let counts = sync.pendingCountChanges
        for await count in counts where count == 0 { break }
        let elapsed = clock.now - start
        let processor = processorSeconds() - processorStart
        await sync.close()
        return (seconds(elapsed), processor)
    }

    /// A row for times at growing sizes: time per item at each, and the ratio of the largest
    /// size's time per item to the smallest's. Goal: at most 1.5× (linear or better, with room
    /// for noise).
    private func growthRow(name: String, unit: String, _ growth: [(items: Int, seconds: Double)]) -> BenchmarkRow {
        let perItem = growth.map { $0.seconds / Double($0.items) * 1e6 }
        let ratio = (perItem.last ?? 0) / max(perItem.first ?? 1, 1e-9)
        let sizes = growth.map { $0.items >= 1_000 ? "\($0.items / 1_000)k" : "\($0.items)" }.joined(separator: " / ")
        return BenchmarkRow(
            name: "\(name), \(sizes)",
            figure: perItem.map { String(format: "%.1f", $0) }.joined(separator: " / ") + " µs a \(unit)",
            baseline: String(format: "%.1f µs a \(unit) at \(growth.first?.items ?? 0)", perItem.first ?? 0),
            ratio: ratio, goal: "≤ 1.5× per \(unit), largest / smallest (linear or better)", isGoalMet: ratio <= 1.5)
    }
}

/// Our server on loopback over a given store.
private final class SyncServer: Sendable {
    let server: HTTPServer

    init(store: any ServerStore) throws {
        let handler = SyncHTTPHandler(service: try SyncService(store: store), authenticator: DevelopmentAuthenticator())
        server = try HTTPServer(configuration: HTTPServerConfiguration(port: 0, threadCount: 8, loopbackOnly: true)) { handler.handle($0) }
    }

    var port: UInt16 { server.port }
    func stop() { server.shutdown() }
}

/// The baseline of the initial sync, run as its own process: pages of 500 rows by seq cursor over
/// loopback HTTP, each page's JSON read and its rows inserted into an empty table in one
/// transaction (WAL, synchronous=NORMAL, as the device store). The time starts before the file is
/// made and the connection opened, as the device's starts before it opens its store. It prints one
/// line with the rows pulled and the time.
enum InitialSyncBaselineDevice {
    static let flag = "--initial-sync-baseline"

    static func run(_ arguments: [String]) -> Never {
        guard arguments.count == 3, let port = UInt16(arguments[0]), let expected = Int(arguments[2]) else {
            print("usage: abrova-bench \(flag) PORT TABLE_FILE EXPECTED")
            exit(2)
        }
        do {
            let clock = ContinuousClock()
            var pulled = 0
            var opened: Database?
            let elapsed = try clock.measure {
                let device = try Database(path: arguments[1], isExclusive: true)
                opened = device
                try device.execute(
                    "CREATE TABLE documents (id TEXT PRIMARY KEY NOT NULL, body TEXT, version INTEGER NOT NULL) WITHOUT ROWID")
                let connection = try RawHTTPConnection(port: port)
                var after: Int64 = 0
                while true {
                    try connection.send("GET /changes?after=\(after)&limit=500 HTTP/1.1\r\nHost: x\r\n\r\n")
                    let rows = try Value(json: try connection.readResponse().body).mapValue?["changes"]?.arrayValue ?? []
                    if rows.isEmpty { break }
                    try device.write { database in
                        for row in rows {
                            let fields = row.mapValue ?? [:]
                            try database.run(
                                "INSERT INTO documents (id, body, version) VALUES (?, ?, ?)",
                                [
                                    .text(fields["id"]?.stringValue ?? ""), .text((fields["body"] ?? .null).canonicalJSON),
                                    .integer(fields["version"]?.intValue ?? 0),
                                ])
                        }
                    }
                    pulled += rows.count
                    after = rows.last?.mapValue?["seq"]?.intValue ?? after
                }
            }
            opened?.close()
            guard pulled == expected else {
                print("baseline failed: pulled \(pulled) of \(expected) rows")
                exit(1)
            }
            print("baseline pulled=\(pulled) seconds=\(seconds(elapsed))")
            exit(0)
        } catch {
            print("baseline failed: \(error)")
            exit(1)
        }
    }
}

/// The device of the initial-sync figure, run as `abrova-bench --initial-sync-device PORT STORE
/// EXPECTED [SCOPE]` in a process of its own: an `AbrovaSync` on an empty store (keeping only the
/// comma-separated collections of SCOPE, or the sync scope whose JSON it is, when given) syncs once, following its progress, then
/// prints one line with the documents pulled, the time and the peak resident memory (VmHWM).
enum InitialSyncDevice {
    static let flag = "--initial-sync-device"

    static func run(_ arguments: [String]) async -> Never {
        guard arguments.count == 3 || arguments.count == 4, let port = Int(arguments[0]) else {
            print("usage: abrova-bench \(flag) PORT STORE EXPECTED [SCOPE]")
            exit(2)
        }
        let startKiB = residentKiB("VmRSS")
        do {
            var builder = AbrovaSyncConfigBuilder(apiKey: "bench").serverURL(URL(string: "http://127.0.0.1:\(port)")!)
                .storePath(arguments[1]).authToken("reader")
            if arguments.count == 4 {
                if arguments[3].hasPrefix("[") {
                    let parts = try SyncScope(jsonText: arguments[3]).parts
                    builder = builder.syncScope(
                        parts.map { part in
                            part.equalities.reduce(SyncScopeQuery(collection: part.collection)) {
                                $0.whereField($1.path.dotted, isEqualTo: $1.value)
                            }
                        })
                } else {
                    builder = builder.syncScope(collections: arguments[3].split(separator: ",").map(String.init))
                }
            }
            let config = try builder.build()
            let clock = ContinuousClock()
            let start = clock.now
            let sync = try AbrovaSync(config: config)
            let progress = sync.syncProgressChanges
            let watcher = Task {
                var reports = 0
                var pulled = 0
                for await step in progress {
                    reports += 1
                    pulled = max(pulled, step.pulledDocuments)
                }
                return (reports, pulled)
            }
            await sync.syncNow()
            let elapsed = clock.now - start
            let state = sync.syncState
            let lastError = await sync.lastError
            await sync.close()
            if state != .idle { print("device ended \(state): \(lastError.map { "\($0)" } ?? "no error")") }
            let (reports, pulled) = await watcher.value
            print("device pulled=\(pulled) seconds=\(seconds(elapsed)) peakKiB=\(peakKiB()) startKiB=\(startKiB) reports=\(reports)")
            exit(0)
        } catch {
            print("device failed: \(error)")
            exit(1)
        }
    }

    /// The peak resident memory in KiB: VmHWM on Linux, `ru_maxrss` (bytes) elsewhere.
    static func peakKiB() -> Int {
        #if os(Linux)
            return residentKiB("VmHWM")
        #else
            var usage = rusage()
            getrusage(RUSAGE_SELF, &usage)
            return Int(usage.ru_maxrss) / 1024
        #endif
    }

    /// A line of /proc/PROCESS/status in KiB (this process's by default; 0 where there is none,
    /// as off Linux).
    static func residentKiB(_ name: String, of process: String = "self") -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(process)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix(name + ":") })
        else { return 0 }
        return Int(line.split(whereSeparator: \.isWhitespace).dropFirst().first ?? "") ?? 0
    }
}

/// The processor time this process has used so far, user and system, in seconds.
func processorSeconds() -> Double {
    var usage = rusage()
    #if os(Linux)
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    #else
        getrusage(RUSAGE_SELF, &usage)
    #endif
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}
