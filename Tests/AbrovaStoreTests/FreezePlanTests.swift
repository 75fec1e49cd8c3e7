import AbrovaCore
import Testing

@testable import AbrovaStore

/// `FreezePlan` alone: which pending changes a batch takes and what it sends of them, without a
/// file (Spec/storage.md, "Batches").
@Suite struct FreezePlanTests {
    let cart = PlanFixtures.cart
    let list = PlanFixtures.list

    @Test func aBatchIsCutByBytesButAlwaysTakesOneChange() throws {
        let rows = try (Int64(1)...3).map { PlanFixtures.row($0, cart, try DocumentDelta.create(["n": .int($0)], base: .zero)) }
        let each = Batch.encodedOverhead(of: cart) + rows[0].delta.count
        #expect(FreezePlan.rowsFitting(rows, maximumBytes: 1).map(\.sequence) == [1])
        #expect(FreezePlan.rowsFitting(rows, maximumBytes: Batch.encodedOverhead + each).map(\.sequence) == [1])
        #expect(FreezePlan.rowsFitting(rows, maximumBytes: Batch.encodedOverhead + 2 * each).map(\.sequence) == [1, 2])
        #expect(FreezePlan.rowsFitting(rows, maximumBytes: .max).map(\.sequence) == [1, 2, 3])
    }

    @Test func changesKeepTheirOrderStoredBytesAndWritesAndOnlyTheLastOfADocumentKeepsAView() throws {
        let rows = [
            PlanFixtures.row(
                4, cart, try DocumentDelta.create(["qty": 1], base: .zero), writes: 3, view: #"{"qty":1}"#,
                parts: [try DocumentDelta.create(["qty": 0], base: .zero)]),
            PlanFixtures.row(5, list, try DocumentDelta.create(["name": "a"], base: .zero), view: #"{"name":"a"}"#),
            PlanFixtures.row(6, cart, try DocumentDelta.update(set: [path("qty"): 2], base: .zero), view: #"{"qty":2}"#),
        ]
        let plan = try PlanFixtures.freeze(rows)
        #expect(plan.changes.map(\.change.key) == [cart, list, cart])
        #expect(plan.changes.map(\.change.writes) == [3, 1, 1])
        #expect(plan.changes.map(\.encoded) == rows.map(\.delta))
        #expect(plan.changes.map(\.parts) == rows.map(\.parts))
        #expect(plan.changes.map(\.origin) == [104, 105, 106])
        #expect(plan.changes.map(\.view) == [nil, #"{"name":"a"}"#, #"{"qty":2}"#])
        #expect(plan.takenRows == [4, 5, 6] && plan.cancelledWrites.isEmpty)
        #expect(plan.frozenBatch?.rows == [104, 105, 106])
        #expect(plan.frozenBatch?.batch == Batch(clientID: "device", sequence: 1, changes: plan.changes.map(\.change)))
    }

    @Test func aChangeSavedAsWrittenGoesOutUnderClientWinsAndTheOthersUnderTheirStrategy() throws {
        let rows = [
            PlanFixtures.row(1, cart, try DocumentDelta.create(["n": 1], base: .zero), isAsWritten: true),
            PlanFixtures.row(2, list, try DocumentDelta.create(["n": 1], base: .zero)),
        ]
        let plan = try PlanFixtures.freeze(rows)
        #expect(plan.changes.map(\.change.strategy) == [.clientWins, .merge])
        #expect(plan.changes.map(\.isAsWritten) == [true, false])
    }

    @Test func aRemoveTheDeviceNeverSawIsDroppedAndAChangeLeftEmptyIsCancelledWithItsWrites() throws {
        let confirmed = try PlanFixtures.itemsHoldingMilk()
        let rows = [
            PlanFixtures.row(
                1, cart, try DocumentDelta.update(setRemove: [path("items"): ["eggs"]], base: Version(2)), writes: 2,
                view: #"{"items":["milk"]}"#),
            PlanFixtures.row(2, list, try DocumentDelta.create(["n": 1], base: .zero), view: #"{"n":1}"#),
        ]
        let plan = try PlanFixtures.freeze(rows, confirmed: [cart: confirmed])
        #expect(FreezePlan.documentsPruned(rows[...], deltas: try rows.map { try LocalStore.decodeDelta($0.delta) }) == [cart])
        #expect(plan.changes.map(\.change.key) == [list])
        #expect(plan.cancelledWrites == [cart: 2])
        #expect(plan.takenRows == [1, 2], "a cancelled change leaves the queue too")
    }

    @Test func aRemoveOfAnElementAnEarlierChangeOfTheBatchAddsIsSentAndAPrunedChangeIsEncodedAgain() throws {
        let confirmed = try PlanFixtures.itemsHoldingMilk()
        let add = try DocumentDelta.update(setAdd: [path("items"): ["eggs"]], base: Version(2))
        let remove = try DocumentDelta.update(setRemove: [path("items"): ["eggs", "tea"]], base: Version(2))
        let plan = try PlanFixtures.freeze(
            [
                PlanFixtures.row(1, cart, add), PlanFixtures.row(2, list, try DocumentDelta.create(["n": 1], base: .zero)),
                PlanFixtures.row(3, cart, remove),
            ], confirmed: [cart: confirmed])
        let sent = try #require(plan.changes.last)
        #expect(sent.change.delta.setChanges[path("items")]?.removes == ["eggs"], "tea was never there")
        #expect(sent.encoded == LocalStore.encode(sent.change.delta))
        #expect(plan.cancelledWrites.isEmpty)
    }

    @Test func aBatchOfCancelledChangesOnlyIsNotFrozenButTakesItsRows() throws {
        let rows = [PlanFixtures.row(7, cart, try DocumentDelta.update(setRemove: [path("items"): ["eggs"]], base: Version(2)))]
        let plan = try PlanFixtures.freeze(rows, confirmed: [cart: try PlanFixtures.itemsHoldingMilk()])
        #expect(plan.frozenBatch == nil)
        #expect(plan.takenRows == [7] && plan.cancelledWrites == [cart: 1])
    }

    @Test func memoryFollowsAFreezeThatCancelsAChange() throws {
        let rows = [
            PlanFixtures.row(1, cart, try DocumentDelta.update(setRemove: [path("items"): ["eggs"]], base: Version(2)), writes: 2),
            PlanFixtures.row(2, list, try DocumentDelta.create(["n": 1], base: .zero)),
        ]
        let plan = try PlanFixtures.freeze(rows, confirmed: [cart: try PlanFixtures.itemsHoldingMilk()])
        var memory = PlanFixtures.memory(unsent: [
            UnsentRow(key: cart, writes: 2, view: nil), UnsentRow(key: list, writes: 1, view: #"{"n":1}"#),
        ])
        memory.froze(plan, stillPending: [])
        #expect(memory.unsent[cart] == nil, "nothing of the cart is left to send")
        #expect(memory.unsent[list]?.writes == 1 && memory.unsentWriteCount == 1)
        #expect(memory.inflight == plan.frozenBatch && memory.nextBatch == 2)
        #expect(memory.invariantViolations() == [])
    }
}
