import AbrovaHTTP
import AbrovaLocking
import AbrovaServer
import AbrovaSync
import Foundation

/// Why the demo stopped before its end.
public struct ShoppingCartDemoError: Error, Sendable, CustomStringConvertible {
    /// A sentence for people.
    public let message: String

    public var description: String { message }
}

/// A folder under the system's temporary directory for the demo's databases, removed by `remove()`.
struct DemoFolder: Sendable {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("abrova-demo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    func path(_ name: String) -> String { url.appendingPathComponent(name).path }

    func remove() { try? FileManager.default.removeItem(at: url) }
}

/// The sync server of `abrova serve`, on a free port of 127.0.0.1 and a SQLite database in the
/// demo's folder, with development sign-in (a bearer token is its user's id).
final class DemoServer: Sendable {
    let service: SyncService
    let server: HTTPServer
    let url: URL

    /// Starts the server; call it through `onOwnThread` (it opens a database and a socket).
    init(databasePath: String, rules: RuleBook) throws {
        let store = try SQLiteServerStore(path: databasePath, durability: .normal)
        service = try SyncService(store: store, rules: rules)
        let handler = SyncHTTPHandler(service: service, authenticator: DevelopmentAuthenticator())
        // Two request threads, and two workers, are plenty for two devices.
        server = try HTTPServer(configuration: HTTPServerConfiguration(port: 0, threadCount: 2, workerCount: 2, loopbackOnly: true)) {
            request in
            handler.handle(request)
        }
        url = URL(string: "http://127.0.0.1:\(server.port)")!
    }

    /// Finishes the requests in flight and stops listening, on a thread of its own.
    func stop() async {
        let server = server
        _ = try? await onOwnThread { server.shutdown(timeout: .seconds(2)) }
    }

    /// The document as the server keeps it, read as `user` would.
    func data(of key: DocumentKey, as user: String) async throws -> [String: Value]? {
        let service = service
        return try await onOwnThread { try service.document(key, caller: .user(user)).state.document?.mapValue }
    }
}

/// Runs blocking work (a socket, a database file) on a thread of its own, so that Swift
/// concurrency's few threads never wait on it.
func onOwnThread<Result: Sendable>(_ body: @escaping @Sendable () throws -> Result) async throws -> Result {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Swift.Result { try body() }) }.start()
    }
}

/// One device of the story: an SDK instance on its own store, and what it was told.
struct DemoDevice: Sendable {
    let name: String
    let sync: AbrovaSync
    let events: DeviceEvents

    /// A device signed in as `user`, on the merge strategy, with short request timeouts so that
    /// nothing waits long.
    init(name: String, user: String, server: URL, storePath: String, output: @escaping @Sendable (String) -> Void) throws {
        self.name = name
        let config = try AbrovaSyncConfigBuilder(apiKey: "demo")
            .serverURL(server)
            .storePath(storePath)
            .authToken(user)
            .conflictStrategy(.merge)
            .requestTimeout(.seconds(5))
            .build()
        sync = try AbrovaSync(config: config)
        events = DeviceEvents(device: name, output: output)
    }

    var carts: CollectionReference { sync.collection("carts") }

    /// Waits until the first sync, which a new instance starts at once, has finished, so that
    /// the events printed later belong to the story.
    func settle(within limit: Duration) async throws {
        let states = sync.connectionStateChanges
        try await race("\(name) reaches the server", within: limit) {
            for await state in states where state == .connected { return true }
            return false
        }
        try await waitUntil("\(name) finishes its first sync", within: limit) { sync.syncState == .idle }
        sync.addSyncListener(events)
    }

    /// Waits until a sync run has completed after `runs` had, and nothing is left to send.
    func waitForSync(after runs: Int, within limit: Duration) async throws {
        try await waitUntil("\(name) has synced", within: limit) {
            guard events.completedRuns > runs else { return false }
            return await sync.pendingCount == 0
        }
    }

    /// The cart as this device has it.
    func cart(_ id: String) async throws -> [String: Value]? {
        try await carts.document(id).getDocument(source: .cache).data?.mapValue
    }
}

