import AbrovaHTTP
import AbrovaServer
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

@testable import AbrovaSync

/// Issue 14's property: random valid and refused writes, online and offline, over a few documents
/// of two collections, against the real server whose body and batch limits are drawn at random
/// (some tiny), through a proxy that sometimes answers with a captive portal's HTML page, cuts an
/// answer or a request, or resets. When quiet, every valid write's effect is on the server, no
/// valid write was reported refused, and the device equals the server.
@Suite struct NothingLostPropertyTests {
    /// One step of the app or of the network.
    enum Step: CustomStringConvertible {
        case set(document: Int, n: Int, kind: Kind)
        case update(document: Int, field: String, n: Int, kind: Kind)
        case delete(document: Int)
        case disconnect
        case reconnect
        case fault(FaultProxy.Fault)

        /// What a write holds: valid data, a field the rules refuse (400), or a value too large for
        /// the server's body limit when it is tiny (413).
        enum Kind: String { case valid, refused = "+invalid", large = "+large" }

        var description: String {
            switch self {
            case .set(let document, let n, let kind): "set d\(document) n=\(n)\(kind == .valid ? "" : kind.rawValue)"
            case .update(let document, let field, let n, let kind):
                "update d\(document) \(field)=\(n)\(kind == .valid ? "" : kind.rawValue)"
            case .delete(let document): "delete d\(document)"
            case .disconnect: "disconnect"
            case .reconnect: "reconnect"
            case .fault(let fault): "fault \(fault)"
            }
        }
    }

    struct Script: CustomStringConvertible {
        var steps: [Step]
        /// The server's limits: changes a batch, bytes a body (`nil`: the defaults), bytes a page.
        var maximumChanges: Int
        var maximumBodyBytes: Int?
        var maximumPageBytes: Int
        var description: String {
            "limits: \(maximumChanges) changes, \(maximumBodyBytes.map { "\($0) bytes" } ?? "default") bodies, "
                + "\(maximumPageBytes) bytes a page; \(steps)"
        }
    }

    /// Four documents in two collections, one rule book: authenticated users read and write, and a
    /// document holding `invalid` is refused.
    static let keys = [("notes", "d0"), ("notes", "d1"), ("carts", "d2"), ("carts", "d3")].map { DocumentKey(collection: $0.0, id: $0.1) }
    static let largeText = String(repeating: "x", count: 80_000)

    static func generate(_ choices: inout Choices) -> Script {
        var steps: [Step] = []
        var document = 0
        for index in 0..<choices.int(in: 1...14) {
            if choices.below(3) == 0 { document = choices.below(keys.count) } // mostly the same document: composed
            let kind: Step.Kind = choices.chance(oneIn: 5) ? .refused : choices.chance(oneIn: 8) ? .large : .valid
            switch choices.below(12) {
            case 0..<3: steps.append(.set(document: document, n: index, kind: kind))
            case 3: steps.append(.delete(document: document))
            case 4: steps.append(.disconnect)
            case 5: steps.append(.reconnect)
            case 6:
                let fault: FaultProxy.Fault =
                    switch choices.below(5) {
                    case 0: .foreignAnswer(status: choices.element(of: [400, 403, 404, 413]))
                    case 1: .cutResponse(afterBytes: choices.below(400))
                    case 2: .cutRequest(afterBytes: choices.below(600))
                    case 3: .reset
                    default: .none
                    }
                steps.append(.fault(fault))
            default: steps.append(.update(document: document, field: choices.element(of: ["a", "b"]), n: index, kind: kind))
            }
        }
        let tiny = choices.chance(oneIn: 2)
        return Script(
            steps: steps, maximumChanges: choices.element(of: [1, 2, 3, 1_000]),
            maximumBodyBytes: tiny ? choices.element(of: [4 << 10, 16 << 10, 64 << 10]) : nil,
            maximumPageBytes: choices.element(of: [1 << 10, 4 << 10, 8 << 20]))
    }

    /// The server's documents as the writes the server accepts make them, in order.
    struct Model {
        var documents: [Int: [String: Value]] = [:]
        var refusals = 0

        /// Applies a write the device accepted; a write the server refuses (its rules, a body too
        /// large for a tiny limit, an update of a document it does not have) changes nothing.
        mutating func apply(_ step: Step, largeIsRefused: Bool) {
            func refused(_ kind: Step.Kind) -> Bool { kind == .refused || (kind == .large && largeIsRefused) }
            switch step {
            case .set(let document, let n, let kind):
                if refused(kind) { refusals += 1 } else { documents[document] = Self.data(n, kind) }
            case .update(let document, let field, let n, let kind):
                if refused(kind) || documents[document] == nil {
                    refusals += 1
                } else {
                    for (name, value) in Self.data(n, kind) { documents[document]?[name == "n" ? field : name] = value }
                }
            case .delete(let document):
                documents[document] = nil
            case .disconnect, .reconnect, .fault:
                break
            }
        }

