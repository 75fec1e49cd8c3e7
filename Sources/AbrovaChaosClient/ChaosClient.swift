import AbrovaSync
import AbrovaTestSupport
import Foundation

/// What the command line asked for.
struct ClientOptions: Sendable {
    var mode = ""
    var storePath = ""
    var serverURL = URL(string: "http://127.0.0.1:8080")!
    var logPath = ""
    var dumpPath = ""
    var name = "c0"
    var seed: UInt64 = 1
    var restart = 0
    var apiKey = "test-key"
    var token = "token-ana"
    var timeout = Duration.seconds(2)

    static let usage = """
        usage: abrova-chaos-client run|settle|prepare|drive --store <path> --server <url> [--log <path>] [--dump <path>]
                                   [--name <client>] [--seed <n>] [--restart <n>] [--api-key <key>] [--token <token>]
                                   [--timeout-ms <n>]
        """

    init(_ arguments: [String]) throws {
        guard let mode = arguments.first, ["run", "settle", "prepare", "drive"].contains(mode), arguments.count % 2 == 1 else {
            throw ClientFailure(Self.usage)
        }
        self.mode = mode
        for index in stride(from: 1, to: arguments.count, by: 2) {
            let value = arguments[index + 1]
            switch arguments[index] {
            case "--store": storePath = value
            case "--server": serverURL = try URL(string: value).orThrow("not a URL: \(value)")
            case "--log": logPath = value
            case "--dump": dumpPath = value
            case "--name": name = value
            case "--seed": seed = try UInt64(value).orThrow("not a seed: \(value)")
            case "--restart": restart = try Int(value).orThrow("not a number: \(value)")
            case "--api-key": apiKey = value
            case "--token": token = value
            case "--timeout-ms": timeout = .milliseconds(try Int(value).orThrow("not a number: \(value)"))
            default: throw ClientFailure(Self.usage)
            }
        }
        guard !storePath.isEmpty else { throw ClientFailure(Self.usage) }
    }
}

struct ClientFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

extension Optional {
    func orThrow(_ message: String) throws -> Wrapped {
        guard let self else { throw ClientFailure(message) }
        return self
    }
}

/// Logs the conflicts the SDK reports.
final class ConflictLogger: SyncEngine.SyncListener {
    let log: ChaosLogFile?
    init(log: ChaosLogFile?) { self.log = log }

    func onConflictDetected(conflict: ConflictInfo) {
        for field in conflict.conflicts {
            log?.append(
                ChaosLogEntry(
                    .conflict, collection: conflict.collection, document: conflict.documentId, field: field.path.dotted,
                    value: field.clientValue?.stringValue ?? "", detail: field.outcome.rawValue))
        }
    }
}

/// The SDK as every mode opens it: the workload's strategies, a manual resolver, short retries.
func makeSync(_ options: ClientOptions) throws -> AbrovaSync {
    var builder = AbrovaSyncConfigBuilder(apiKey: options.apiKey)
        .serverURL(options.serverURL)
        .storePath(options.storePath)
        .authToken(options.token)
        .requestTimeout(options.timeout)
        .retryPolicy(RetryPolicy(initialDelay: .milliseconds(20), maximumDelay: .milliseconds(300)))
        .conflictStrategy(.merge)
    for (collection, strategy) in ChaosWorkload.sharedStrategies {
        builder = builder.conflictStrategy(strategy, for: collection)
    }
    let name = options.name
    // A test kills the process while its resolver is deciding (as an app the system ends while the
    // user chooses): the resolver says so on standard error, then takes this long.
    let delay = ProcessInfo.processInfo.environment["ABROVA_CHAOS_RESOLVER_DELAY_MS"].flatMap(Int.init)
    return try AbrovaSync(
        config: builder.conflictResolver { info in
            if let delay {
                FileHandle.standardError.write(Data("resolving \(info.collection)/\(info.documentId)\n".utf8))
                try? await Task.sleep(for: .milliseconds(delay))
            }
            return resolve(info, by: name)
        }.build())
}

/// The manual resolver: the server's document, with this client's own register as the device has
/// it, and of the two values of `x` the greater (so that every device decides alike).
func resolve(_ info: ConflictInfo, by name: String) -> ConflictResolution {
    guard let local = info.local, var merged = info.server else { return .useServer }
    var own = merged["own"]?.mapValue ?? [:]
    own[name] = local["own"]?.mapValue?[name]
    merged["own"] = own.isEmpty ? nil : .map(own)
    if let mine = local["x"]?.stringValue, mine > (merged["x"]?.stringValue ?? "") { merged["x"] = .string(mine) }
    return .use(merged)
}

/// Syncs until nothing is pending and a run completed, within `seconds`.
func syncUntilQuiet(_ sync: AbrovaSync, within seconds: Double) async -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1_000))
    while ContinuousClock.now < deadline {
        await sync.syncNow()
        if await sync.pendingCount == 0, sync.syncState == .idle { return true }
        try? await Task.sleep(for: .milliseconds(50))
    }
    return false
}

/// Every document of the workload's collections on the device, one line each
/// (`collection/id <canonical JSON>`), after a line `pending <count>`.
func dump(_ sync: AbrovaSync) async throws -> String {
    var lines: [String] = []
    for collection in ChaosWorkload.collections {
        for snapshot in try await sync.collection(collection).getDocuments() {
            guard let data = snapshot.data else { continue }
            lines.append("\(snapshot.key) \(data.canonicalJSON)\(snapshot.metadata.hasPendingWrites ? " pending" : "")")
        }
    }
    return (["pending \(await sync.pendingCount)"] + lines.sorted()).joined(separator: "\n") + "\n"
}

/// The `drive` mode: one command a line on standard input, one answer a line on standard output.
func drive(_ sync: AbrovaSync) async throws {
    func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
    while let line = readLine() {
        let words = line.split(separator: " ").map(String.init)
        switch words.first {
        case "now":
            say("now \(Date().timeIntervalSince1970)")
        case "set" where words.count == 5, "update" where words.count == 5:
            let reference = sync.collection(words[1]).document(words[2])
            do {
                let snapshot =
                    words[0] == "set"
                    ? try await reference.setData([words[3]: .string(words[4])])
                    : try await reference.updateData([words[3]: .value(.string(words[4]))])
                say(snapshot.metadata.hasPendingWrites ? "ok pending" : "ok confirmed")
            } catch {
                say("error \(error.statusCode ?? 0)")
            }
        case "sync":
            await sync.syncNow()
            say("ok \(await sync.pendingCount)")
        case "disconnect":
            await sync.disconnect()
            say("ok")
        case "reconnect":
            await sync.reconnect()
            say("ok")
        case "dump":
            say(try await dump(sync) + "end")
        case "quit":
            say("bye")
            return
        default:
            say("error unknown command: \(line)")
        }
    }
}