/// Prints a device's sync events as the engine reports them, and keeps the conflicts and
/// refusals for the summary. The engine calls it from its actor, one event at a time.
final class DeviceEvents: SyncEngine.SyncListener {
    private struct Record {
        var completedRuns = 0
        var conflicts: [ReportedConflict] = []
        var rejections: [ReportedRejection] = []
    }

    let device: String
    let output: @Sendable (String) -> Void
    private let record = Protected(Record())

    init(device: String, output: @escaping @Sendable (String) -> Void) {
        self.device = device
        self.output = output
    }

    var completedRuns: Int { record.withLock { $0.completedRuns } }
    var conflicts: [ReportedConflict] { record.withLock { $0.conflicts } }
    var rejections: [ReportedRejection] { record.withLock { $0.rejections } }

    private func say(_ line: String) {
        output("      \(device.padding(toLength: 12, withPad: " ", startingAt: 0)) | \(line)")
    }

    func onSyncStarted() { say("sync started") }

    func onSyncCompleted(syncedCount: Int) {
        record.withLock { $0.completedRuns += 1 }
        say("sync done: \(syncedCount == 1 ? "1 write" : "\(syncedCount) writes") sent and applied, up to date with the server")
    }

    func onSyncFailed(error: any Error) { say("sync failed: \(error)") }

    func onDocumentSynced(documentId: String, operation: OperationType) { say("sent: \(operation) of \(documentId)") }

    func onConflictDetected(conflict info: ConflictInfo) {
        for conflict in info.conflicts {
            record.withLock {
                $0.conflicts.append(
                    ReportedConflict(
                        device: device, collection: info.collection, documentId: info.documentId,
                        conflict: conflict))
            }
            let field = conflict.path.isRoot ? "the document" : "field \(conflict.path.dotted)"
            say(
                "CONFLICT on \(info.collection)/\(info.documentId), \(field): server has \(describe(conflict.serverValue)), "
                    + "this device wanted \(describe(conflict.clientValue)) -> \(describe(conflict.outcome))")
        }
    }

    func onDocumentRejected(documentId: String, operation: OperationType, error: any Error) {
        let refusal = error as? AbrovaSyncError
        record.withLock {
            $0.rejections.append(
                ReportedRejection(
                    device: device, documentId: documentId, operation: operation,
                    statusCode: refusal?.statusCode, message: refusal?.message ?? "\(error)"))
        }
        let status = refusal?.statusCode.map { "\($0)" } ?? "no status"
        say("REFUSED: \(operation) of \(documentId) (\(status): \(refusal?.message ?? "\(error)")); dropped and rolled back")
    }
}

/// Waits (without blocking a thread) until `condition` holds, for at most `limit`.
///
/// - Throws: `ShoppingCartDemoError` when the time is up.
func waitUntil(_ what: String, within limit: Duration, _ condition: @escaping @Sendable () async -> Bool) async throws {
    try await race(what, within: limit) {
        while !Task.isCancelled {
            if await condition() { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return false
    }
}

/// Runs `body` for at most `limit`; it is cancelled when the time is up.
///
/// - Throws: `ShoppingCartDemoError` when `body` did not return true in time.
func race(_ what: String, within limit: Duration, _ body: @escaping @Sendable () async -> Bool) async throws {
    let met = await withTaskGroup(of: Bool.self) { group in
        group.addTask { await body() }
        group.addTask {
            try? await Task.sleep(for: limit)
            return false
        }
        let first = await group.next() ?? false
        group.cancelAll()
        return first
    }
    guard met else { throw ShoppingCartDemoError(message: "gave up after \(limit) waiting until \(what)") }
}

/// A value for people: JSON, or "(nothing)" for a removed field.
func describe(_ value: Value?) -> String { value.map(\.canonicalJSON) ?? "(nothing: removed)" }

func describe(_ outcome: Conflict.Outcome) -> String {
    switch outcome {
    case .serverWon: "the server's value stands"
    case .clientWon: "this device's value applied"
    case .merged: "merged element by element"
    case .unresolved: "left to the app's resolver"
    }
}
