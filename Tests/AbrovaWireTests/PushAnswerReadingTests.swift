import AbrovaCore
import AbrovaTestSupport
import Testing

@testable import AbrovaWire

/// The uncontested push answer read in one pass against the same answer read as a tree: what the
/// one pass takes, the tree takes alike; anything else is left to the tree.
@Suite struct PushAnswerReadingTests {
    /// An answer of up to six results, most of them uncontested, some of every other kind.
    static func answer(_ choices: inout Choices) -> PushResponse {
        var results: [ChangeResult] = []
        for index in 0..<choices.int(in: 0...6) {
            let version = Version(UInt64(choices.int(in: 0...1_000_000)))
            switch choices.below(6) {
            case 0:
                var state = DocumentState()
                state.applyLocally(try! DocumentDelta.create(["n": .int(Int64(index))], base: .zero), at: version)
                results.append(.applied(version: version, state: state, conflicts: []))
            case 1: results.append(.rejected(reason: .forbidden, message: "no \(index)"))
            default: results.append(.applied(version: version, state: nil, conflicts: []))
            }
        }
        return PushResponse(results: results, cursor: choices.below(3) == 0 ? "c1.AAAAAAAAAAE" : nil)
    }

    @Test func bothReadingsAgree() async {
        let failure = await Property.check(
            "push answer readings agree",
            generate: { choices in
                let answer = Self.answer(&choices)
                return (answer: answer, mutated: JSONMutation.mutated(answer.body, &choices))
            }
        ) { input in
            guard (try? PushResponse(body: input.answer.body)) == input.answer else {
                return "an answer is not read back: \(String(decoding: input.answer.body, as: UTF8.self))"
            }
            let isUncontested = input.answer.results.allSatisfy { if case .applied(_, nil, []) = $0 { true } else { false } }
            if isUncontested, PushResponse.readUncontested(input.answer.body) == nil { return "an uncontested answer is left to the tree" }
            guard let onePass = PushResponse.readUncontested(input.mutated) else { return nil }
            let tree = Result { () throws(Refusal) in try PushResponse.readResults(input.mutated) }
            if tree != .success(onePass) { return "\(String(decoding: input.mutated, as: UTF8.self)): \(onePass) vs the tree's \(tree)" }
            return nil
        }
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
    }

    @Test(arguments: [
        #"{"results":[{"conflicts":[],"status":"applied","version":1,"version":2}]}"#,
        #"{"results":[{"conflicts":[],"status":"applied","version":-1}]}"#,
        #"{"results":[{"conflicts":[],"status":"applied","version":1.0}]}"#,
        #"{"results":[{"conflicts":[],"status":"applied","version":1,"x":1}]}"#,
        #"{"results":[{"conflicts":[],"status":"applied"}]}"#,
        #"{"results":[{"conflicts":[],"status":"applied","version":1}],"results":[]}"#,
        #"{"results":[{"conflicts":[],"status":"applied","version":1}]} x"#,
        #"{"results":[],"x":1}"#,
        #" { "results" : [ { "conflicts" : [ ] , "status" : "applied" , "version" : 7 } ] } "#,
        #"{"results":[]}"#,
        #"{"cursor":"c1.x","results":[{"conflicts":[],"status":"applied","version":1}]}"#,
        #"{"cursor":7,"results":[]}"#,
        #"{"results":[],"cursor":"c1.x"}"#,
        #"[]"#,
    ])
    func edgeCasesAgree(text: String) {
        let bytes = Array(text.utf8)
        let read = Result { () throws(Refusal) in try PushResponse(body: bytes) }
        #expect(read == Result { () throws(Refusal) in try PushResponse.readResults(bytes) })
    }
}
