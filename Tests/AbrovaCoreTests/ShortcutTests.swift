import AbrovaTestSupport
import Testing

@testable import AbrovaCore

/// The two shortcuts of the server join: a new document skips the conflict bookkeeping, and an
/// uncontested change lets the push answer leave the state out for the client to compute. Both
/// must give exactly what the full join gives.
@Suite struct ShortcutTests {
    func expectNoFailure(_ failure: Property.Failure?) {
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
    }

    /// What a join came to: the state and report, or the error's code.
    enum Outcome: Equatable {
        case joined(DocumentState, JoinReport)
        case refused(ValueError.Code)
    }

    static func outcome(_ join: (inout DocumentState) throws(ValueError) -> JoinReport, on state: DocumentState) -> Outcome {
        var result = state
        do {
            let report = try join(&result)
            return .joined(result, report)
        } catch {
            return result == state ? .refused(error.code) : .joined(result, JoinReport()) // a refusal must leave the state
        }
    }

    struct NewDocumentChange: CustomStringConvertible {
        var operations: [Operation]
        var delta: DocumentDelta
        var description: String { "\(operations) on a new document" }
    }

    /// One to three operations composed on a device that never saw the document.
    static func newDocumentChange(_ choices: inout Choices) -> NewDocumentChange {
        var view = DocumentState()
        var delta = DocumentDelta()
        var operations: [Operation] = []
        for _ in 0..<choices.int(in: 1...3) {
            let operation = Generate.operation(&choices, view: view, afterPending: !operations.isEmpty)
            operations.append(operation)
            let part = operation.delta(base: .zero)
            view.applyLocally(part, at: Version(1))
            delta.compose(with: part)
        }
        return NewDocumentChange(operations: operations, delta: delta)
    }

    @Test func aNewDocumentJoinsAsTheFullJoinWouldUnderEveryStrategy() async {
        expectNoFailure(
            await Property.check("new document shortcut", generate: Self.newDocumentChange) { input in
                let version = Version(7)
                for strategy in ConflictStrategy.allCases {
                    let shortcut = Self.outcome(
                        { (state: inout DocumentState) throws(ValueError) in
                            try strategy.apply(input.delta, to: &state, version: version)
                        }, on: DocumentState())
                    let full = Self.outcome(
                        { (state: inout DocumentState) throws(ValueError) in
                            try strategy.applyInFull(input.delta, to: &state, version: version)
                        }, on: DocumentState())
                    if shortcut != full { return "\(strategy): the shortcut gave \(shortcut), the full join \(full)" }
                    if case .joined(let state, _) = full, state.version != (state.isPristine ? .zero : version) {
                        return "\(strategy): the state's version is \(state.version)"
                    }
                }
                return nil
            })
    }

    @Test func anUncontestedChangeJoinsAlikeUnderEveryStrategyAndAsTheClientComputesIt() async {
        var uncontested = 0
        expectNoFailure(
            await Property.check("uncontested", generate: PropertyTests.oneEdit) { input in
                let server = input.history.final
                guard server.isUncontested(by: input.delta) else { return nil }
                uncontested += 1
                // The client's confirmed state is the snapshot it edited.
                let confirmed = input.history.states[input.snapshot]
                let version = server.version.next
                let clientComputes = Self.outcome(
                    { (state: inout DocumentState) throws(ValueError) in
                        try ConflictStrategy.merge.apply(input.delta, to: &state, version: version)
                    }, on: confirmed)
                for strategy in ConflictStrategy.allCases {
                    let full = Self.outcome(
                        { (state: inout DocumentState) throws(ValueError) in
                            try strategy.applyInFull(input.delta, to: &state, version: version)
                        }, on: server)
                    if case .joined(_, let report) = full, !report.conflicts.isEmpty {
                        return "\(strategy): an uncontested change reported \(report.conflicts)"
                    }
                    if full != clientComputes { return "\(strategy): the server has \(full), the client computes \(clientComputes)" }
                }
                return nil
            })
        #expect(uncontested >= Property.plannedCases() / 20, "too few uncontested cases were generated: \(uncontested)")
    }
}
