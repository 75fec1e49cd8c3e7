import AbrovaCore
import AbrovaHTTP
import AbrovaPostgres
import AbrovaServer
import AbrovaTestSupport
import AbrovaWire
import Foundation

/// Live sync (`GET /v1/watch`, a long poll): how fast a push wakes its watchers, what a waiting
/// watcher costs the server, and the polling a device would do without it.
///
/// - `watch-fanout`: 1,000 watchers (100 in a quick run), each a bare socket of this process
///   watching as its own user from its own cursor; one writer pushes one new document of a
///   collection every signed-in user may read. Timed from the push's answer to the last watch's
///   answer, every answer read by one thread polling all the sockets.
/// - `watch-memory`: this process's resident memory grown by N waiting watches, over N (as
///   `DeferredMemoryBenchmarks`), and its processor time over 5 idle seconds with them waiting.
/// - `watch-latency`: one watcher, from the push's answer to the watch's answer, on SQLite and
///   (with `ABROVA_POSTGRES_URL`) on PostgreSQL with the watcher on a second service and HTTP
///   server over the same database, woken through `LISTEN`/`NOTIFY`; beside pulling every 1, 5
///   and 30 seconds, from the pull time measured in the same rounds.
struct WatchBenchmarks {
    let options: BenchmarkOptions
    /// "board" is readable by every signed-in user, the rest by its owner only.
    static let rules = RuleBook(collections: ["board": PresetRules.anyAuthenticatedUser], fallback: PresetRules.ownerOnly)
    static let fanOutTarget = Duration.seconds(1)
    static let memoryTarget = 20_000
    static let latencyTarget = Duration.milliseconds(150)
    /// The most processor time an idle server may take, as a share of one core.
    static let idleProcessorShare = 0.01

    func run(into report: inout BenchmarkReport) {
        guard options.runs("watch-fanout") || options.runs("watch-memory") || options.runs("watch-latency") else { return }
        print("## watch")
        #if os(Linux)
            raiseDescriptorLimit()
            do {
                if options.runs("watch-fanout") { try measureFanOut(into: &report) }
                if options.runs("watch-memory") { try measureMemory(into: &report) }
                if options.runs("watch-latency") { try measureLatency(into: &report) }
            } catch {
                print("watch benchmarks failed: \(error)")
            }
        #else
            print("watch: skipped, Linux only (its watchers are polled sockets, its memory read from /proc/self/status)")
        #endif
    }
}

