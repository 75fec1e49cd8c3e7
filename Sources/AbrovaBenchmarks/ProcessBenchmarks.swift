#if os(Linux)
    import AbrovaServer
    import AbrovaTestSupport
    import AbrovaWire
    import Foundation

    /// Push throughput of 1, 2 and 4 `abrova serve` processes sharing one PostgreSQL database, on
    /// loopback and with 2 ms of round trip added between the servers and the database (the fault
    /// proxy delays every chunk 1 ms each way, as a database a few milliseconds away would), against
    /// one process on SQLite, in the same run: the same clients, spread round-robin over the
    /// processes, push the same creates in batches of `batchSize` (zstd as the SDK). Every
    /// configuration gets fresh processes on a fresh schema (or SQLite file), and the configurations
    /// are measured in turn within each repetition so that all see the same load.
    /// `ABROVA_BENCH_SERVE` names another `abrova` to serve with (an older build, for an A/B);
    /// `ABROVA_BENCH_BASELINE_SERVE` an older `abrova` measured beside this one, 1 process with the
    /// delay, as the baseline of the 5× goal.
    ///
    /// On a machine of few cores one process with its 8 connections may fill the machine, so that
    /// more processes cannot add much: the rows with one connection a process show whether
    /// processes write in parallel (with a single lock across processes they would not add up).
    struct ProcessBenchmarks {
        let options: BenchmarkOptions
        /// Clients pushing at once, client `c` to process `c % processes`.
        static let clients = 16
        static let processCounts = [1, 2, 4]
        /// Changes a batch: small batches, many of them, as devices send while they are online.
        static let batchSize = 20
        /// The round trip added between the servers and PostgreSQL in the delayed rows.
        static let addedMilliseconds = 2
        static var addedRoundTrip: Duration { .milliseconds(addedMilliseconds) }

        private enum Configuration: Hashable {
            case sqlite
            /// `connections`: a process's connections to PostgreSQL (`nil`: the default, 8).
            case postgres(processes: Int, isDelayed: Bool, connections: Int? = nil)
            /// The older build of `ABROVA_BENCH_BASELINE_SERVE`, 1 process with the delay.
            case baseline

            var processes: Int {
                switch self {
                case .sqlite, .baseline: 1
                case .postgres(let processes, _, _): processes
                }
            }

            var name: String {
                switch self {
                case .sqlite: "SQLite"
                case .baseline: "PostgreSQL +\(addedMilliseconds) ms, older build"
                case .postgres(_, let isDelayed, let connections):
                    (isDelayed ? "PostgreSQL +\(addedMilliseconds) ms" : "PostgreSQL")
                        + (connections.map { ", \($0) connection\($0 == 1 ? "" : "s") a process" } ?? "")
                }
            }
        }

        func run(into report: inout BenchmarkReport) throws {
            let perClient = options.isQuick ? 100 : 400
            let changes = perClient * Self.clients
            let repetitions = options.isQuick ? 1 : 3
            print("")
            print(
                "push by server processes: \(Self.clients) clients, round-robin over the processes, push \(changes) creates in batches of "
                    + "\(Self.batchSize) (zstd \(ServerBenchmarks.compressionLevel)); fresh processes and database each time, median of \(repetitions):"
            )
            print("")
            guard let executable = Self.abrovaExecutable() else {
                print("skipped: no `abrova` beside this benchmark (\(Self.benchmarkFolder.path)); build both with `swift build -c release`")
                return
            }
            var configurations: [Configuration] = [.sqlite]
            if let url = PostgresTestDatabase.serverURL {
                print("serving with \(executable.path); PostgreSQL at \(redactingPassword(url))")
                for isDelayed in [false, true] {
                    configurations += Self.processCounts.map { .postgres(processes: $0, isDelayed: isDelayed) }
                }
                configurations += Self.processCounts.map { .postgres(processes: $0, isDelayed: true, connections: 1) }
                if let baseline = Self.baselineExecutable() {
                    print("older build for the baseline: \(baseline.path)")
                    configurations.append(.baseline)
                }
            } else {
                print(
                    "serving with \(executable.path); PostgreSQL rows skipped: set ABROVA_POSTGRES_URL to a database the benchmark may "
                        + "create schemas in (`.ci/postgres` starts one and prints it)")
            }
            let requests = try ServerBenchmarks.pushRequests(clients: Self.clients, perClient: perClient, batchSize: Self.batchSize)
            var rates: [Configuration: [Double]] = [:]
            for _ in 0..<repetitions {
                for configuration in configurations {
                    rates[configuration, default: []].append(try pushRate(configuration, requests: requests, executable: executable))
                }
            }

            let sqlite = median(rates[.sqlite] ?? [])
            func one(_ isDelayed: Bool, _ connections: Int?) -> Double {
                rates[.postgres(processes: 1, isDelayed: isDelayed, connections: connections)].map(median) ?? .nan
            }
            print("")
            print("| store | processes | changes/s (median) | range | vs SQLite | vs PostgreSQL, 1 process |")
            print("| --- | --- | --- | --- | --- | --- |")
            for configuration in configurations {
                let runs = rates[configuration] ?? []
                let rate = median(runs)
                var versusOne = "-"
                if case .postgres(_, let isDelayed, let connections) = configuration {
                    versusOne = String(format: "%.2f×", rate / one(isDelayed, connections))
                }
                print(
                    String(
                        format: "| %@ | %d | %.0f | %.0f–%.0f | %.2f× | %@ |", configuration.name, configuration.processes, rate,
                        runs.min() ?? 0, runs.max() ?? 0, rate / sqlite, versusOne))
            }
            print("")
            for case .postgres(let processes, let isDelayed, let connections) in configurations {
                let rate = median(rates[.postgres(processes: processes, isDelayed: isDelayed, connections: connections)] ?? [])
                let label =
                    "\(processes) process\(processes == 1 ? "" : "es")"
                    + (isDelayed ? ", +\(Self.addedMilliseconds) ms to the database" : "")
                    + (connections.map { ", \($0) connection\($0 == 1 ? "" : "s") each" } ?? "")
                report.add(
                    BenchmarkRow(
                        name:
                            "server: push over PostgreSQL, \(label) (\(Self.clients) clients, \(changes) creates in batches of \(Self.batchSize))",
                        figure: formatRate(rate, "changes"), baseline: formatRate(sqlite, "changes") + " on SQLite, 1 process",
                        ratio: rate / sqlite, goal: "reported", isGoalMet: nil))
                if processes > 1 {
                    let isFour = processes == 4 && isDelayed && connections == nil
                    let versusOne = rate / one(isDelayed, connections)
                    report.add(
                        BenchmarkRow(
                            name: "server: push over PostgreSQL, \(label) vs 1 process",
                            figure: formatRate(rate, "changes"),
                            baseline: formatRate(one(isDelayed, connections), "changes") + " with 1 process",
                            ratio: versusOne, goal: isFour ? "≥ 3×" : "reported", isGoalMet: isFour ? versusOne >= 3 : nil))
                }
            }
            if let older = rates[.baseline].map(median) {
                let rate = one(true, nil)
                report.add(
                    BenchmarkRow(
                        name: "server: push over PostgreSQL, 1 process, +\(Self.addedMilliseconds) ms to the database, vs the older build",
                        figure: formatRate(rate, "changes"), baseline: formatRate(older, "changes") + " by the older build",
                        ratio: rate / older, goal: "≥ 5×", isGoalMet: rate / older >= 5))
            }
        }

        /// Changes per second of `configuration` for `requests` (client `c` sends `requests[c]`).
        private func pushRate(_ configuration: Configuration, requests: [[PushRequest]], executable: URL) throws -> Double {
            let folder = TemporaryFolder()
            return try withExtendedLifetime(folder) {
                switch configuration {
                case .sqlite:
                    let server = try ServeProcess(
                        executable: executable, store: ["--database", folder.path("server.sqlite")],
                        log: folder.path("serve.log"))
                    return try pushRate(to: [server], requests: requests)
                case .baseline:
                    guard let older = Self.baselineExecutable() else { return .nan }
                    return try pushRate(.postgres(processes: 1, isDelayed: true), requests: requests, executable: older)
                case .postgres(let processes, let isDelayed, let connections):
                    let database = try PostgresTestDatabase()
                    let proxy = try isDelayed ? Self.delayingProxy(to: database.url) : nil
                    defer { proxy?.stop() }
                    // The schema is dropped when `database` is released: only after the servers stop.
                    return try withExtendedLifetime(database) {
                        var url = database.url + "&application_name=abrova-bench"
                        if let proxy, var components = URLComponents(string: url) {
                            components.host = "127.0.0.1"
                            components.port = Int(proxy.port)
                            url = components.string ?? url
                        }
                        let servers = try (0..<processes).map { number in
                            try ServeProcess(
                                executable: executable,
                                store: ["--postgres", url] + (connections.map { ["--connections", String($0)] } ?? []),
                                log: folder.path("serve-\(number).log"))
                        }
                        return try pushRate(to: servers, requests: requests)
                    }
                }
            }
        }

        /// Times the clients pushing to `servers` (client `c` to server `c % servers.count`), then
        /// stops the servers.
        private func pushRate(to servers: [ServeProcess], requests: [[PushRequest]]) throws -> Double {
            defer { for server in servers { server.stop() } }
            let ports = servers.map(\.port)
            let elapsed = try runConcurrently(requests.count) { client in
                let connection = try RawHTTPConnection(port: ports[client % ports.count])
                try ServerBenchmarks.push(requests[client], as: client, on: connection, level: ServerBenchmarks.compressionLevel)
            }
            return Double(requests.reduce(0) { $0 + $1.reduce(0) { $0 + $1.batch.changes.count } }) / seconds(elapsed)
        }

        /// The folder this benchmark's executable is in: the build's products.
        static var benchmarkFolder: URL {
            (Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])).resolvingSymlinksInPath()
                .deletingLastPathComponent()
        }

        /// A proxy to the PostgreSQL server `url` names that delays each chunk half the added
        /// round trip, each way.
        static func delayingProxy(to url: String) throws -> FaultProxy {
            guard let port = URLComponents(string: url)?.port.flatMap(UInt16.init(exactly:)) else {
                throw BenchmarkFailure("the delayed rows need a PostgreSQL URL with a port: \(redactingPassword(url))")
            }
            let proxy = try FaultProxy(upstreamPort: port)
            proxy.fault = .latency(addedRoundTrip / 2)
            return proxy
        }

        /// The older `abrova` of `ABROVA_BENCH_BASELINE_SERVE`, if given and executable.
        static func baselineExecutable() -> URL? {
            guard let path = ProcessInfo.processInfo.environment["ABROVA_BENCH_BASELINE_SERVE"] else { return nil }
            return FileManager.default.isExecutableFile(atPath: path) ? URL(fileURLWithPath: path) : nil
        }

        /// The `abrova` to serve with: `ABROVA_BENCH_SERVE`, or that of the same build, if it was built.
        static func abrovaExecutable() -> URL? {
            let url =
                ProcessInfo.processInfo.environment["ABROVA_BENCH_SERVE"].map(URL.init(fileURLWithPath:))
                ?? benchmarkFolder.appendingPathComponent("abrova")
            return FileManager.default.isExecutableFile(atPath: url.path) ? url : nil
        }

    }

    /// An `abrova serve --port 0 --loopback` process in development mode, and the port it serves on.
    ///
    /// It runs under a small shell that reads a pipe from this process (the lifeline) and, at its
    /// end, stops the server with SIGTERM through `timeout`, which follows with SIGKILL after 10 s and
    /// reaps it. The pipe ends when `stop()` closes it or when this process dies, however it dies, so
    /// no server outlives the benchmark.
    final class ServeProcess {
        let port: UInt16
        private let shell: pid_t
        private var lifeline: Int32
        private var isStopped = false

        /// Stops the server (`$@`) when standard input ends.
        private static let supervisor = """
            timeout --kill-after=10 0 "$@" </dev/null &
            server=$!
            read -r line
            kill -TERM "$server" 2>/dev/null
            wait "$server"
            """

        /// Starts `executable serve` on `store` (`--database PATH` or `--postgres URL`), logging to the
        /// file `log`, and waits until it serves.
        ///
        /// - Throws: `BenchmarkFailure` when it exits or does not serve within 30 s (with its log).
        init(executable: URL, store: [String], log: String) throws {
            var ends: [Int32] = [0, 0]
            guard pipe(&ends) == 0 else { throw BenchmarkFailure("pipe: errno \(errno)") }
            // Neither end may leak into a later server's shell, or that one would keep this one's
            // lifeline open (the read end becomes the shell's standard input, which is kept).
            _ = fcntl(ends[0], F_SETFD, FD_CLOEXEC)
            _ = fcntl(ends[1], F_SETFD, FD_CLOEXEC)
            lifeline = ends[1]
            let output = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            defer {
                _ = close(ends[0])
                if output >= 0 { _ = close(output) }
            }
            guard output >= 0 else {
                _ = close(lifeline)
                throw BenchmarkFailure("cannot write \(log): errno \(errno)")
            }
            do {
                shell = try spawn(
                    ["/bin/sh", "-c", Self.supervisor, "abrova-serve", executable.path, "serve", "--port", "0", "--loopback"] + store,
                    input: ends[0], output: output)
            } catch {
                _ = close(lifeline)
                throw error
            }

            let deadline = ContinuousClock.now + .seconds(30)
            while true {
                let lines = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n")
                if let line = lines.first(where: { $0.hasPrefix("abrova serving ") }),
                    let marker = line.range(of: " on port ", options: .backwards), let port = UInt16(line[marker.upperBound...])
                {
                    self.port = port
                    return
                }
                let hasFailed = lines.contains { $0.hasPrefix("abrova: ") }
                if hasFailed || ContinuousClock.now > deadline {
                    self.port = 0
                    stop()
                    throw BenchmarkFailure(
                        "abrova serve \(hasFailed ? "failed" : "did not start within 30 s"):\n\(lines.joined(separator: "\n"))")
                }
                Thread.sleep(forTimeInterval: 0.01)
            }
        }

        deinit { stop() }

        /// Stops the server and waits until it has exited.
        func stop() {
            guard !isStopped else { return }
            isStopped = true
            _ = close(lifeline)
            var status: Int32 = 0
            while waitpid(shell, &status, 0) < 0 && errno == EINTR {}
        }
    }

    /// Starts `arguments` (the first is the executable's path) with standard input from `input` and
    /// standard output and error to `output`, and returns its process id.
    ///
    /// It starts with no signal blocked and every signal's default action: a new process inherits the
    /// mask of the thread that starts it, and threads under Dispatch block most signals, which would
    /// leave the server deaf to SIGTERM. It gets a process group of its own, so that a terminal's
    /// Ctrl-C reaches only the benchmark, whose end then stops it.
    private func spawn(_ arguments: [String], input: Int32, output: Int32) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, input, 0)
        posix_spawn_file_actions_adddup2(&actions, output, 1)
        posix_spawn_file_actions_adddup2(&actions, output, 2)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var signals = sigset_t()
        sigemptyset(&signals)
        posix_spawnattr_setsigmask(&attributes, &signals)
        sigfillset(&signals)
        posix_spawnattr_setsigdefault(&attributes, &signals)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))

        let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { for argument in argv { free(argument) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, arguments[0], &actions, &attributes, argv, environ)
        guard result == 0 else { throw BenchmarkFailure("cannot start \(arguments[0]): errno \(result)") }
        return pid
    }
#endif
