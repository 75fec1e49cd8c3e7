import AbrovaCore
import AbrovaHTTP
import AbrovaSQLite
import AbrovaServer
import AbrovaWire
import Dispatch
import Foundation

/// What `abrova serve` was asked for.
struct ServeOptions {
    var port: UInt16 = 8080
    var databasePath = "abrova.sqlite"
    var postgresURL: String?
    var postgresConnections = 8
    var rulesPath: String?
    var authPath: String?
    var threads = 8
    var retentionDays = 30.0
    /// Asked for with `--loopback`; development mode listens on loopback only in any case.
    var loopbackOnly = false
    /// `--dev-on-all-interfaces`: development mode, yet reachable from the network.
    var developmentOnAllInterfaces = false
    /// The largest request body, as sent and after decompression; `nil`: 16 MiB and 32 MiB.
    var maximumBodyBytes: Int?
    var maximumBatchChanges = WireLimits().maximumChanges
    var maximumPageBytes = WireLimits().maximumPageBytes
    var maximumConnectionsPerAddress = 256
    var minimumBytesPerSecond = HTTPServerConfiguration().minimumBytesPerSecond
    var logFormat = LogFormat.text
    /// `--metrics-port`: `GET /metrics` on a listener of its own.
    var metricsPort: UInt16?
    /// `--metrics-token`: the bearer token a scraper sends; without one the metrics listen on
    /// loopback only.
    var metricsToken: String?

    /// Whether the server binds 127.0.0.1 only. Development mode lets anyone act as any user, so it
    /// stays on this machine unless asked for by a flag that says so.
    var bindsLoopbackOnly: Bool {
        loopbackOnly || (authPath == nil && !developmentOnAllInterfaces)
    }
}