        static func data(_ n: Int, _ kind: Step.Kind) -> [String: Value] {
            switch kind {
            case .valid: ["n": .int(Int64(n))]
            case .refused: ["n": .int(Int64(n)), "invalid": true]
            case .large: ["n": .int(Int64(n)), "text": .string(largeText)]
            }
        }
    }

    static func run(_ script: Script) async throws -> String? {
        let folder = TemporaryFolder()
        let rules = SwitchableRules()
        let bodyBytes = script.maximumBodyBytes
        let live = try LiveSyncServer(
            rules: RuleBook(fallback: rules),
            limits: WireLimits(maximumChanges: script.maximumChanges, maximumPageBytes: script.maximumPageBytes),
            bodyLimits: bodyBytes.map { BodyLimits(maximumDecompressedBytes: $0, maximumBodyBytes: $0) } ?? BodyLimits(),
            http: HTTPServerConfiguration(port: 0, threadCount: 2, maximumBodyBytes: bodyBytes ?? 16 << 20, loopbackOnly: true))
        let proxy = try FaultProxy(upstreamPort: live.server.port)
        defer { proxy.stop() }
        let sync = try AbrovaSync(
            config: try AbrovaSyncConfigBuilder(apiKey: LiveSyncServer.apiKey)
                .serverURL(URL(string: "http://127.0.0.1:\(proxy.port)")!)
                .storePath(folder.path("device.sqlite"))
                .authToken(LiveSyncServer.token(of: "ana"))
                .requestTimeout(.seconds(2))
                .retryPolicy(RetryPolicy(initialDelay: .milliseconds(5), maximumDelay: .milliseconds(40)))
                .build())

        var model = Model()
        var thrown = 0
        for step in script.steps {
            let key = { (document: Int) in keys[document] }
            do {
                switch step {
                case .set(let document, let n, let kind):
                    try await sync.collection(key(document).collection).document(key(document).id).setData(Model.data(n, kind))
                case .update(let document, let field, let n, let kind):
                    var fields: [String: FieldValue] = [:]
                    for (name, value) in Model.data(n, kind) { fields[name == "n" ? field : name] = .value(value) }
                    try await sync.collection(key(document).collection).document(key(document).id).updateData(fields)
                case .delete(let document):
                    try await sync.collection(key(document).collection).document(key(document).id).delete()
                case .disconnect:
                    await sync.disconnect()
                case .reconnect:
                    await sync.reconnect()
                case .fault(let fault):
                    proxy.fault = fault
                }
                model.apply(step, largeIsRefused: bodyBytes != nil)
            } catch  where error.kind == .refused {
                // A write the server refused online (or the device at once: an update of a document
                // it does not show): it must be one the model refuses.
                thrown += 1
                var copy = model
                copy.apply(step, largeIsRefused: bodyBytes != nil)
                if copy.refusals == model.refusals { return "the valid write \(step) was refused: \(error)" }
                model = copy
            } catch {
                await sync.close()
                return "\(step) threw \(error)"
            }
        }
        // Quiet: the network heals and the device syncs until nothing is pending.
        proxy.fault = .none
        await sync.reconnect()
        var quiet = false
        for _ in 0..<100 {
            await sync.syncNow()
            if await sync.pendingCount == 0 {
                quiet = true
                break
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        await sync.syncNow()
        let problem =
            quiet
            ? try await differences(sync, live, model, thrown: thrown)
            : "still \(await sync.pendingCount) writes pending; state \(sync.syncState), \(String(describing: await sync.lastError))"
        await sync.close()
        await live.stop()
        return problem
    }

    static func differences(_ sync: AbrovaSync, _ live: LiveSyncServer, _ model: Model, thrown: Int) async throws -> String? {
        for (index, key) in keys.enumerated() {
            let onServer = try? live.service.document(key, caller: .user("ana")).state.document
            let wanted = model.documents[index].map(Value.map)
            if onServer != wanted {
                return "\(key) is \(Self.short(onServer)) on the server; the accepted writes make it \(Self.short(wanted))"
            }
            let shown = try await sync.collection(key.collection).document(key.id).getDocument(source: .cache).data
            if shown != onServer { return "\(key) shows \(Self.short(shown)); the server has \(Self.short(onServer))" }
        }
        // Every call the server refused is a write the model refuses (checked as it threw). Queued
        // writes' refusals are not counted: a write sent again after a later change of its
        // document that the server had applied (an update after a delete) may be refused for that.
        if thrown > model.refusals { return "\(thrown) refusals thrown for \(model.refusals) refused writes" }
        return nil
    }

    static func short(_ value: Value?) -> String {
        value.map { String($0.canonicalJSON.prefix(120)) } ?? "nothing"
    }

    @Test func everyValidWriteReachesTheServerThroughTinyLimitsForeignPagesAndCutAnswers() async {
        let failure = await Property.checkCatching("nothing valid is lost", cases: 300, generate: Self.generate) { script in
            try await Self.run(script)
        }
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
    }
}
