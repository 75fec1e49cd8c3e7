import AbrovaCore
import AbrovaTestSupport
import Testing

@testable import AbrovaStore

/// The queue keeps the app's order across batches: whatever the batch limits, the writes one batch
/// carries were all made before every write a later batch carries (a batch is applied in one
/// transaction, so the order inside it is not observable), and every write is sent exactly once.
/// Each write assigns a field of its own (`w<n>`, n its place in the app's order), so a batch's
/// assignments say which writes it carries.
@Suite struct QueueOrderTests {
    enum Step: CustomStringConvertible {
        /// Write number `n` on `document`, made while the server answers when `asWritten`.
        case write(document: Int, asWritten: Bool)
        /// Freezes and settles batches of at most `changes` changes and `bytes` bytes, `count` of them.
        case push(changes: Int, bytes: Int, count: Int)

        var description: String {
            switch self {
            case .write(let document, let asWritten): "write c\(document)\(asWritten ? " as written" : "")"
            case .push(let changes, let bytes, let count): "push \(count) (\(changes) changes, \(bytes) bytes)"
            }
        }
    }

    struct Script: CustomStringConvertible {
        var strategy: ConflictStrategy
        var steps: [Step]
        var description: String { "\(strategy): " + steps.map(\.description).joined(separator: "; ") }
    }

    static func script(_ choices: inout Choices) -> Script {
        let strategy = choices.element(of: ConflictStrategy.allCases)
        let steps: [Step] = (0..<choices.int(in: 1...60)).map { _ in
            if choices.chance(oneIn: 8) {
                return .push(changes: choices.int(in: 1...4), bytes: choices.int(in: 1...1_500), count: choices.int(in: 1...3))
            }
            return .write(document: choices.below(4), asWritten: choices.chance(oneIn: 6))
        }
        return Script(strategy: strategy, steps: steps)
    }

    @Test func batchesCarryTheWritesInTheAppsOrderEachOnce() async {
        let failure = await Property.checkCatching("batches keep the app's order", cases: 300, generate: Self.script) { script in
            try await Self.run(script)
        }
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
    }

    static func run(_ script: Script) async throws -> String? {
        let folder = TemporaryFolder()
        let store = try LocalStore(path: folder.path("device.sqlite"))
        var server = InMemoryServer()
        let keys = (0..<4).map { DocumentKey(collection: "carts", id: "c\($0)") }
        var created: Set<Int> = []
        var written = 0
        // The writes each batch carried, in the order the batches were sent.
        var batches: [[Int]] = []

        func push(changes: Int, bytes: Int) async throws -> Bool {
            guard let frozen = try await store.freezeBatch(maximumChanges: changes, maximumBytes: bytes) else { return false }
            batches.append(
                frozen.batch.changes.flatMap { change in
                    change.delta.assignments.keys.compactMap { Int($0.dotted.dropFirst()) }
                })
            _ = try await store.settle(batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: script.strategy))
            try await store.resolveEveryConflictKeepingTheServersDocument()
            return true
        }

        for step in script.steps {
            switch step {
            case .write(let document, let asWritten):
                let field = "w\(written)"
                let operation: WriteOperation =
                    created.contains(document)
                    ? .update(set: [try FieldPath(field): .int(Int64(written))], remove: [], setAdd: [:], setRemove: [:])
                    : .set([field: .int(Int64(written))])
                _ = try await store.write(operation, for: keys[document], asWritten: asWritten)
                created.insert(document)
                written += 1
            case .push(let changes, let bytes, let count):
                for _ in 0..<count where try await push(changes: changes, bytes: bytes) {}
            }
        }
        while try await push(changes: 3, bytes: 1_000) {}

        let sent = batches.flatMap { $0 }
        if sent.sorted() != Array(0..<written) { return "sent \(sent.sorted()), written 0..<\(written)" }
        let carrying = batches.filter { !$0.isEmpty }
        for (earlier, later) in zip(carrying, carrying.dropFirst()) {
            if earlier.max()! > later.min()! { return "a batch carried \(earlier.sorted()), the next \(later.sorted())" }
        }
        if await store.unsentWriteCount != 0 { return "\(await store.unsentWriteCount) writes left unsent" }
        return nil
    }
}