/// Writes one line to standard output at once (the log is read while the server runs).
@Sendable func logLine(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// Serves until SIGINT or SIGTERM, then finishes the requests in flight and stops.
///
/// Callbacks handed to C (the HTTP server's) live here, outside `main.swift`, so that they are not
/// main-actor isolated.
func runServer(_ options: ServeOptions) throws {
    let format = options.logFormat
    let say: @Sendable (String) -> Void = { logLine(format.line($0)) }
    let warn: @Sendable (String) -> Void = { logLine(format.line($0, level: "warning")) }
    let rules = try options.rulesPath.map { path in try RuleBook(json: try readFile(path)) } ?? RuleBook()
    let authFile = try options.authPath.map { path throws(Refusal) in try AuthFile(path: path, log: say) }
    let authenticator: any Authenticator = authFile ?? DevelopmentAuthenticator()
    let store: any ServerStore
    let storeName: String
    if let url = options.postgresURL {
        storeName = "PostgreSQL at \(redactingPassword(url))"
        do {
            store = try PostgresServerStore(url: url, maximumConnections: options.postgresConnections)
        } catch let error as ServerStoreError {
            throw ServeFailure("cannot use the database \(storeName): \(error.message)")
        }
    } else {
        storeName = options.databasePath
        do {
            store = try SQLiteServerStore(path: options.databasePath)
        } catch let error as SQLiteError {
            throw ServeFailure("cannot open the database \(options.databasePath): \(error.message)")
        } catch let error as ServerStoreError {
            throw ServeFailure("cannot use the database \(options.databasePath): \(error.message)")
        }
    }
    let limits = WireLimits(maximumChanges: options.maximumBatchChanges, maximumPageBytes: options.maximumPageBytes)
    let service = try SyncService(
        store: store, rules: rules,
        configuration: ServiceConfiguration(
            limits: limits, tombstoneRetention: options.retentionDays * 24 * 3600, log: { logLine(format.line($0, level: "error")) }))
    // Pushes and pulls wait on the store on worker threads; more than the connections to
    // PostgreSQL would only wait for one.
    var http = HTTPServerConfiguration(
        port: options.port, threadCount: options.threads,
        workerCount: min(options.postgresURL == nil ? options.threads : options.postgresConnections, 1_024),
        loopbackOnly: options.bindsLoopbackOnly,
        maximumConnectionsPerAddress: options.maximumConnectionsPerAddress,
        minimumBytesPerSecond: options.minimumBytesPerSecond)
    var bodyLimits = BodyLimits(maximumBodyBytes: http.maximumBodyBytes)
    if let bytes = options.maximumBodyBytes {
        http.maximumBodyBytes = bytes
        bodyLimits.maximumBodyBytes = bytes
        bodyLimits.maximumDecompressedBytes = bytes
    }
    let handler = SyncHTTPHandler(service: service, authenticator: authenticator, limits: bodyLimits, logFormat: format, log: logLine)
    let server = try HTTPServer(configuration: http) { request in
        handler.handle(request)
    }
    var metricsServer: HTTPServer?
    if let port = options.metricsPort {
        // Without a token the metrics stay on this machine.
        let metricsHTTP = HTTPServerConfiguration(
            port: port, threadCount: 1, loopbackOnly: options.metricsToken == nil || http.loopbackOnly)
        let metrics = MetricsHTTPHandler(service: service, token: options.metricsToken)
        metricsServer = try HTTPServer(configuration: metricsHTTP) { request in metrics.handle(request) }
    }
    say("abrova \(AbrovaRelease.version)")
    say("abrova serving \(storeName) (\(http.loopbackOnly ? "127.0.0.1 only" : "every interface")) on port \(server.port)")
    if let metricsServer {
        let reach = options.metricsToken == nil || http.loopbackOnly ? "127.0.0.1 only" : "every interface, with its token"
        say("abrova metrics on port \(metricsServer.port) (\(reach)): GET /metrics")
    }
    if authFile == nil {
        warn("warning: no --auth file: development mode, any API key is accepted and a bearer token is its user's id")
        if options.developmentOnAllInterfaces {
            warn(
                "WARNING: --dev-on-all-interfaces: development mode on every interface; anyone who can reach this port can read and write as any user"
            )
        }
    }

    // Expired tombstones are removed hourly, and once at start.
    let purge = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "abrova.purge"))
    purge.schedule(deadline: .now(), repeating: .seconds(3_600))
    purge.setEventHandler {
        do {
            try service.purgeExpiredTombstones()
        } catch {
            warn("tombstone purge failed: \(error)")
        }
    }
    purge.resume()

    let stopped = DispatchSemaphore(value: 0)
    var sources: [DispatchSourceSignal] = []
    for signalNumber in [SIGINT, SIGTERM] {
        signal(signalNumber, SIG_IGN) // handled by the dispatch source instead
        let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: DispatchQueue(label: "abrova.signals"))
        source.setEventHandler { stopped.signal() }
        source.resume()
        sources.append(source)
    }
    // SIGHUP reads the auth file again at once (it is also read again when it changes). Without
    // one, SIGHUP ends the server as it ends any program.
    if let authFile {
        signal(SIGHUP, SIG_IGN)
        let hangUp = DispatchSource.makeSignalSource(signal: SIGHUP, queue: DispatchQueue(label: "abrova.reload"))
        hangUp.setEventHandler { authFile.reload() }
        hangUp.resume()
        sources.append(hangUp)
    }
    stopped.wait()
    say("stopping: finishing requests in flight")
    purge.cancel()
    // Waiting watches are told "nothing new" first, so their devices simply watch again elsewhere.
    service.stopWatching()
    server.shutdown(timeout: .seconds(30))
    metricsServer?.shutdown(timeout: .seconds(1))
    say("stopped")
}

/// Why the server could not start, in words.
struct ServeFailure: Error, CustomStringConvertible {
    let description: String
    /// One line: a library's message of several lines (libpq's) is joined.
    init(_ description: String) {
        self.description = description.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            .joined(separator: " ")
    }
}

func readFile(_ path: String) throws -> [UInt8] {
    guard let data = FileManager.default.contents(atPath: path) else {
        throw Refusal.invalid("cannot read \(path)")
    }
    return Array(data)
}