#if os(Linux)
    extension WatchBenchmarks {
        // MARK: - Fan-out

        private func measureFanOut(into report: inout BenchmarkReport) throws {
            let count = options.isQuick ? 100 : 1_000
            let rounds = options.isQuick ? 3 : 10
            let folder = TemporaryFolder()
            let server = try WatchServer(store: try SQLiteServerStore(path: folder.path("server.sqlite")), connections: count)
            defer { server.stop() }
            var devices = (0..<count).map { WatchingDevice(user: "device-\($0)") }
            let puller = try RawHTTPConnection(port: server.port)
            for index in devices.indices { _ = try devices[index].pull(on: puller) }
            var lastAnswers: [Double] = []
            var everyAnswer: [Double] = []
            var processorPerWatch: [Double] = []
            for number in 0..<rounds {
                let round = try watchRound(number, devices: devices, watchingOn: server, pushingTo: server)
                lastAnswers.append(round.latencies.max() ?? 0)
                everyAnswer += round.latencies
                processorPerWatch.append(round.processorSeconds / Double(count))
                // Each device pulls what woke it, as a device does before it watches again.
                for index in devices.indices {
                    guard try devices[index].pull(on: puller).documents == 1 else {
                        throw BenchmarkFailure("\(devices[index].user) pulled other than the one new document")
                    }
                }
            }
            let last = lastAnswers.sorted()
            let every = everyAnswer.sorted()
            print(
                "watch fan-out: \(count) watchers, \(rounds) rounds: last answer \(milliseconds(last)); "
                    + "every answer \(milliseconds(every)); "
                    + String(format: "%.0f µs of processor time a watch (both ends)", median(processorPerWatch) * 1e6))
            let p99 = percentile(last, 0.99)
            report.add(
                BenchmarkRow(
                    name: "watch: \(count) watchers woken by one push, SQLite (push answer → last watch answer, \(rounds) rounds)",
                    figure: milliseconds(last) + "; each watch p50 " + String(format: "%.1f ms", percentile(every, 0.5) * 1e3),
                    baseline: "p99 1 s (target)", ratio: p99 / seconds(Self.fanOutTarget), goal: "≤ 1×",
                    isGoalMet: p99 <= seconds(Self.fanOutTarget)))
        }

        /// One round: each device watches from its cursor on `watchServer`, then a writer pushes a
        /// new document of "board" to `pushServer`. The seconds from the push's answer to each
        /// watch's answer (negative for one that came first), and this process's processor time
        /// from the first watch sent to the last answer.
        private func watchRound(
            _ number: Int, devices: [WatchingDevice], watchingOn watchServer: WatchServer, pushingTo pushServer: WatchServer
        ) throws -> (latencies: [Double], processorSeconds: Double) {
            let started = processorSeconds()
            let watchers = try devices.map { device in
                let client = try IdleClient(port: watchServer.port)
                try client.send(device.watchRequest)
                return client
            }
            try waitForWatches(devices.count, on: watchServer.service)
            let writer = try IdleClient(port: pushServer.port)
            try writer.send(Self.pushRequest(number))
            let answers = try awaitAnswers(on: [writer] + watchers, timeout: .seconds(30))
            let elapsed = processorSeconds() - started
            guard answers[0].status == 200 else { throw BenchmarkFailure("the push was answered \(answers[0].status): \(answers[0].body)") }
            let unwoken = answers.dropFirst().filter { $0.status != 200 || $0.body != #"{"changed":true}"# }
            if let first = unwoken.first {
                throw BenchmarkFailure("\(unwoken.count) of \(devices.count) watches not woken, such as \(first.status) \(first.body)")
            }
            return (answers.dropFirst().map { seconds($0.at - answers[0].at) }, elapsed)
        }

        /// A push of one new document of `collection`, the `number`th of the writer's batches, on
        /// a connection closed after its answer.
        private static func pushRequest(_ number: Int, collection: String = "board") throws -> String {
            let change = BatchChange(
                key: DocumentKey(collection: collection, id: "note-\(number)"),
                delta: try DocumentDelta.create(["n": .int(Int64(number))], base: .zero),
                writes: 1)
            let body = PushRequest(batch: Batch(clientID: "writer-phone", sequence: Int64(number + 1), changes: [change]), strategy: .merge)
                .body
            return "POST /v1/push HTTP/1.1\r\nHost: x\r\nX-API-Key: bench\r\nAuthorization: Bearer writer\r\nConnection: close\r\n"
                + "Content-Length: \(body.count)\r\n\r\n" + String(decoding: body, as: UTF8.self)
        }

        // MARK: - Memory and idle processor time

        private func measureMemory(into report: inout BenchmarkReport) throws {
            // Two descriptors a watcher (client and server), under the hard limit.
            let room = (Int(descriptorLimit()) - 200) / 2
            let count = min(options.isQuick ? 1_000 : 10_000, room)
            if count < 10_000, !options.isQuick {
                print("watch memory: \(count) watchers, not 10,000: \(descriptorLimit()) descriptors, two a watcher in this process")
            }
            for isAfterAPull in [false, true] {
                let (perWatcher, idle) = try measureMemory(count, afterAPull: isAfterAPull)
                report.add(
                    .memory(
                        "watch: server memory per idle watcher, \(count) watching, "
                            + (isAfterAPull ? "after a pull on its connection" : "first on its connection"),
                        bytesEach: perWatcher, target: Self.memoryTarget))
                if !isAfterAPull {
                    let share = idle / 5
                    report.add(
                        BenchmarkRow(
                            name: "watch: processor time over 5 idle seconds, \(count) watching",
                            figure: String(format: "%.1f ms (%.2f%% of a core)", idle * 1e3, share * 100),
                            baseline: String(format: "%.0f%% of a core (target)", Self.idleProcessorShare * 100),
                            ratio: share / Self.idleProcessorShare, goal: "≤ 1×", isGoalMet: share <= Self.idleProcessorShare))
                }
            }
        }

        /// Bytes of resident memory per waiting watch, and this process's processor seconds over
        /// 5 s while they wait. The watchers watch from the beginning, as users who may read
        /// nothing there is; with `afterAPull`, each pulls on its connection first.
        private func measureMemory(_ count: Int, afterAPull: Bool) throws -> (perWatcher: Int, idleSeconds: Double) {
            let folder = TemporaryFolder()
            // An idle time longer than the measurement, so that no watch is answered during it.
            let server = try WatchServer(
                store: try SQLiteServerStore(path: folder.path("server.sqlite")), connections: count, watchIdleTime: .seconds(120))
            defer { server.stop() }
            // Threads, the hub, the push and answer paths and the allocator warmed before the
            // baseline: 32 pulls, and 32 watches of the writer woken by its own private document.
            for _ in 0..<32 {
                let client = try IdleClient(port: server.port)
                try client.send(WatchingDevice(user: "writer").pullRequest(closing: true))
                _ = try awaitAnswers(on: [client], timeout: .seconds(10))
            }
            let warm = try (0..<32).map { _ in
                let client = try IdleClient(port: server.port)
                try client.send(WatchingDevice(user: "writer").watchRequest)
                return client
            }
            try waitForWatches(warm.count, on: server.service)
            let writer = try IdleClient(port: server.port)
            try writer.send(try Self.pushRequest(0, collection: "notes"))
            let warmed = try awaitAnswers(on: [writer] + warm, timeout: .seconds(10))
            guard warmed.allSatisfy({ $0.status == 200 }), server.service.watchCount == 0 else {
                throw BenchmarkFailure("the warm-up watches were not all woken: \(warmed.map(\.body))")
            }
            releaseFreeMemory()
            Thread.sleep(forTimeInterval: 0.2)
            let before = InitialSyncDevice.residentKiB("VmRSS")
            let arrivalStart = processorSeconds()
            var watchers: [IdleClient] = []
            watchers.reserveCapacity(count)
            for index in 0..<count {
                let client = try IdleClient(port: server.port)
                let device = WatchingDevice(user: "device-\(index)")
                if afterAPull {
                    try client.send(device.pullRequest(closing: false))
                    _ = try awaitAnswers(on: [client], timeout: .seconds(10))
                }
                try client.send(device.watchRequest)
                watchers.append(client)
            }
            try waitForWatches(count, on: server.service)
            Thread.sleep(forTimeInterval: 0.2)
            let after = InitialSyncDevice.residentKiB("VmRSS")
            let arrivals = processorSeconds() - arrivalStart
            // The hub checks the last arrivals after they are counted: the idle window starts once
            // half a second has passed within the idle target (at most 10 s later).
            var settled = 0.0
            for _ in 0..<20 {
                let start = processorSeconds()
                Thread.sleep(forTimeInterval: 0.5)
                settled += 0.5
                if processorSeconds() - start <= 0.5 * Self.idleProcessorShare { break }
            }
            let idleStart = processorSeconds()
            Thread.sleep(forTimeInterval: 5)
            let idle = processorSeconds() - idleStart
            guard server.service.watchCount == count else {
                throw BenchmarkFailure("\(count - server.service.watchCount) watches answered while idle")
            }
            let perWatcher = max(0, after - before) * 1024 / count
            print(
                "watch memory: \(count) watching (\(afterAPull ? "after a pull" : "first request")): \(perWatcher) bytes each; "
                    + String(
                        format: "%.0f µs of processor time a watch arriving (both ends), settled %.1f s later; %.1f ms in 5 idle seconds",
                        arrivals / Double(count) * 1e6, settled, idle * 1e3))
            server.service.stopWatching()
            _ = try awaitAnswers(on: watchers, timeout: .seconds(60))
            return (perWatcher, idle)
        }

        // MARK: - Latency, and polling instead

        private func measureLatency(into report: inout BenchmarkReport) throws {
            let rounds = options.isQuick ? 20 : 100
            let folder = TemporaryFolder()
            let sqlite = try WatchServer(store: try SQLiteServerStore(path: folder.path("server.sqlite")), connections: 10)
            defer { sqlite.stop() }
            try measureLatency(rounds: rounds, watchingOn: sqlite, pushingTo: sqlite, store: "SQLite", into: &report)
            guard PostgresTestDatabase.isAvailable else {
                print(
                    "watch latency on PostgreSQL: skipped, ABROVA_POSTGRES_URL is not set (`.ci/postgres` starts a server and prints its URL)"
                )
                return
            }
            let database = try PostgresTestDatabase()
            try withExtendedLifetime(database) {
                let url = database.url + "&application_name=abrova-bench"
                let writing = try WatchServer(store: try PostgresServerStore(url: url), connections: 10)
                defer { writing.stop() }
                let watching = try WatchServer(store: try PostgresServerStore(url: url), connections: 10)
                defer { watching.stop() }
                try measureLatency(
                    rounds: rounds, watchingOn: watching, pushingTo: writing, store: "PostgreSQL, watcher on a second server", into: &report
                )
            }
        }

        private func measureLatency(
            rounds: Int, watchingOn watchServer: WatchServer, pushingTo pushServer: WatchServer, store: String,
            into report: inout BenchmarkReport
        ) throws {
            var device = WatchingDevice(user: "device-0")
            let puller = try RawHTTPConnection(port: watchServer.port)
            _ = try device.pull(on: puller)
            var latencies: [Double] = []
            var pulls: [Double] = []
            for number in 0..<rounds {
                latencies += try watchRound(number, devices: [device], watchingOn: watchServer, pushingTo: pushServer).latencies
                let pulled = try device.pull(on: puller)
                guard pulled.documents == 1 else { throw BenchmarkFailure("the device pulled \(pulled.documents) documents, not 1") }
                pulls.append(pulled.seconds)
            }
            let sorted = latencies.sorted()
            let p99 = percentile(sorted, 0.99)
            let pull = median(pulls)
            print("watch latency, \(store): \(milliseconds(sorted)); the pull after it " + String(format: "%.2f ms (median)", pull * 1e3))
            report.add(
                BenchmarkRow(
                    name: "watch: one watcher woken by a push, \(store) (push answer → watch answer, \(rounds) rounds)",
                    figure: "p50 " + String(format: "%.1f ms", percentile(sorted, 0.5) * 1e3) + ", p99 "
                        + String(format: "%.1f ms", p99 * 1e3),
                    baseline: "p99 150 ms (target)", ratio: p99 / seconds(Self.latencyTarget), goal: "≤ 1×",
                    isGoalMet: p99 <= seconds(Self.latencyTarget)))
            // A watching device has a change once its watch is answered and it has pulled; a
            // polling one on average half a period after it, plus the pull.
            let watching = percentile(sorted, 0.5) + pull
            let idleWatches = 60 / seconds(watchServer.service.configuration.watchIdleTime)
            for period in [1.0, 5, 30] {
                let polling = period / 2 + pull
                report.add(
                    BenchmarkRow(
                        name: "watch: a change reaches a device, \(store): watching vs pulling every \(Int(period)) s",
                        figure: String(format: "%.1f ms, %.1f requests/min idle (+2 a change)", watching * 1e3, idleWatches),
                        baseline: String(format: "%.0f ms on average, %.0f requests/min", polling * 1e3, 60 / period),
                        ratio: polling / watching, goal: "reported (speed)", isGoalMet: nil))
            }
        }

        // MARK: - Clients

        /// Waits until `count` watches wait in `service`.
        private func waitForWatches(_ count: Int, on service: SyncService) throws {
            let deadline = ContinuousClock.now + .seconds(60)
            while service.watchCount < count {
                guard ContinuousClock.now < deadline else {
                    throw BenchmarkFailure("\(service.watchCount) of \(count) watches waiting after 60 s")
                }
                Thread.sleep(forTimeInterval: 0.002)
            }
        }

        private struct Answer {
            /// When this thread saw it whole.
            var at: ContinuousClock.Instant
            var status: Int
            var body: String
        }

        /// One whole answer from each client, all read by this thread as they arrive (one poll over
        /// every socket still without its answer), each stamped with the time of the poll that
        /// found it complete.
        private func awaitAnswers(on clients: [IdleClient], timeout: Duration) throws -> [Answer] {
            var received = [[UInt8]](repeating: [], count: clients.count)
            var answers = [Answer?](repeating: nil, count: clients.count)
            var pending = Array(clients.indices)
            var buffer = [UInt8](repeating: 0, count: 4_096)
            let deadline = ContinuousClock.now + timeout
            while !pending.isEmpty {
                guard ContinuousClock.now < deadline else {
                    throw BenchmarkFailure("\(pending.count) of \(clients.count) answers missing after \(timeout)")
                }
                var descriptors = pending.map { pollfd(fd: clients[$0].descriptor, events: Int16(POLLIN), revents: 0) }
                let ready = poll(&descriptors, nfds_t(descriptors.count), 100)
                let now = ContinuousClock.now
                guard ready >= 0 || errno == EINTR else { throw BenchmarkFailure("poll: errno \(errno)") }
                var stillPending: [Int] = []
                for (slot, index) in pending.enumerated() {
                    guard descriptors[slot].revents != 0 else {
                        stillPending.append(index)
                        continue
                    }
                    let count = buffer.withUnsafeMutableBytes { recv(clients[index].descriptor, $0.baseAddress, $0.count, 0) }
                    if count > 0 { received[index] += buffer[..<count] }
                    if let (status, body) = Self.wholeAnswer(in: received[index]) {
                        answers[index] = Answer(at: now, status: status, body: body)
                    } else if count <= 0 {
                        throw BenchmarkFailure("a connection ended before its answer: \(count == 0 ? "closed" : "errno \(errno)")")
                    } else {
                        stillPending.append(index)
                    }
                }
                pending = stillPending
            }
            return answers.map { $0! }
        }

        /// The status and body of the answer in `bytes` once all of it is there (its body as long
        /// as its Content-Length says).
        private static func wholeAnswer(in bytes: [UInt8]) -> (Int, String)? {
            guard let headEnd = bytes.firstRange(of: Array("\r\n\r\n".utf8))?.upperBound else { return nil }
            let head = String(decoding: bytes[..<headEnd], as: UTF8.self).lowercased()
            guard let status = head.split(separator: " ").dropFirst().first.flatMap({ Int($0) }),
                let lengthLine = head.components(separatedBy: "\r\n").first(where: { $0.hasPrefix("content-length:") }),
                let length = Int(lengthLine.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)),
                bytes.count - headEnd >= length
            else { return nil }
            return (status, String(decoding: bytes[headEnd..<headEnd + length], as: UTF8.self))
        }
    }

    /// A device as the watch figures need it: a user and its pull cursor.
    private struct WatchingDevice {
        let user: String
        var cursor = ""

        var watchRequest: String {
            "GET /v1/watch?cursor=\(cursor) HTTP/1.1\r\nHost: x\r\nX-API-Key: bench\r\nAuthorization: Bearer \(user)\r\n\r\n"
        }

        func pullRequest(closing: Bool) -> String {
            "GET /v1/pull?cursor=\(cursor) HTTP/1.1\r\nHost: x\r\nX-API-Key: bench\r\nAuthorization: Bearer \(user)\r\n"
                + (closing ? "Connection: close\r\n\r\n" : "\r\n")
        }

        /// Pulls from the cursor (one page: these figures write a document a round) and moves it.
        mutating func pull(on connection: RawHTTPConnection) throws -> (documents: Int, seconds: Double) {
            let started = ContinuousClock.now
            try connection.send(pullRequest(closing: false))
            let response = try connection.readResponse()
            guard response.status == 200 else { throw BenchmarkFailure("pull answered \(response.status)") }
            let page = try PullResponse(body: response.body)
            let elapsed = seconds(ContinuousClock.now - started)
            cursor = page.cursor
            return (page.documents.count, elapsed)
        }
    }

    /// A sync server for the watch figures: its service at hand (to see the watches waiting), and
    /// room for `connections` watchers (connections, from one address, and watches).
    private final class WatchServer: Sendable {
        let service: SyncService
        let server: HTTPServer

        init(store: any ServerStore, connections: Int, watchIdleTime: Duration = .seconds(25)) throws {
            var configuration = ServiceConfiguration()
            configuration.watchIdleTime = watchIdleTime
            configuration.maximumWatches = connections + 100
            let service = try SyncService(store: store, rules: WatchBenchmarks.rules, configuration: configuration)
            let handler = SyncHTTPHandler(service: service, authenticator: DevelopmentAuthenticator())
            self.service = service
            server = try HTTPServer(
                configuration: HTTPServerConfiguration(
                    port: 0, loopbackOnly: true, maximumConnectionsPerAddress: 0, maximumConnections: connections + 200)
            ) { handler.handle($0) }
        }

        var port: UInt16 { server.port }
        func stop() { server.shutdown() }
    }

    /// Gives the allocator's free pages back to the system (glibc's `malloc_trim`, which Swift's
    /// Glibc module does not declare), so that the watchers' memory is not taken from what earlier
    /// figures freed and left resident.
    private func releaseFreeMemory() {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") else { return }
        _ = unsafeBitCast(symbol, to: (@convention(c) (Int) -> Int32).self)(0)
    }

    private func percentile(_ sorted: [Double], _ fraction: Double) -> Double {
        sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * fraction))]
    }

    /// p50, p99 and max of sorted seconds, in milliseconds.
    private func milliseconds(_ sorted: [Double]) -> String {
        String(
            format: "p50 %.1f ms, p99 %.1f ms, max %.1f ms", percentile(sorted, 0.5) * 1e3, percentile(sorted, 0.99) * 1e3,
            (sorted.last ?? 0) * 1e3)
    }
#endif
