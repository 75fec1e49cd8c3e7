import AbrovaCore
import AbrovaTestSupport
import Foundation
import Testing

@testable import AbrovaStore

/// Devices (real stores in temporary files) write offline, push (sometimes losing the server's
/// answer, then retrying) and pull in random order against one server; after syncing until quiet
/// every device shows exactly the server's documents and has nothing left to send.
@Suite struct ConvergenceTests {
    enum Step: CustomStringConvertible {
        case setData(device: Int, document: Int, data: [String: Value])
        case update(device: Int, document: Int, field: String, value: Value)
        case removeField(device: Int, document: Int, field: String)
        case addToSet(device: Int, document: Int, element: Value)
        case removeFromSet(device: Int, document: Int, element: Value)
        case delete(device: Int, document: Int)
        case push(device: Int)
        case pushLosingTheAnswer(device: Int)
        case pull(device: Int)

        var description: String {
            switch self {
            case .setData(let device, let document, let data): "d\(device) set c\(document)=\(Value.map(data))"
            case .update(let device, let document, let field, let value): "d\(device) c\(document).\(field)=\(value)"
            case .removeField(let device, let document, let field): "d\(device) unset c\(document).\(field)"
            case .addToSet(let device, let document, let element): "d\(device) c\(document).items+\(element)"
            case .removeFromSet(let device, let document, let element): "d\(device) c\(document).items-\(element)"
            case .delete(let device, let document): "d\(device) delete c\(document)"
            case .push(let device): "d\(device) push"
            case .pushLosingTheAnswer(let device): "d\(device) push, answer lost"
            case .pull(let device): "d\(device) pull"
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
        let values: [Value] = [0, 1, "x", "y", true]
        let steps: [Step] = (0..<choices.int(in: 1...24)).map { _ in
            let device = choices.below(2)
            let document = choices.below(2)
            switch choices.below(10) {
            case 0:
                return .setData(
                    device: device, document: document,
                    data: ["a": choices.element(of: values), "b": choices.element(of: values)])
            case 1, 2:
                return .update(
                    device: device, document: document, field: choices.element(of: ["a", "b", "c"]),
                    value: choices.element(of: values))
            case 3: return .removeField(device: device, document: document, field: choices.element(of: ["a", "b"]))
            case 4: return .addToSet(device: device, document: document, element: choices.element(of: ["milk", "eggs"]))
            case 5: return .removeFromSet(device: device, document: document, element: choices.element(of: ["milk", "eggs"]))
            case 6: return .delete(device: device, document: document)
            case 7: return .push(device: device)
            case 8: return .pushLosingTheAnswer(device: device)
            default: return .pull(device: device)
            }
        }
        return Script(strategy: strategy, steps: steps)
    }

    @Test func devicesConvergeToTheServerAfterSyncingUntilQuiet() async {
        let failure = await Property.checkCatching("devices converge", cases: 300, generate: Self.script) { script in
            try await Self.run(script)
        }
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
    }

    static func run(_ script: Script) async throws -> String? {
        let folder = TemporaryFolder()
        var devices = try (0..<2).map { try LocalStore(path: folder.path("device\($0).sqlite")) }
        var server = InMemoryServer()
        let keys = (0..<2).map { DocumentKey(collection: "carts", id: "c\($0)") }
        let items = try FieldPath("items")

        func push(_ device: LocalStore, losingTheAnswer: Bool = false) async throws -> Bool {
            guard let frozen = try await device.freezeBatch() else { return false }
            let answer = server.push(frozen.batch, strategy: script.strategy)
            guard !losingTheAnswer else { return true }
            _ = try await device.settle(batch: frozen.batch.sequence, results: answer)
            // Under manual, the app's resolver keeps the server's document (the document's later
            // changes wait until it has decided).
            try await device.resolveEveryConflictKeepingTheServersDocument()
            return true
        }
        func pull(_ device: LocalStore) async throws {
            let page = server.pull(after: try await device.pullCursor())
            try await device.applyPulledPage(page.documents, cursor: page.cursor)
        }

        for step in script.steps {
            do {
                switch step {
                case .setData(let device, let document, let data):
                    try await devices[device].setData(data, for: keys[document])
                case .update(let device, let document, let field, let value):
                    try await devices[device].updateData(for: keys[document], set: [try FieldPath(field): value])
                case .removeField(let device, let document, let field):
                    try await devices[device].updateData(for: keys[document], remove: [try FieldPath(field)])
                case .addToSet(let device, let document, let element):
                    try await devices[device].updateData(for: keys[document], setAdd: [items: [element]])
                case .removeFromSet(let device, let document, let element):
                    try await devices[device].updateData(for: keys[document], setRemove: [items: [element]])
                case .delete(let device, let document):
                    try await devices[device].delete(keys[document])
                case .push(let device):
                    _ = try await push(devices[device])
                case .pushLosingTheAnswer(let device):
                    _ = try await push(devices[device], losingTheAnswer: true)
                case .pull(let device):
                    try await pull(devices[device])
                }
            } catch let error as StoreError where error.code == .documentNotFound {
                continue // an update of a document this device does not have: refused, as it should be
            }
        }

        // Sync until quiet: push everything (retrying a batch whose answer was lost), then pull.
        for _ in 0..<10 {
            var pushed = false
            for device in devices {
                while try await push(device) { pushed = true }
            }
            for device in devices { try await pull(device) }
            if !pushed { break }
        }
        // Then each device, as it is and reopened from its file, shows the server's documents.
        for (index, device) in devices.enumerated() {
            if let problem = try await Self.differences(device, index, keys, server) { return problem }
        }
        devices.removeAll() // closes the files
        for index in 0..<2 {
            let reopened = try LocalStore(path: folder.path("device\(index).sqlite"))
            if let problem = try await Self.differences(reopened, index, keys, server) { return "reopened: " + problem }
        }
        return nil
    }

    static func differences(_ device: LocalStore, _ index: Int, _ keys: [DocumentKey], _ server: InMemoryServer) async throws -> String? {
        if await device.unsentWriteCount != 0 { return "device \(index) still has \(await device.unsentWriteCount) unsent writes" }
        for key in keys {
            let snapshot = try await device.document(key)
            let onServer = server.documents[key]?.document
            if snapshot.data != onServer {
                return
                    "device \(index) shows \(key) as \(snapshot.data?.description ?? "nothing"), the server has \(onServer?.description ?? "nothing")"
            }
            if snapshot.metadata.hasPendingWrites { return "device \(index) says \(key) has pending writes" }
        }
        return nil
    }
}

extension LocalStore {
    /// The app's resolver under manual, keeping the server's document for every conflict left to it.
    func resolveEveryConflictKeepingTheServersDocument() throws {
        for conflict in try unresolvedConflicts() {
            let seen = try confirmedDocument(conflict.key).version
            try resolveConflict(conflict.key, with: nil, seenVersion: seen)
        }
    }
}
