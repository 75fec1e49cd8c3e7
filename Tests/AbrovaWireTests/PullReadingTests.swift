import AbrovaCore
import AbrovaTestSupport
import Testing

@testable import AbrovaWire

/// A page read in one pass against the same page read as a tree: what the one pass takes, the
/// tree takes alike; anything else is left to the tree.
@Suite struct PullReadingTests {
    /// A page of documents of every kind: flat, nested, with a set, with a removed field, deleted.
    static func page(_ choices: inout Choices) throws -> PullResponse {
        var documents: [ServerDocument] = []
        for index in 0..<choices.int(in: 0...4) {
            var state = DocumentState()
            var version = Version(UInt64(choices.int(in: 1...1_000)))
            let data: [String: Value] =
                switch choices.below(3) {
                case 0: ["title": .string("t\(index)"), "qty": .int(Int64(index)), "price": .double(2.5), "done": .bool(true)]
                case 1: ["address": ["city": "Lyon", "zip": .int(69_001)], "tags": ["a", "b"], "note": .null]
                default: ["empty": .map([:]), "list": .array([.int(1), .array([])]), "text": "caf\u{e9} \"quoted\"\n"]
                }
            state.applyLocally(try DocumentDelta.create(data, base: .zero), at: version)
            if choices.chance(oneIn: 2) {
                version = version.next
                let set = try FieldPath("members")
                state.applyLocally(try DocumentDelta.update(setAdd: [set: ["ana", "ben"]], base: state.version), at: version)
            }
            if choices.chance(oneIn: 3) {
                version = version.next
                state.applyLocally(
                    try DocumentDelta.update(remove: [try FieldPath(data.keys.sorted()[0])], base: state.version), at: version)
            }
            if choices.chance(oneIn: 4) {
                version = version.next
                state.applyLocally(DocumentDelta.delete(base: state.version), at: version)
            }
            documents.append(ServerDocument(key: DocumentKey(collection: "items", id: "i\(index)"), version: version, state: state))
        }
        return PullResponse(documents: documents, cursor: "c1.\(choices.below(1_000))", hasMore: choices.chance(oneIn: 2))
    }

    @Test func bothReadingsAgree() async {
        let failure = await Property.check(
            "page readings agree",
            generate: { choices in
                let page = (try? Self.page(&choices)) ?? PullResponse(documents: [], cursor: "", hasMore: false)
                return (page: page, mutated: JSONMutation.mutated(page.body, &choices))
            }
        ) { input in
            guard let read = PullResponse.readInOnePass(input.page.body), read == input.page else {
                return "a page is not read back in one pass: \(String(decoding: input.page.body, as: UTF8.self))"
            }
            // What the one-pass reading takes, the tree must take alike; the rest goes to the tree.
            // (Its refusals are not compared: with two faults in one object, which one a tree
            // names depends on its dictionary's order, which differs from one reading to the next.)
            guard let onePass = PullResponse.readInOnePass(input.mutated) else { return nil }
            let tree = Result { () throws(Refusal) in try PullResponse.readAsTree(input.mutated) }
            if tree != .success(onePass) { return "\(String(decoding: input.mutated, as: UTF8.self)): \(onePass) vs the tree's \(tree)" }
            return nil
        }
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
    }

    @Test(arguments: [
        #"{"cursor":"c","documents":[],"hasMore":false,"cursor":"d"}"#,
        #"{"cursor":"c","documents":[{"collection":"c","id":"i","version":1,"state":{"e":[1,1],"f":{}},"id":"j"}],"hasMore":false}"#,
        #"{"cursor":"c","documents":[{"collection":"c","id":"i","version":-1,"state":{"e":[1,1],"f":{}}}],"hasMore":false}"#,
        #"{"cursor":"c","documents":[{"collection":"c","id":"i","version":1}],"hasMore":false}"#,
        #"{"cursor":"c","documents":[{"collection":"c","id":"i","version":1,"state":{"e":[1,1],"f":{}},"x":1}],"hasMore":false}"#,
        #"{"cursor":"c","documents":[{"collection":"c","id":"i","version":1,"state":{"e":[1,1],"f":{}},"data":{"a":1,"a":2}}],"hasMore":false}"#,
        #"{"cursor":"c","documents":[],"hasMore":false,"x":1}"#,
        #"{"cursor":1,"documents":[],"hasMore":false}"#,
        #"{"documents":[],"hasMore":false}"#,
        #"[]"#,
    ])
    func edgeCasesAgree(text: String) {
        let bytes = Array(text.utf8)
        let onePass = Result { () throws(Refusal) in try PullResponse(body: bytes) }
        #expect(onePass == Result { () throws(Refusal) in try PullResponse.readAsTree(bytes) })
    }
}
