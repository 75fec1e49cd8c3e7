import AbrovaCore
import AbrovaWire
import Foundation

/// The bodies of the protocol's fixture vectors (Fixtures/wire/*.json, Spec/protocol.md), as seeds.
public struct WireCorpus: Sendable {
    /// Push bodies: each valid case as written and in its canonical form, and each refused text.
    public var pushBodies: [[UInt8]]
    /// Answer bodies (pushes, pages, documents), as written and canonical.
    public var answerBodies: [[UInt8]]
    /// Why the fixtures could not be read, when they could not (the seeds built in code remain).
    public var problem: String?

    /// A corpus of these bodies.
    public init(pushBodies: [[UInt8]] = [], answerBodies: [[UInt8]] = [], problem: String? = nil) {
        self.pushBodies = pushBodies
        self.answerBodies = answerBodies
        self.problem = problem
    }

    /// Fixtures/wire in the source tree this module was built from.
    public static let sourceTreeFolder = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/wire")

    /// Reads every `.json` file in `folder`; a folder that cannot be read gives an empty corpus
    /// that says why.
    public static func load(from folder: URL = sourceTreeFolder) -> WireCorpus {
        do {
            var corpus = WireCorpus()
            let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".json") }.sorted()
            for file in files {
                // Deeper than a document's limit: the fixtures wrap bodies that hold values nested to it.
                let root = try Value(json: try Data(contentsOf: folder.appendingPathComponent(file)), maximumDepth: 64)
                for item in root.mapValue?["cases"]?.arrayValue ?? [] {
                    guard let fields = item.mapValue else { continue }
                    var bodies: [[UInt8]] = []
                    if let body = fields["body"] {
                        var bytes: [UInt8] = []
                        body.writeCanonicalJSON(to: &bytes)
                        bodies.append(bytes)
                    }
                    for key in ["canonical", "bodyText"] {
                        if let text = fields[key]?.stringValue { bodies.append(Array(text.utf8)) }
                    }
                    switch fields["kind"]?.stringValue {
                    case "pushRequest", "badPushRequest": corpus.pushBodies += bodies
                    case "pushResponse", "pullResponse", "document": corpus.answerBodies += bodies
                    default: continue
                    }
                }
            }
            return corpus
        } catch {
            return WireCorpus(
                problem: "the wire fixtures in \(folder.path) could not be read (\(error)); only the seeds built in code are used")
        }
    }
}

/// Valid bodies built with the library's own types, so that the seeds cover every part of the
/// protocol even without the fixture files.
enum BuiltSeeds {
    static let cart = DocumentKey(collection: "carts", id: "c1")
    static let milk = path("qty.milk")

    /// A path from a literal the library accepts; a refusal is a bug in the seeds.
    static func path(_ dotted: String) -> FieldPath {
        do { return try FieldPath(dotted) } catch { preconditionFailure("a built seed path was refused: \(error)") }
    }

    /// Deltas of every kind: a create with nested values of every type, updates with removals and
    /// set changes, a delete.
    static let deltas: [DocumentDelta] = {
        var deltas: [DocumentDelta] = []
        // Built from literals the library accepts; a refusal here is a bug in the seeds.
        do {
            deltas.append(
                try .create(
                    [
                        "items": ["milk", "eggs"], "owner": "ana", "qty": ["milk": 2, "eggs": 12],
                        "note": "caf\u{E9} \u{1F600} \"quoted\" \\ line\nbreak", "price": 2.5,
                        "done": false, "nothing": .null, "big": .int(Int64.max), "small": .int(Int64.min),
                        "nested": ["a": ["b": ["c": [1, [2, [3]]]]]],
                    ], base: .zero))
            deltas.append(
                try .update(
                    set: [path("qty.milk"): 3, path("note"): "x"],
                    remove: [path("price")],
                    setAdd: [path("items"): ["bread", ["kind": "rye"]]],
                    setRemove: [path("tags"): [1, "old"]], base: Version(41)))
            deltas.append(try .update(set: [path("a.b.c"): ["deep": [true]]], base: Version(UInt64(Int64.max))))
            deltas.append(.delete(base: Version(7)))
        } catch {
            preconditionFailure("a built seed delta was refused: \(error)")
        }
        return deltas
    }()

    /// Push bodies: one change of each delta, and a batch of several with strategies of their own.
    static let pushBodies: [[UInt8]] = {
        var bodies: [[UInt8]] = []
        for (index, delta) in deltas.enumerated() {
            let batch = Batch(
                clientID: "client-\(index)", sequence: Int64(index + 1),
                changes: [BatchChange(key: cart, delta: delta, writes: index + 1)])
            bodies.append(PushRequest(batch: batch, strategy: ConflictStrategy.allCases[index % 4]).body)
        }
        let changes = deltas.enumerated().map { index, delta in
            BatchChange(
                key: DocumentKey(collection: ["carts", "notes", "catalog", "shared"][index % 4], id: "doc-\(index)"),
                delta: delta, writes: 1, strategy: ConflictStrategy.allCases[(index + 1) % 4])
        }
        bodies.append(
            PushRequest(
                batch: Batch(
                    clientID: "4c1b9e0e-58f4-4d0c-9a50-6a3c8c1f0a77", sequence: 9_007_199_254_740_993,
                    changes: changes), strategy: .merge
            ).body)
        return bodies
    }()

    /// States of documents after those deltas, one after another.
    static let states: [DocumentState] = {
        var state = DocumentState()
        var states: [DocumentState] = []
        for (index, delta) in deltas.enumerated() {
            state.applyLocally(delta, at: Version(UInt64(40 + index)))
            states.append(state)
        }
        return states
    }()

    /// Answer bodies: a push answer with every kind of result, a page with documents and a
    /// tombstone, a document.
    static let answerBodies: [[UInt8]] = {
        let conflicts = [
            Conflict(path: milk, serverValue: 3, clientValue: 5, outcome: .serverWon),
            Conflict(path: .root, serverValue: nil, clientValue: ["a": 1], outcome: .unresolved),
        ]
        let push = PushResponse(results: [
            .applied(version: Version(41), state: states[0], conflicts: conflicts),
            .applied(version: Version(42), state: nil, conflicts: []),
            .unresolved(state: states[1], conflicts: conflicts),
            .rejected(reason: .forbidden, message: "the rules of orders refuse this write to orders/o1"),
        ])
        let documents = states.enumerated().map { index, state in
            ServerDocument(key: DocumentKey(collection: "carts", id: "c\(index)"), version: Version(UInt64(40 + index)), state: state)
        }
        let page = PullResponse(documents: documents, cursor: "c1.AAAAAAAAACkpS9sX0Vw4J1wJr5fZ1Wmq", hasMore: true)
        return [
            push.body, page.body, documents[0].body, documents[3].body,
            Refusal(.staleBatch, "batch 1 is older than batch 2").body,
        ]
    }()
}
