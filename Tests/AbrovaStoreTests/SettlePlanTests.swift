import AbrovaCore
import Testing

@testable import AbrovaStore

/// `SettledAnswer` and `SettlePlan` alone: what the server's answer does to the batch's documents,
/// the queue and memory, without a file (Spec/storage.md, "Batches").
@Suite struct SettlePlanTests {
    let cart = PlanFixtures.cart
    let list = PlanFixtures.list

    func frozen(_ changes: [BatchChange], rows: [Int64] = []) -> FrozenBatch {
        FrozenBatch(batch: Batch(clientID: "device", sequence: 1, changes: changes), body: [], rows: rows)
    }

    /// Plans the settle of `answer` over `pending` and `memory`, then lets memory follow it.
    func settle(_ answer: SettledAnswer, pending: [QueueRow] = [], memory: inout StoreMemory) throws -> SettlePlan {
        let plan = try SettlePlan(
            answer: answer, pending: SettlePlan.needsPendingRows(answer, memory: memory) ? pending : [],
            memory: memory, newOrigin: PlanFixtures.Origins().make)
        memory.settled(plan)
        #expect(memory.invariantViolations() == [])
        #expect(memory.inflight == nil)
        return plan
    }

    @Test func anUncontestedChangeJoinsTheConfirmedStateAtItsVersionAndLeavesNothingUnsent() throws {
        let create = try DocumentDelta.create(["n": 1], base: .zero)
        let batch = frozen([BatchChange(key: cart, delta: create, writes: 1)])
        let answer = try SettledAnswer(
            batch: batch, results: [.applied(version: Version(5), state: nil, conflicts: [])], confirmedBefore: [:])
        #expect(answer.confirmed[cart] == (try PlanFixtures.serverState(["n": 1], at: 5)))
        #expect(answer.reshown.isEmpty && answer.rollbacks.isEmpty && answer.report == SettleReport())
        var memory = PlanFixtures.memory(unsent: [UnsentRow(key: cart, writes: 1, view: #"{"n":1}"#)])
        #expect(!SettlePlan.needsPendingRows(answer, memory: memory), "the batch settles every unsent write")
        let plan = try settle(answer, memory: &memory)
        #expect(plan.documents[cart]?.view.document == ["n": 1])
        #expect(memory.unsent.isEmpty && memory.unsentWriteCount == 0)
        #expect(memory.cache[cart] == plan.documents[cart])
    }

    @Test func anAppliedChangeWithTheServersStateAndConflictsIsReportedAndShownAgain() throws {
        let before = try PlanFixtures.serverState(["n": 1], at: 1)
        var server = before
        _ = try ConflictStrategy.merge.apply(
            try DocumentDelta.update(set: [path("n"): 7], base: Version(1)), to: &server, version: Version(2))
        let conflict = Conflict(path: path("n"), serverValue: 7, clientValue: 2, outcome: .serverWon)
        let batch = frozen([BatchChange(key: cart, delta: try DocumentDelta.update(set: [path("n"): 2], base: .zero), writes: 1)])
        let answer = try SettledAnswer(
            batch: batch, results: [.applied(version: Version(3), state: server, conflicts: [conflict])],
            confirmedBefore: [cart: before])
        #expect(answer.report.conflicts == [cart: [conflict]])
        #expect(answer.reshown == [cart])
        #expect(answer.confirmed[cart]?.document == ["n": 7])
        #expect(answer.ownWrites[cart]?.versions == [Version(3)])
    }

    @Test func aRefusedWriteRollsBackToTheConfirmedStateUnderTheWritesStillPending() throws {
        let before = try PlanFixtures.serverState(["n": 1], at: 1)
        let batch = frozen([BatchChange(key: cart, delta: try DocumentDelta.update(set: [path("n"): 2], base: Version(1)), writes: 1)])
        let answer = try SettledAnswer(
            batch: batch, results: [.rejected(reason: .forbidden, message: "no")], confirmedBefore: [cart: before])
        #expect(answer.report.rejections == [Rejection(key: cart, operation: .update, reason: .forbidden, message: "no")])
        #expect(answer.rollbacks == [cart] && answer.confirmed[cart] == before)
        // A write made while the batch was in flight stays, on the confirmed state.
        let later = try DocumentDelta.update(set: [path("m"): 3], base: Version(1))
        var memory = PlanFixtures.memory(unsent: [
            UnsentRow(key: cart, writes: 1, view: nil), UnsentRow(key: cart, writes: 1, view: #"{"m":3,"n":2}"#),
        ])
        let plan = try settle(answer, pending: [PlanFixtures.row(5, cart, later)], memory: &memory)
        #expect(plan.documents[cart]?.view.document == ["n": 1, "m": 3])
        #expect(
            plan.newestViews == [
                SettlePlan.NewestView(sequence: 5, view: before.applyingLocally(later, at: LocalStore.localVersion).documentJSON)
            ])
        #expect(plan.rebasedRows.isEmpty, "a refused change takes no version to rebase past")
        #expect(memory.unsent[cart] == LocalStore.UnsentDocument(viewJSON: plan.newestViews[0].view, writes: 1))
    }

    @Test func aRefusedChangeOfSeveralWritesGoesBackWriteByWriteWithItsDocumentsLaterChanges() throws {
        let first = try DocumentDelta.create(["n": 1], base: .zero)
        let second = try DocumentDelta.update(set: [path("n"): 2], base: .zero)
        let later = try DocumentDelta.update(set: [path("m"): 3], base: .zero)
        let batch = frozen(
            [
                BatchChange(key: cart, delta: DocumentDelta.compose(first, second), writes: 2),
                BatchChange(key: list, delta: try DocumentDelta.create(["x": 1], base: .zero), writes: 1),
                BatchChange(key: cart, delta: later, writes: 1),
            ], rows: [41, 42, 43])
        let results: [ChangeResult] = [
            .rejected(reason: .invalid, message: "bad"), .applied(version: Version(1), state: nil, conflicts: []),
            .applied(version: Version(2), state: nil, conflicts: []),
        ]
        #expect(SettledAnswer.needsInflightExtras(batch.batch.changes, results))
        let extras = [Int64(0): SettledAnswer.InflightExtras(parts: LocalStore.encodeParts([first, second]), isAsWritten: true)]
        let answer = try SettledAnswer(batch: batch, results: results, confirmedBefore: [:], extras: extras)
        #expect(answer.report.rejections.isEmpty && answer.rollbacks.isEmpty, "nothing is rolled back yet")
        #expect(answer.report.resent == [cart])
        #expect(
            answer.resent == [
                SettledAnswer.ResentChange(key: cart, parts: [first, second], isAsWritten: true, row: 41),
                SettledAnswer.ResentChange(key: cart, parts: [later], isAsWritten: false, row: 43),
            ])
        #expect(answer.settledWrites == [cart: 0, list: 1])

        var memory = PlanFixtures.memory(unsent: [
            UnsentRow(key: cart, writes: 2, view: nil), UnsentRow(key: list, writes: 1, view: #"{"x":1}"#),
            UnsentRow(key: cart, writes: 1, view: #"{"m":3,"n":2}"#),
        ])
        let plan = try settle(answer, pending: [], memory: &memory)
        #expect(plan.resentRows.map(\.sequence) == [-2, -1, 0], "at the head of the queue")
        #expect(plan.resentRows.map(\.origin) == [901, 902, 903])
        #expect(plan.resentRows.map(\.isAsWritten) == [true, true, false])
        #expect(try plan.resentRows.map { try LocalStore.decodeDelta($0.delta) } == [first, second, later])
        #expect(plan.report.resentRows == [41: [901, 902], 43: [903]])
        #expect(memory.unsent[cart]?.writes == 3 && memory.unsent[list] == nil && memory.unsentWriteCount == 3)
        #expect(plan.documents[cart]?.view.document == ["n": 2, "m": 3])
    }

    @Test func aConflictLeftToTheResolverIsKeptWithTheDocumentAsTheDeviceHadItAndHoldsItBack() throws {
        let server = try PlanFixtures.serverState(["n": 9], at: 4)
        let conflict = Conflict(path: path("n"), serverValue: 9, clientValue: 2, outcome: .unresolved)
        let batch = frozen([BatchChange(key: cart, delta: try DocumentDelta.update(set: [path("n"): 2], base: Version(1)), writes: 1)])
        let results: [ChangeResult] = [.unresolved(state: server, conflicts: [conflict])]
        #expect(SettledAnswer.documentsLeftToResolver(batch.batch.changes, results) == [cart])
        let answer = try SettledAnswer(
            batch: batch, results: results, confirmedBefore: [cart: try PlanFixtures.serverState(["n": 1], at: 1)],
            localViews: [cart: #"{"n":2}"#])
        #expect(answer.keptConflicts == [cart: SettledAnswer.KeptConflict(local: #"{"n":2}"#, conflicts: [conflict])])
        #expect(answer.report.unresolved == [cart: [conflict]])
        var memory = PlanFixtures.memory(unsent: [UnsentRow(key: cart, writes: 1, view: #"{"n":2}"#)])
        let plan = try settle(answer, memory: &memory)
        #expect(memory.heldDocuments == [cart])
        #expect(plan.documents[cart]?.view.document == ["n": 9], "the device shows the server's document until the resolver decides")
    }

    @Test func aWriteMadeWhileTheBatchWasInFlightIsRebasedPastItAndKeepsItsView() throws {
        let before = try PlanFixtures.serverState(["qty": 0], at: 1)
        let sent = try DocumentDelta.update(set: [path("qty"): 1], base: Version(1))
        let meanwhile = try DocumentDelta.update(set: [path("qty"): 2], base: Version(1))
        let batch = frozen([BatchChange(key: cart, delta: sent, writes: 1)])
        let answer = try SettledAnswer(
            batch: batch, results: [.applied(version: Version(2), state: nil, conflicts: [])],
            confirmedBefore: [cart: before])
        let shown = before.applyingLocally(sent, at: LocalStore.localVersion).applyingLocally(meanwhile, at: LocalStore.localVersion)
        var memory = StoreMemory(
            unsentRows: [UnsentRow(key: cart, writes: 1, view: nil), UnsentRow(key: cart, writes: 1, view: shown.documentJSON)],
            tail: LocalStore.PendingChange(sequence: 8, key: cart, delta: meanwhile, writes: 1, parts: nil),
            nextBatch: 2, heldDocuments: [], isResyncing: false)
        memory.remember(LocalStore.CachedDocument(confirmed: before, view: shown), for: cart)
        #expect(SettlePlan.needsPendingRows(answer, memory: memory))
        let plan = try settle(answer, pending: [PlanFixtures.row(8, cart, meanwhile)], memory: &memory)
        let rebased = try #require(plan.rebasedRows.first)
        #expect(rebased.sequence == 8 && rebased.delta.assignments[path("qty")]?.base == Version(2), "based on its own write")
        #expect(plan.newestViews == [SettlePlan.NewestView(sequence: 8, view: shown.documentJSON)], "the view it had is kept")
        #expect(memory.tail?.delta == rebased.delta && memory.decodedPending[8] == rebased.delta)
        #expect(memory.cache[cart]?.view == shown && memory.cache[cart]?.confirmed.version == Version(2))
        #expect(memory.unsent[cart]?.writes == 1 && memory.unsentWriteCount == 1)
    }
}
