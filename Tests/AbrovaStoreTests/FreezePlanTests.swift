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

    /// The change limit is on the batch's changes, after composing: interleaved writes of two
    /// documents are two changes however many rows they take.
    @Test func aBatchIsCutByItsChangesAsComposedNotByRows() throws {
        let rows = try (Int64(1)...6).map { sequence in
            PlanFixtures.row(
                sequence, sequence % 2 == 1 ? cart : list, try DocumentDelta.update(set: [path("n"): .int(sequence)], base: .zero))
        }
        #expect(FreezePlan.rowsFitting(rows, maximumChanges: 2, maximumBytes: .max).count == 6)
        #expect(FreezePlan.rowsFitting(rows, maximumChanges: 1, maximumBytes: .max).map(\.sequence) == [1])
        let asWritten = rows.map { row in
            var row = row
            row.isAsWritten = row.sequence == 3
            return row
        }
        #expect(FreezePlan.rowsFitting(asWritten, maximumChanges: 2, maximumBytes: .max).map(\.sequence) == [1, 2])
        let plan = FreezePlan(
            rows: rows[...], deltas: try rows.map { try LocalStore.decodeDelta($0.delta) }, confirmed: [:], clientID: "device",
            sequence: 1, maximumChanges: 2, strategyOf: { _ in .merge })
        #expect(plan.changes.map(\.change.writes) == [3, 3] && plan.takenRows == [1, 2, 3, 4, 5, 6])
    }

    /// A change on a newer base stays apart, which `rowsFitting` does not foresee: the plan cuts
    /// the batch before it when it would be one change too many, and leaves the rest pending.
    @Test func aChangeOnANewerBaseBeyondTheLimitWaitsForTheNextBatch() throws {
        let rows = [
            PlanFixtures.row(1, cart, try DocumentDelta.update(set: [path("a"): 1], base: Version(2))),
            PlanFixtures.row(2, list, try DocumentDelta.update(set: [path("b"): 1], base: Version(2))),
            PlanFixtures.row(3, cart, try DocumentDelta.update(set: [path("a"): 2], base: Version(5))),
            PlanFixtures.row(4, list, try DocumentDelta.update(set: [path("b"): 2], base: Version(2))),
        ]
        #expect(FreezePlan.rowsFitting(rows, maximumChanges: 2, maximumBytes: .max).count == 4)
        let plan = FreezePlan(
            rows: rows[...], deltas: try rows.map { try LocalStore.decodeDelta($0.delta) }, confirmed: [:], clientID: "device",
            sequence: 1, maximumChanges: 2, strategyOf: { _ in .merge })
        #expect(plan.changes.map(\.change.key) == [cart, list] && plan.takenRows == [1, 2])
    }

    @Test func changesKeepTheirOrderStoredBytesAndWritesAndOnlyTheLastOfADocumentKeepsAView() throws {
        let rows = [
            PlanFixtures.row(
                4, cart, try DocumentDelta.create(["qty": 1], base: .zero), writes: 3, view: #"{"qty":1}"#,
                parts: [try DocumentDelta.create(["qty": 0], base: .zero)]),
            PlanFixtures.row(5, list, try DocumentDelta.create(["name": "a"], base: .zero), view: #"{"name":"a"}"#),
            // Made after a pull (a newer base): it does not compose with the first.
            PlanFixtures.row(6, cart, try DocumentDelta.update(set: [path("qty"): 2], base: Version(3)), view: #"{"qty":2}"#),
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
        let sent = try #require(plan.changes.first { $0.change.key == cart })
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

    /// Within a batch the order across documents is not observable (it is applied in one
    /// transaction): a document's changes compose into its first, which keeps each write.
    @Test func aDocumentsChangesInABatchComposeIntoOneThatKeepsEachWrite() throws {
        let first = try DocumentDelta.create(["qty": 1], base: .zero)
        let second = try DocumentDelta.update(set: [path("qty"): 2], base: .zero)
        let third = try DocumentDelta.update(setAdd: [path("items"): ["milk"]], base: .zero)
        let rows = [
            PlanFixtures.row(1, cart, first, view: #"{"qty":1}"#),
            PlanFixtures.row(2, list, try DocumentDelta.create(["name": "a"], base: .zero), view: #"{"name":"a"}"#),
            PlanFixtures.row(
                3, cart, DocumentDelta.compose(second, third), writes: 2, view: #"{"items":["milk"],"qty":2}"#, parts: [second, third]),
        ]
        let plan = try PlanFixtures.freeze(rows)
        #expect(plan.changes.map(\.change.key) == [cart, list])
        #expect(plan.changes.map(\.change.writes) == [3, 1])
        #expect(plan.changes.map(\.origin) == [101, 102], "the first change's id")
        #expect(plan.changes.map(\.view) == [#"{"items":["milk"],"qty":2}"#, #"{"name":"a"}"#])
        let composed = plan.changes[0]
        #expect(composed.change.delta == DocumentDelta.compose(DocumentDelta.compose(first, second), third))
        #expect(composed.encoded == LocalStore.encode(composed.change.delta))
        #expect(try composed.parts.map(LocalStore.decodeParts) == [first, second, third], "each write, for a refusal")
        #expect(plan.takenRows == [1, 2, 3] && plan.cancelledWrites.isEmpty)
        #expect(plan.frozenBatch?.rows == [101, 102])
    }

    /// An online write is sent as written and answered to its call by its own change: it composes
    /// with nothing, and a later queued write does not compose past it.
    @Test func aChangeSavedAsWrittenNeitherComposesNorIsComposedPast() throws {
        let rows = [
            PlanFixtures.row(1, cart, try DocumentDelta.create(["qty": 1], base: .zero)),
            PlanFixtures.row(2, cart, try DocumentDelta.update(set: [path("qty"): 2], base: .zero), isAsWritten: true),
            PlanFixtures.row(3, cart, try DocumentDelta.update(set: [path("qty"): 3], base: .zero)),
        ]
        let plan = try PlanFixtures.freeze(rows)
        #expect(plan.changes.map(\.isAsWritten) == [false, true, false])
        #expect(plan.changes.map(\.origin) == [101, 102, 103])
    }

    /// A composed change keeps each part's earliest base: a write made after a pull (on a newer
    /// base) would take the older one and meet, as a conflict, the change it had seen.
    @Test func aChangeOnANewerBaseStaysApart() throws {
        let rows = [
            PlanFixtures.row(1, cart, try DocumentDelta.create(["qty": 1], base: .zero)),
            PlanFixtures.row(2, cart, try DocumentDelta.update(set: [path("qty"): 2], base: Version(7))),
        ]
        #expect(try PlanFixtures.freeze(rows).changes.count == 2)
    }

    /// A queued change holds at most 64 writes; the batch composes past that, and its parts keep
    /// every write, in order, for a refusal.
    @Test func aBatchComposesPastTheWritesOfOneQueuedChange() throws {
        let many = try (0..<40).map { try DocumentDelta.update(set: [path("qty"): .int(Int64($0))], base: .zero) }
        let composed = many.dropFirst().reduce(many[0], DocumentDelta.compose)
        let full = [
            PlanFixtures.row(1, cart, composed, writes: 40, parts: many),
            PlanFixtures.row(2, cart, composed, writes: 40, parts: many),
        ]
        let plan = try PlanFixtures.freeze(full)
        #expect(plan.changes.map(\.change.writes) == [80])
        let parts = try LocalStore.decodeParts(try #require(plan.changes.first?.parts))
        #expect(parts == many + many)
    }
}
