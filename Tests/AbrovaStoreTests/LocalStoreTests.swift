import AbrovaCore
import AbrovaSQLite
import AbrovaTestSupport
import Foundation
import Testing

@testable import AbrovaStore

func path(_ dotted: String) -> FieldPath { try! FieldPath(dotted) }

@Suite struct LocalStoreWriteTests {
    let folder = TemporaryFolder()
    let cart = DocumentKey(collection: "carts", id: "c1")

    func openStore() throws -> LocalStore { try LocalStore(path: folder.path("store.sqlite")) }

    @Test func writesReturnAtOnceWithTheirDataAndPendingWrites() async throws {
        let store = try openStore()
        let added = try await store.add(to: "tasks", data: ["task": "Buy milk"])
        #expect(added.data == ["task": "Buy milk"])
        #expect(added.metadata.hasPendingWrites && added.metadata.isFromCache)
        #expect(UUID(uuidString: added.key.id) != nil)

        try await store.setData(["owner": "ana", "address": ["city": "Oslo"]], for: cart)
        try await store.updateData(for: cart, set: [path("address.zip"): 150], setAdd: [path("items"): ["milk", "eggs"]])
        try await store.updateData(for: cart, remove: [path("owner")], setRemove: [path("items"): ["eggs"]])
        let snapshot = try await store.document(cart)
        #expect(snapshot.data == ["address": ["city": "Oslo", "zip": 150], "items": ["milk"]])
        #expect(await store.unsentWriteCount == 4)

        try await store.delete(cart)
        #expect(try await store.document(cart).exists == false)
    }

    @Test func refusedWritesChangeNothing() async throws {
        let store = try openStore()
        await #expect(throws: StoreError.self) { try await store.updateData(for: cart, set: [path("a"): 1]) }
        do {
            try await store.updateData(for: cart, set: [path("a"): 1])
        } catch {
            #expect(error.code == .documentNotFound && error.reason == .notFound)
        }
        do {
            try await store.setData(["price": .double(.nan)], for: cart)
            Issue.record("a NaN was stored")
        } catch {
            #expect(error.code == .invalidValue && error.field == "price" && error.reason == .invalid)
        }
        for bad in [
            DocumentKey(collection: "", id: "x"), DocumentKey(collection: "carts", id: "a/b"),
            DocumentKey(collection: "carts", id: String(repeating: "x", count: 257)),
            DocumentKey(collection: "carts'; DROP TABLE documents; --", id: "x"),
            DocumentKey(collection: "carts", id: "x' OR '1'='1"), DocumentKey(collection: "carts", id: ".."),
            DocumentKey(collection: "carts", id: "a b"),
        ] {
            do {
                try await store.setData(["n": 1], for: bad)
                Issue.record("\(bad) was accepted")
            } catch {
                #expect(error.code == .invalidValue && error.reason == .invalid && (error.field == "collection" || error.field == "id"))
            }
        }
        #expect(await store.unsentWriteCount == 0)
        #expect(try await store.freezeBatch() == nil)
        #expect(try await store.document(cart).exists == false)
    }

    /// A write refused after it changed the cached view (the document would pass the size limit)
    /// leaves nothing of itself: reads, the next write and the queue see the document as before.
    @Test func aWriteRefusedForSizeLeavesTheDocumentAsItWas() async throws {
        let store = try openStore()
        let half = String(repeating: "x", count: ValueLimits.maximumDocumentBytes / 2)
        try await store.setData(["a": .string(half), "n": 1], for: cart)
        await #expect(throws: StoreError.self) { try await store.updateData(for: cart, set: [path("b"): .string(half)]) }
        #expect(try await store.document(cart).data == ["a": .string(half), "n": 1])
        try await store.updateData(for: cart, set: [path("n"): 2])
        #expect(try await store.document(cart).data == ["a": .string(half), "n": 2])
        #expect(await store.unsentWriteCount == 2)
        let batch = try #require(try await store.freezeBatch())
        #expect(batch.batch.changes.map { Set($0.delta.assignments.keys) } == [[path("a"), path("n")]])
    }

    @Test func writesSurviveReopeningTheStore() async throws {
        do {
            let store = try openStore()
            try await store.setData(["n": 1], for: cart)
            try await store.updateData(for: cart, set: [path("n"): 2])
        }
        let reopened = try openStore()
        #expect(try await reopened.document(cart).data == ["n": 2])
        #expect(await reopened.unsentWriteCount == 2)
        let batch = try #require(try await reopened.freezeBatch())
        #expect(batch.batch.changes.count == 1 && batch.batch.changes[0].writes == 2)
    }
}

@Suite struct CoalescingTests {
    let folder = TemporaryFolder()
    let cart = DocumentKey(collection: "carts", id: "c1")
    let list = DocumentKey(collection: "lists", id: "l1")

    @Test func tenEditsOfOneFieldAreOnePendingChangeHoldingTenWrites() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        try await store.setData(["qty": 0], for: cart)
        for quantity in 1...10 { try await store.updateData(for: cart, set: [path("qty"): .int(Int64(quantity))]) }
        let frozen = try #require(try await store.freezeBatch())
        #expect(frozen.batch.changes.count == 1)
        #expect(frozen.batch.changes[0].writes == 11)
        #expect(frozen.batch.changes[0].delta.assignments[path("qty")]?.value == 10)
    }

    /// A write made after a pull brought a newer server document is made on that document: it does
    /// not join the queued write made before the pull, whose older base would turn the change it
    /// had seen into a conflict (lost under serverWins).
    @Test func aWriteAfterAPullDoesNotComposeIntoTheQueuedWriteBeforeIt() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        var server = InMemoryServer()
        try server.write(try DocumentDelta.create(["qty": 1], base: .zero), to: cart)
        let first = server.pull(after: nil)
        try await store.applyPulledPage(first.documents, cursor: first.cursor)
        try await store.updateData(for: cart, set: [path("qty"): 2]) // on version 1
        try server.write(try DocumentDelta.update(set: [path("qty"): 5], base: Version(1)), to: cart)
        let second = server.pull(after: first.cursor)
        try await store.applyPulledPage(second.documents, cursor: second.cursor)
        try await store.updateData(for: cart, set: [path("qty"): 7]) // seen version 2
        let frozen = try #require(try await store.freezeBatch())
        #expect(frozen.batch.changes.map(\.delta.earliestBase) == [Version(1), Version(2)])
        _ = server.push(frozen.batch, strategy: .serverWins)
        #expect(server.documents[cart]?.document == ["qty": 7], "the write made on the server's newer value stands")
    }

    /// Under manual the server holds back the whole of a change with a conflict, so a batch does
    /// not compose a document's changes there: a write that conflicts with nothing is applied.
    @Test func underManualAWriteThatConflictsWithNothingIsNotHeldBackByAnotherOfItsDocument() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        let other = DocumentKey(collection: "carts", id: "c2")
        var server = InMemoryServer()
        try server.write(try DocumentDelta.create(["x": 1, "y": 1], base: .zero), to: cart)
        let page = server.pull(after: nil)
        try await store.applyPulledPage(page.documents, cursor: page.cursor)
        try await store.updateData(for: cart, set: [path("x"): 2])
        try await store.setData(["n": 1], for: other)
        try await store.updateData(for: cart, set: [path("y"): 2])
        try server.write(try DocumentDelta.update(set: [path("x"): 5], base: Version(1)), to: cart) // another device's
        let frozen = try #require(try await store.freezeBatch(strategyOf: { _ in .manual }))
        _ = server.push(frozen.batch, strategy: .manual)
        #expect(server.documents[cart]?.document == ["x": 5, "y": 2])
    }

    @Test func anAddThenARemoveOfOneElementBeforeSyncLeavesNothingToSend() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        var server = InMemoryServer()
        try server.write(try DocumentDelta.create(["items": []], base: .zero), to: cart)
        try server.write(try DocumentDelta.update(setAdd: [path("items"): ["milk"]], base: Version(1)), to: cart)
        let page = server.pull(after: nil)
        try await store.applyPulledPage(page.documents, cursor: page.cursor)

        try await store.updateData(for: cart, setAdd: [path("items"): ["eggs"]])
        try await store.updateData(for: cart, setRemove: [path("items"): ["eggs"]])
        #expect(try await store.document(cart).data == ["items": ["milk"]])
        #expect(try await store.freezeBatch() == nil)
        #expect(await store.unsentWriteCount == 0)
    }

    @Test func aRemoveOfAnElementThatAnEarlierChangeOfTheBatchAddsIsSent() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        var server = InMemoryServer()
        let other = DocumentKey(collection: "carts", id: "c2")
        try server.write(try DocumentDelta.create(["items": []], base: .zero), to: cart)
        try server.write(try DocumentDelta.update(setAdd: [path("items"): ["milk"]], base: Version(1)), to: cart)
        let page = server.pull(after: nil)
        try await store.applyPulledPage(page.documents, cursor: page.cursor)

        try await store.updateData(for: cart, setAdd: [path("items"): ["eggs"]]) // a change
        try await store.setData(["n": 1], for: other) // another document between
        try await store.updateData(for: cart, setRemove: [path("items"): ["eggs"]]) // a second change of the cart
        #expect(try await store.document(cart).data == ["items": ["milk"]])
        let frozen = try #require(try await store.freezeBatch())
        #expect(frozen.batch.changes.map(\.key) == [cart, other], "the cart's second change composes into its first")
        _ = try await store.settle(batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: .merge))
        #expect(server.documents[cart]?.document == ["items": ["milk"]], "the device removed eggs after adding them")
        #expect(try await store.document(cart).data == ["items": ["milk"]])
    }

    /// A cart written many times among other documents: its changes compose into one, which the
    /// server judges uncontested and answers with no state; the store ends with the server's
    /// state, sets, removals and all.
    @Test func aDocumentWrittenManyTimesInOneBatchSettlesToTheServersStateWithoutStates() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        var server = InMemoryServer()
        let other = DocumentKey(collection: "carts", id: "c2")
        try server.write(try DocumentDelta.create(["owner": "ana"], base: .zero), to: cart)
        let page = server.pull(after: nil)
        try await store.applyPulledPage(page.documents, cursor: page.cursor)

        for item in ["milk", "eggs", "bread"] {
            try await store.updateData(for: cart, set: [path("qty.\(item)"): 1], setAdd: [path("items"): [.string(item)]])
            try await store.setData(["n": .string(item)], for: other)
        }
        try await store.updateData(for: cart, set: [path("qty.milk"): 3])
        try await store.setData(["n": "last"], for: other)
        try await store.updateData(for: cart, remove: [path("qty.eggs")], setRemove: [path("items"): ["eggs"]])
        let frozen = try #require(try await store.freezeBatch())
        #expect(frozen.batch.changes.map(\.key) == [cart, other])
        #expect(frozen.batch.changes.first?.writes == 5)
        let answer = server.push(frozen.batch, strategy: .merge)
        #expect(answer.allSatisfy { if case .applied(_, nil, []) = $0 { true } else { false } }, "every change is uncontested: \(answer)")
        _ = try await store.settle(batch: frozen.batch.sequence, results: answer)
        #expect(try await store.confirmedState(of: cart) == server.documents[cart])
        #expect(try await store.confirmedState(of: other) == server.documents[other])
        #expect(server.documents[cart]?.document == ["owner": "ana", "items": ["bread", "milk"], "qty": ["bread": 1, "milk": 3]])
        #expect(try await store.document(cart).data == server.documents[cart]?.document)
    }

    /// The server applies a batch in one transaction, so the order across its documents is not
    /// observable: each document is sent once, where its first write came.
    @Test func aDocumentsWritesInOneBatchComposeWhereItsFirstCame() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        try await store.setData(["grant": true], for: list)
        try await store.setData(["owner": "ana"], for: cart)
        try await store.updateData(for: list, set: [path("grant"): false])
        let frozen = try #require(try await store.freezeBatch())
        #expect(frozen.batch.changes.map(\.key) == [list, cart])
        var server = InMemoryServer()
        _ = try await store.settle(batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: .merge))
        #expect(server.documents[list]?.document == ["grant": false])
        #expect(await store.unsentWriteCount == 0)
    }

    /// The limit counts changes as the batch composes them: interleaved writes to two documents,
    /// many pages of rows, go in one batch of two changes.
    @Test func aBatchTakesAsManyRowsAsComposeIntoItsChanges() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        for round in 0..<30 {
            try await store.setData(["n": .int(Int64(round))], for: list)
            try await store.setData(["n": .int(Int64(round))], for: cart)
        }
        let frozen = try #require(try await store.freezeBatch(maximumChanges: 2))
        #expect(frozen.batch.changes.map(\.key) == [list, cart])
        #expect(frozen.batch.changes.map(\.writes) == [30, 30])
        var server = InMemoryServer()
        _ = try await store.settle(batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: .merge))
        #expect(await store.unsentWriteCount == 0 && server.documents[cart]?.document == ["n": 29])
    }

    @Test func aLongQueueGoesInBatchesOfAtMostTheLimitInOrder() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        let keys = (0..<5).map { DocumentKey(collection: "carts", id: "c\($0)") }
        for key in keys { try await store.setData(["n": 1], for: key) }
        var sent: [DocumentKey] = []
        var server = InMemoryServer()
        while let frozen = try await store.freezeBatch(maximumChanges: 2) {
            #expect(frozen.batch.changes.count <= 2)
            sent += frozen.batch.changes.map(\.key)
            _ = try await store.settle(batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: .merge))
            if sent.count == 2 { try await store.updateData(for: keys[0], set: [path("n"): 2]) } // joins the end of the queue
        }
        #expect(sent == keys + [keys[0]])
        #expect(await store.unsentWriteCount == 0)
        #expect(try await store.document(keys[0]).data == ["n": 2])
    }

    @Test func aRetryGetsTheSameBytesAlsoAfterARestart() async throws {
        let file = folder.path("store.sqlite")
        let first: FrozenBatch
        do {
            let store = try LocalStore(path: file)
            try await store.setData(["n": 1], for: cart)
            first = try #require(try await store.freezeBatch())
            try await store.updateData(for: cart, set: [path("n"): 2]) // pending behind the batch
            #expect(try await store.freezeBatch() == first)
        }
        let reopened = try LocalStore(path: file)
        #expect(try await reopened.freezeBatch() == first)
        #expect(try await reopened.document(cart).data == ["n": 2])
    }

    @Test func aDocumentNestedToTheLimitSurvivesItsBatchAndItsConfirmedStateOnDisk() async throws {
        // The stored forms wrap the document's values a few levels deeper than the document itself.
        var deep: Value = "bottom"
        for _ in 0..<(ValueLimits.maximumDepth - 1) { deep = [deep] } // arrays are leaves: stored whole
        let file = folder.path("store.sqlite")
        var server = InMemoryServer()
        do {
            let store = try LocalStore(path: file)
            try await store.setData(["top": deep], for: cart)
            let frozen = try #require(try await store.freezeBatch())
            _ = try await store.settle(batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: .merge))
        }
        let frozen: FrozenBatch
        do {
            let reopened = try LocalStore(path: file)
            #expect(try await reopened.document(cart).data == ["top": deep])
            try await reopened.updateData(for: cart, set: [path("other"): 1])
            frozen = try #require(try await reopened.freezeBatch())
        }
        #expect(try await LocalStore(path: file).freezeBatch() == frozen)
    }
}

@Suite struct SettleAndPullTests {
    let folder = TemporaryFolder()
    let cart = DocumentKey(collection: "carts", id: "c1")

    @Test func anAppliedChangeBecomesConfirmedAndLaterChangesAreRebased() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        var server = InMemoryServer()
        try await store.setData(["qty": 1], for: cart)
        let frozen = try #require(try await store.freezeBatch())
        try await store.updateData(for: cart, set: [path("qty"): 2]) // made while the batch was in flight
        let answer = server.push(frozen.batch, strategy: .serverWins)
        let report = try await store.settle(batch: frozen.batch.sequence, results: answer)
        #expect(report.rejections.isEmpty && report.conflicts.isEmpty)
        #expect(try await store.document(cart).data == ["qty": 2])
        #expect(await store.unsentWriteCount == 1)

        // The pending change is based on the client's own write now: no conflict with itself.
        let next = try #require(try await store.freezeBatch())
        #expect(next.batch.changes[0].delta.assignments[path("qty")]?.base == server.version)
        let second = server.push(next.batch, strategy: .serverWins)
        let secondReport = try await store.settle(batch: next.batch.sequence, results: second)
        #expect(secondReport.conflicts.isEmpty)
        #expect(server.documents[cart]?.document == ["qty": 2])
        let settled = try await store.document(cart)
        #expect(settled.data == ["qty": 2] && !settled.metadata.hasPendingWrites)
        #expect(await store.unsentWriteCount == 0)
    }

    @Test func aDocumentWrittenTwiceInOneBatchDoesNotConflictWithItself() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        var server = InMemoryServer()
        let other = DocumentKey(collection: "carts", id: "c2")
        try server.write(try DocumentDelta.create(["x": 0, "y": 0], base: .zero), to: cart)
        let page = server.pull(after: nil)
        try await store.applyPulledPage(page.documents, cursor: page.cursor)
        try await store.updateData(for: cart, set: [path("x"): 1]) // A
        try await store.setData(["n": 1], for: other) // B
        try await store.updateData(for: cart, set: [path("y"): 1]) // A again: composed into its first change
        let frozen = try #require(try await store.freezeBatch())
        #expect(frozen.batch.changes.map(\.writes) == [2, 1])
        try await store.updateData(for: cart, set: [path("x"): 2]) // pending, based on what A's first change saw
        _ = try await store.settle(batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: .serverWins))
        let next = try #require(try await store.freezeBatch())
        let report = try await store.settle(batch: next.batch.sequence, results: server.push(next.batch, strategy: .serverWins))
        #expect(report.conflicts.isEmpty, "the client's own writes counted as the server's: \(report.conflicts)")
        #expect(server.documents[cart]?.document == ["x": 2, "y": 1])
    }

    @Test func aRefusedWriteIsDroppedAndTheDocumentRollsBack() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        var server = InMemoryServer(refuse: { key, _ in key.id == "secret" ? (.forbidden, "rules refused") : nil })
        let secret = DocumentKey(collection: "carts", id: "secret")
        try await store.setData(["owner": "ana"], for: cart)
        try await store.setData(["owner": "eve"], for: secret)
        let listener = await store.changes(of: secret)
        var iterator = listener.makeAsyncIterator()
        #expect(await iterator.next()?.data == ["owner": "eve"])

        let frozen = try #require(try await store.freezeBatch())
        let report = try await store.settle(batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: .merge))
        #expect(report.rejections == [Rejection(key: secret, operation: .create, reason: .forbidden, message: "rules refused")])
        // The refused create disappears; the other write is confirmed; the listener is told it was a rollback.
        let rolledBack = try #require(await iterator.next())
        #expect(rolledBack.data == nil && rolledBack.metadata.isRollback)
        #expect(try await store.document(secret).exists == false)
        #expect(try await store.document(cart).data == ["owner": "ana"])
        #expect(await store.unsentWriteCount == 0)
    }

    @Test func aRollbackKeepsTheWritesMadeAfterTheRefusedOne() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        var server = InMemoryServer(refuse: { _, delta in delta.assignments[path("price")] != nil ? (.forbidden, "no") : nil })
        try server.write(try DocumentDelta.create(["price": 5, "name": "milk"], base: .zero), to: cart)
        let page = server.pull(after: nil)
        try await store.applyPulledPage(page.documents, cursor: page.cursor)
        try await store.updateData(for: cart, set: [path("price"): 1])
        let frozen = try #require(try await store.freezeBatch())
        try await store.updateData(for: cart, set: [path("name"): "oat milk"]) // pending behind the refused write
        _ = try await store.settle(batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: .merge))
        let snapshot = try await store.document(cart)
        #expect(snapshot.data == ["price": 5, "name": "oat milk"] && snapshot.metadata.hasPendingWrites)
        #expect(await store.unsentWriteCount == 1)
        let next = try #require(try await store.freezeBatch())
        _ = try await store.settle(batch: next.batch.sequence, results: server.push(next.batch, strategy: .merge))
        #expect(server.documents[cart]?.document == ["price": 5, "name": "oat milk"])
    }

    /// A refused change goes back write by write; composed again (at freeze, or with a new write
    /// after a reopen) the same refusal would come back for ever.
    @Test func writesSentAgainAfterARefusalNeverComposeAgainEvenAfterAReopen() async throws {
        let file = folder.path("store.sqlite")
        var server = InMemoryServer(refuse: { _, delta in delta.assignments[path("price")] != nil ? (.forbidden, "no") : nil })
        do {
            let store = try LocalStore(path: file)
            try await store.setData(["name": "milk"], for: cart)
            try await store.updateData(for: cart, set: [path("price"): 1])
            let frozen = try #require(try await store.freezeBatch())
            #expect(frozen.batch.changes.map(\.writes) == [2])
            let report = try await store.settle(batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: .merge))
            #expect(report.rejections.isEmpty && server.documents[cart] == nil)
            await store.close()
        }
        let store = try LocalStore(path: file)
        try await store.updateData(for: cart, set: [path("qty"): 2])
        let alone = try #require(try await store.freezeBatch())
        #expect(alone.batch.changes.map(\.writes) == [1, 1, 1])
        let report = try await store.settle(batch: alone.batch.sequence, results: server.push(alone.batch, strategy: .merge))
        #expect(report.rejections.map(\.key) == [cart])
        #expect(server.documents[cart]?.document == ["name": "milk", "qty": 2])
        #expect(try await store.document(cart).data == ["name": "milk", "qty": 2])
        #expect(await store.unsentWriteCount == 0)
    }

    @Test func aRefusedUpdateShowsTheServersDocumentAgain() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        var server = InMemoryServer(refuse: { _, delta in delta.assignments[path("price")] != nil ? (.invalid, "price is read-only") : nil }
        )
        try server.write(try DocumentDelta.create(["price": 5, "name": "milk"], base: .zero), to: cart)
        let page = server.pull(after: nil)
        try await store.applyPulledPage(page.documents, cursor: page.cursor)
        try await store.updateData(for: cart, set: [path("price"): 1])
        #expect(try await store.document(cart).data == ["price": 1, "name": "milk"])
        let frozen = try #require(try await store.freezeBatch())
        let report = try await store.settle(batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: .merge))
        #expect(report.rejections.first?.operation == .update && report.rejections.first?.reason == .invalid)
        #expect(try await store.document(cart).data == ["price": 5, "name": "milk"])
    }

    /// The device set qty to 5 on the version it pulled; meanwhile the server set it to 3. Returns
    /// the report of settling the device's batch under `strategy`, and the store.
    func settleConcurrentQuantities(strategy: ConflictStrategy) async throws -> (SettleReport, LocalStore) {
        let (report, store, _) = try await settleConcurrentQuantitiesKeepingServer(strategy: strategy)
        return (report, store)
    }

    /// `settleConcurrentQuantities`, with the server, for a test that goes on with it.
    func settleConcurrentQuantitiesKeepingServer(strategy: ConflictStrategy) async throws -> (SettleReport, LocalStore, InMemoryServer) {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        var server = InMemoryServer()
        try server.write(try DocumentDelta.create(["qty": 1], base: .zero), to: cart)
        let page = server.pull(after: nil)
        try await store.applyPulledPage(page.documents, cursor: page.cursor)
        try server.write(try DocumentDelta.update(set: [path("qty"): 3], base: server.version), to: cart)
        try await store.updateData(for: cart, set: [path("qty"): 5])
        let frozen = try #require(try await store.freezeBatch())
        let report = try await store.settle(batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: strategy))
        return (report, store, server)
    }

    @Test func underManualAConflictingChangeIsHeldForTheResolver() async throws {
        let (report, store) = try await settleConcurrentQuantities(strategy: .manual)
        let conflict = try #require(report.unresolved[cart]?.first)
        #expect(conflict.path == path("qty") && conflict.serverValue == 3 && conflict.clientValue == 5 && conflict.outcome == .unresolved)
        #expect(try await store.document(cart).data == ["qty": 3])
        #expect(await store.unsentWriteCount == 1, "the change is not on the server until its resolution is")
    }

    /// The conflict, with the document as the device had it, outlives the process until the
    /// resolution is written: an app ended while its resolver decided is asked again.
    @Test func underManualTheConflictIsKeptUntilItIsForgottenAcrossAReopen() async throws {
        let (_, store) = try await settleConcurrentQuantities(strategy: .manual)
        let expected = UnresolvedConflict(
            key: cart, local: ["qty": 5],
            conflicts: [Conflict(path: path("qty"), serverValue: 3, clientValue: 5, outcome: .unresolved)])
        #expect(try await store.unresolvedConflicts() == [expected])
        await store.close()
        let reopened = try LocalStore(path: folder.path("store.sqlite"))
        #expect(try await reopened.unresolvedConflicts() == [expected])
        try await reopened.forgetUnresolvedConflict(cart)
        #expect(try await reopened.unresolvedConflicts().isEmpty)
    }

    /// While the resolver decides, the document's later writes wait (the rest of the queue goes
    /// on), also across a reopen; the resolution is written before them, so they stay on top.
    @Test func underManualTheDocumentsLaterWritesWaitForTheResolutionAndStayOnTopOfIt() async throws {
        let (_, store) = try await settleConcurrentQuantities(strategy: .manual)
        let other = DocumentKey(collection: "carts", id: "other")
        try await store.updateData(for: cart, set: [path("note"): "later"])
        try await store.setData(["n": 1], for: other)
        let first = try #require(try await store.freezeBatch())
        #expect(first.batch.changes.map(\.key) == [other], "the document in conflict waits")
        _ = try await store.settle(batch: first.batch.sequence, results: [.applied(version: Version(100), state: nil, conflicts: [])])
        await store.close()
        let reopened = try LocalStore(path: folder.path("store.sqlite"))
        #expect(try await reopened.freezeBatch() == nil, "still waiting after a reopen")
        // A resolution made from an older server document than the device has is not written.
        let seen = try await reopened.confirmedDocument(cart).version
        #expect(try await reopened.resolveConflict(cart, with: .set(["qty": 6]), seenVersion: Version(seen.rawValue - 1)) == false)
        #expect(try await reopened.unresolvedConflicts().count == 1)
        #expect(try await reopened.freezeBatch() == nil, "still waiting after a stale resolution")
        #expect(try await reopened.resolveConflict(cart, with: .set(["qty": 5]), seenVersion: seen))
        #expect(try await reopened.unresolvedConflicts().isEmpty)
        #expect(try await reopened.document(cart).data == ["qty": 5, "note": "later"])
        #expect(await reopened.unsentWriteCount == 2)
        let second = try #require(try await reopened.freezeBatch())
        #expect(second.batch.changes.map(\.key) == [cart] && second.batch.changes[0].writes == 2)
        var applied = DocumentState()
        _ = try ConflictStrategy.merge.apply(second.batch.changes[0].delta, to: &applied, version: Version(200))
        #expect(applied.document == ["qty": 5, "note": "later"])
    }

    /// A write made online while the resolver decides waits for it; the resolution composed in
    /// front of it is sent under the document's strategy, not as written, so that a change the
    /// resolver never saw comes back to it instead of being overwritten.
    @Test func aResolutionComposedWithAWriteMadeOnlineIsSentUnderTheStrategyNotAsWritten() async throws {
        var (_, store, server) = try await settleConcurrentQuantitiesKeepingServer(strategy: .manual)
        let seen = try await store.confirmedDocument(cart).version
        _ = try await store.write(
            .update(set: [path("note"): "later"], remove: [], setAdd: [:], setRemove: [:]), for: cart, asWritten: true)
        // Another device adds a coupon, which this one has not pulled when the resolution is written.
        try server.write(try DocumentDelta.update(set: [path("coupon"): "ben's"], base: server.version), to: cart)
        #expect(try await store.resolveConflict(cart, with: .set(["qty": 5]), seenVersion: seen))
        let sent = try #require(try await store.freezeBatch(strategyOf: { _ in .manual }))
        #expect(sent.batch.changes.map(\.strategy) == [.manual])
        let results = server.push(sent.batch, strategy: .manual)
        guard case .unresolved = results.first else {
            Issue.record("the resolution was not left to the resolver again: \(results)")
            return
        }
        #expect(server.documents[cart]?.document == ["qty": 3, "coupon": "ben's"])
    }

    /// Every waiting change of the document goes under the strategy, not only the one the
    /// resolution composes with: all were made on the server's document the resolver saw.
    @Test func aResolutionTakesEveryWaitingChangeOfTheDocumentOutOfAsWritten() async throws {
        let (_, store, _) = try await settleConcurrentQuantitiesKeepingServer(strategy: .manual)
        let other = DocumentKey(collection: "carts", id: "other")
        let seen = try await store.confirmedDocument(cart).version
        let note = WriteOperation.update(set: [path("note"): "later"], remove: [], setAdd: [:], setRemove: [:])
        _ = try await store.write(note, for: cart, asWritten: true)
        _ = try await store.write(.set(["n": 1]), for: other, asWritten: true)
        _ = try await store.write(.update(set: [path("seen"): true], remove: [], setAdd: [:], setRemove: [:]), for: cart, asWritten: true)
        #expect(try await store.resolveConflict(cart, with: .set(["qty": 5]), seenVersion: seen))
        let sent = try #require(try await store.freezeBatch(strategyOf: { _ in .manual }))
        // As written, the later one would go under clientWins; it goes under the strategy (apart:
        // under manual a batch does not compose a document's changes).
        #expect(sent.batch.changes.filter { $0.key == cart }.map(\.strategy) == [.manual, .manual])
        #expect(sent.batch.changes.filter { $0.key == other }.map(\.strategy) == [.clientWins], "another document's stays as written")
    }

    /// A conflict resolved already (a second resolver answer for it, from a run that asked while
    /// the first was written) is left alone: the first resolution stands, nothing is written twice.
    @Test(arguments: [false, true]) func aConflictResolvedAlreadyIsNotResolvedAgain(withAWaitingChange waiting: Bool) async throws {
        let (_, store, _) = try await settleConcurrentQuantitiesKeepingServer(strategy: .manual)
        if waiting { try await store.updateData(for: cart, set: [path("note"): "later"]) }
        let seen = try await store.confirmedDocument(cart).version
        #expect(try await store.resolveConflict(cart, with: .set(["qty": 5]), seenVersion: seen))
        let count = await store.unsentWriteCount
        #expect(try await store.resolveConflict(cart, with: .set(["qty": 9]), seenVersion: seen))
        #expect(await store.unsentWriteCount == count)
        #expect(try await store.document(cart).data?.mapValue?["qty"] == 5)
    }

    /// A resolution written as a change of its own counts as the one pending write the conflict
    /// counted as, at every moment an app can see: never one more.
    @Test func aResolutionWithoutWaitingChangesNeverCountsTwice() async throws {
        let (_, store, _) = try await settleConcurrentQuantitiesKeepingServer(strategy: .manual)
        let seen = try await store.confirmedDocument(cart).version
        var counts = await store.unsentWriteCounts().makeAsyncIterator()
        #expect(await counts.next() == 1)
        #expect(try await store.resolveConflict(cart, with: .set(["qty": 5]), seenVersion: seen))
        try await store.setData(["n": 1], for: DocumentKey(collection: "carts", id: "other"))
        // A listener is told a count only when it differs from the last it was given: read until
        // the count now, which is 2 (the resolution counted as one more would make it 3).
        let now = await store.unsentWriteCount
        #expect(now == 2)
        var shown: [Int] = []
        while let count = await counts.next() {
            shown.append(count)
            if count == now || shown.count > 3 { break }
        }
        #expect(shown.last == 2 && !shown.dropLast().contains(2), "shown: \(shown)")
    }

    @Test func aSettledConflictIsReportedAndTheServersOutcomeShown() async throws {
        let (report, store) = try await settleConcurrentQuantities(strategy: .serverWins)
        #expect(report.conflicts[cart]?.map(\.outcome) == [.serverWon])
        #expect(try await store.document(cart).data == ["qty": 3])
    }

    @Test func anAnswerForAnotherBatchIsRefused() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        try await store.setData(["n": 1], for: cart)
        let frozen = try #require(try await store.freezeBatch())
        await #expect(throws: StoreError.self) { try await store.settle(batch: frozen.batch.sequence + 1, results: []) }
        await #expect(throws: StoreError.self) { try await store.settle(batch: frozen.batch.sequence, results: []) }
        #expect(try await store.freezeBatch() == frozen)
    }

    @Test func aPullReplacesOnlyTheConfirmedPartOfADocumentWithUnsentChanges() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        var server = InMemoryServer()
        try server.write(try DocumentDelta.create(["title": "a", "qty": 1], base: .zero), to: cart)
        var page = server.pull(after: nil)
        try await store.applyPulledPage(page.documents, cursor: page.cursor)
        try await store.updateData(for: cart, set: [path("qty"): 7])
        try server.write(try DocumentDelta.update(set: [path("title"): "b"], base: server.version), to: cart)
        page = server.pull(after: try await store.pullCursor())
        try await store.applyPulledPage(page.documents, cursor: page.cursor)
        let snapshot = try await store.document(cart)
        #expect(snapshot.data == ["title": "b", "qty": 7] && snapshot.metadata.hasPendingWrites)
        #expect(try await store.pullCursor() == page.cursor)
    }

    @Test func confirmedStatesReadBackFromTheFile() async throws {
        let file = folder.path("store.sqlite")
        var server = InMemoryServer()
        try server.write(try DocumentDelta.create(["title": "a", "address": ["city": "Oslo"]], base: .zero), to: cart)
        try server.write(
            try DocumentDelta.update(remove: [path("title")], setAdd: [path("items"): ["milk"]], base: server.version), to: cart)
        let gone = DocumentKey(collection: "carts", id: "gone")
        try server.write(try DocumentDelta.create(["n": 1], base: .zero), to: gone)
        try server.write(DocumentDelta.delete(base: server.version), to: gone)
        let page = server.pull(after: nil)
        do {
            let store = try LocalStore(path: file)
            try await store.applyPulledPage(page.documents, cursor: page.cursor)
        }
        // A new store instance has nothing in memory: the states come back from their stored forms.
        do {
            let store = try LocalStore(path: file)
            try await store.updateData(for: cart, set: [path("address.zip"): 150])
            let frozen = try #require(try await store.freezeBatch())
            #expect(frozen.batch.changes[0].delta.assignments[path("address.zip")]?.base == server.documents[cart]?.version)
            let answer = server.push(frozen.batch, strategy: .serverWins)
            _ = try await store.settle(batch: frozen.batch.sequence, results: answer)
            #expect(try await store.document(cart).data == ["address": ["city": "Oslo", "zip": 150], "items": ["milk"]])
            #expect(try await store.document(gone).exists == false)
        }
        let reopened = try LocalStore(path: file)
        #expect(try await reopened.document(cart).data == server.documents[cart]?.document)
    }
}

@Suite struct ListenerTests {
    let folder = TemporaryFolder()
    let cart = DocumentKey(collection: "carts", id: "c1")

    @Test func documentListenersHearEveryCommittedChangeAndCancellingOneLeavesTheOthers() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        let first = await store.changes(of: cart)
        let second = await store.changes(of: cart)
        #expect(await store.listenerCount == 2)
        var firstIterator = first.makeAsyncIterator()
        var secondIterator = second.makeAsyncIterator()
        #expect(await firstIterator.next()?.exists == false)
        #expect(await secondIterator.next()?.exists == false)

        try await store.setData(["n": 1], for: cart)
        #expect(await firstIterator.next()?.data == ["n": 1])
        #expect(await secondIterator.next()?.data == ["n": 1])

        let cancelled = Task { for await _ in first {} }
        cancelled.cancel()
        _ = await cancelled.value
        try await store.updateData(for: cart, set: [path("n"): 2])
        let next = await secondIterator.next()
        #expect(next?.data == ["n": 2] && next?.metadata.hasPendingWrites == true)
        for _ in 0..<100 where await store.listenerCount > 1 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(await store.listenerCount == 1)
    }

    @Test func listenersHearPulledChanges() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        var server = InMemoryServer()
        var documentChanges = await store.changes(of: cart).makeAsyncIterator()
        var queryChanges = await store.changes(matching: DocumentQuery(collection: "carts")).makeAsyncIterator()
        #expect(await documentChanges.next()?.exists == false)
        #expect(await queryChanges.next()?.isEmpty == true)
        try server.write(try DocumentDelta.create(["owner": "ana"], base: .zero), to: cart)
        let page = server.pull(after: nil)
        try await store.applyPulledPage(page.documents, cursor: page.cursor)
        let pulled = await documentChanges.next()
        #expect(pulled?.data == ["owner": "ana"] && pulled?.metadata.hasPendingWrites == false && pulled?.metadata.isRollback == false)
        #expect(await queryChanges.next()?.map(\.key) == [cart])
    }

    @Test func aListenerHearsNothingWhenWhatItShowsDidNotChange() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        var server = InMemoryServer()
        let other = DocumentKey(collection: "carts", id: "c2")
        var documentChanges = await store.changes(of: cart).makeAsyncIterator()
        var queryChanges = await store.changes(matching: DocumentQuery(collection: "carts").whereField(path("owner"), isEqualTo: "ana"))
            .makeAsyncIterator()
        _ = await documentChanges.next()
        _ = await queryChanges.next()
        try await store.setData(["owner": "ana"], for: cart)
        #expect(await documentChanges.next()?.metadata.hasPendingWrites == true)
        #expect(await queryChanges.next()?.map(\.key) == [cart])
        let frozen = try #require(try await store.freezeBatch())
        _ = try await store.settle(batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: .merge))
        #expect(await documentChanges.next()?.metadata.hasPendingWrites == false)
        #expect(await queryChanges.next()?.first?.metadata.hasPendingWrites == false)
        // The device's own write comes back in a pull, and another document of the collection
        // changes outside the query: neither listener is told anything.
        let page = server.pull(after: nil)
        try await store.applyPulledPage(page.documents, cursor: page.cursor)
        try await store.setData(["owner": "ben"], for: other)
        try await store.updateData(for: cart, set: [path("n"): 1])
        let next = await documentChanges.next()
        #expect(next?.data == ["owner": "ana", "n": 1], "a snapshot with unchanged data came first: \(String(describing: next))")
        #expect(await queryChanges.next()?.first?.data == ["owner": "ana", "n": 1])
    }

    @Test func theCountOfListenersThatShowDocumentsIsLive() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        var counts = await store.liveListenerCounts().makeAsyncIterator()
        #expect(await counts.next() == 0)
        _ = await store.unsentWriteCounts() // shows no document: not counted
        let document = Task { [cart] in for await _ in await store.changes(of: cart) {} }
        #expect(await counts.next() == 1)
        let query = Task { for await _ in await store.changes(matching: DocumentQuery(collection: "carts")) {} }
        #expect(await counts.next() == 2)
        document.cancel()
        #expect(await counts.next() == 1)
        query.cancel()
        #expect(await counts.next() == 0)
        await store.close()
        #expect(await counts.next() == nil, "the count ends with the store")
    }

    @Test func queryListenersHearChangesInTheirCollection() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        let query = DocumentQuery(collection: "carts").whereField(path("owner"), isEqualTo: "ana")
        var iterator = await store.changes(matching: query).makeAsyncIterator()
        #expect(await iterator.next()?.isEmpty == true)
        try await store.setData(["owner": "ana"], for: cart)
        #expect(await iterator.next()?.map(\.key) == [cart])
        try await store.setData(["owner": "bob"], for: cart)
        #expect(await iterator.next()?.isEmpty == true)
    }

    /// The cursor a push answer gives is taken only by a device whose cursor is still the one the
    /// push sent, and not while a resync is under way (its cursor is the resync's own).
    @Test func aPushAnswersCursorIsTakenOnlyFromTheCursorItWasGivenFor() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        var server = InMemoryServer()
        try await store.applyPulledPage([], cursor: "at-1")
        for (advance, expected) in [
            (CursorAdvance(from: "at-0", to: "after-a"), "at-1"), (CursorAdvance(from: nil, to: "after-b"), "at-1"),
            (CursorAdvance(from: "at-1", to: "after-c"), "after-c"),
        ] {
            try await store.setData(["n": 1], for: cart)
            let frozen = try #require(try await store.freezeBatch())
            _ = try await store.settle(
                batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: .merge), advancing: advance)
            #expect(try await store.pullCursor() == expected, "from \(String(describing: advance.from))")
        }
        try await store.beginResync()
        try await store.setData(["n": 2], for: cart)
        let frozen = try #require(try await store.freezeBatch())
        _ = try await store.settle(
            batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: .merge), advancing: CursorAdvance(from: nil, to: "x")
        )
        #expect(try await store.pullCursor() == nil, "a resync pulls everything")
    }

    @Test func theUnsentWriteCountIsLive() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        var counts = await store.unsentWriteCounts().makeAsyncIterator()
        #expect(await counts.next() == 0)
        try await store.setData(["n": 1], for: cart)
        #expect(await counts.next() == 1)
        try await store.updateData(for: cart, set: [path("n"): 2])
        #expect(await counts.next() == 2)
        var server = InMemoryServer()
        let frozen = try #require(try await store.freezeBatch())
        _ = try await store.settle(batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: .merge))
        #expect(await counts.next() == 0)
    }

    /// A burst of writes is told as a few counts, not one a write (each wakes the listener's
    /// thread), and the last count told is the count after the burst.
    @Test func aBurstOfWritesIsToldAsAFewCountsEndingWithTheLast() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        let counts = await store.unsentWriteCounts()
        let seen = Task {
            var seen: [Int] = []
            for await count in counts {
                seen.append(count)
                if count == 200 { break }
            }
            return seen
        }
        let start = ContinuousClock.now
        for index in 0..<200 { try await store.setData(["n": .int(Int64(index))], for: DocumentKey(collection: "items", id: "i\(index)")) }
        let told = await seen.value
        // At most one notice every 10 ms, besides the first count and one at the start (a bound
        // that holds however slowly a loaded machine writes).
        let intervals = Int((ContinuousClock.now - start) / CountNoticeThrottle.interval) + 1
        #expect(told.first == 0 && told.last == 200)
        #expect(told.count <= intervals + 2 && told.count < 201, "told \(told.count) counts for 200 writes in \(intervals) intervals")
        #expect(told == told.sorted(), "\(told)")
    }

    /// A count whose notice was waiting when the store closed is told before the stream ends.
    @Test func theLastCountIsToldWhenTheStoreClosesDuringABurst() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        let counts = await store.unsentWriteCounts()
        let seen = Task {
            var seen: [Int] = []
            for await count in counts { seen.append(count) }
            return seen
        }
        for index in 0..<5 { try await store.setData(["n": 1], for: DocumentKey(collection: "items", id: "i\(index)")) }
        await store.close()
        #expect(await seen.value.last == 5)
    }
}

@Suite struct CountNoticeThrottleTests {
    @Test func aChangeAfterQuietIsToldAtOnceAndOneSoonAfterWaitsForTheInterval() {
        var throttle = CountNoticeThrottle()
        let start = ContinuousClock.now
        #expect(throttle.changed(at: start) == .tellNow)
        #expect(throttle.changed(at: start + .milliseconds(3)) == .tell(after: .milliseconds(7)))
        // One notice is scheduled: it will tell the count as it is then.
        #expect(throttle.changed(at: start + .milliseconds(5)) == .nothing)
        throttle.toldScheduled(at: start + .milliseconds(10))
        #expect(throttle.changed(at: start + .milliseconds(12)) == .tell(after: .milliseconds(8)))
        throttle.toldScheduled(at: start + .milliseconds(20))
        #expect(throttle.changed(at: start + .milliseconds(31)) == .tellNow)
    }
}

@Suite struct QueryTests {
    let folder = TemporaryFolder()

    @Test func queriesOnTenThousandDocumentsFilterOrderAndLimitInSQLite() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        var generator = SplitMix64(seed: 7)
        var page: [(key: DocumentKey, state: DocumentState)] = []
        var expected: [String: (city: String, rank: Int64)] = [:]
        for index in 0..<10_000 {
            let id = String(format: "u%05d", index)
            let city = ["Oslo", "Bergen", "Tromsø"][Int(generator.next() % 3)]
            let rank = Int64(generator.next() % 1_000)
            expected[id] = (city, rank)
            var state = DocumentState()
            state.applyLocally(
                try DocumentDelta.create(["address": ["city": .string(city)], "rank": .int(rank)], base: .zero),
                at: Version(UInt64(index + 1)))
            page.append((DocumentKey(collection: "users", id: id), state))
        }
        try await store.applyPulledPage(page, cursor: "10000")
        // One more from a local write, with a double that equals an integer.
        try await store.setData(["address": ["city": "Oslo"], "rank": 3.0], for: DocumentKey(collection: "users", id: "z-local"))

        let oslo = DocumentQuery(collection: "users").whereField(path("address.city"), isEqualTo: "Oslo")
        let found = try await store.documents(matching: oslo)
        #expect(found.count == expected.values.filter { $0.city == "Oslo" }.count + 1)

        let top = try await store.documents(matching: oslo.order(by: path("rank"), descending: true).limit(5))
        let expectedTop = expected.filter { $0.value.city == "Oslo" }.sorted { ($0.value.rank, $1.key) > ($1.value.rank, $0.key) }
            .prefix(5).map(\.value.rank)
        #expect(top.compactMap { $0.data?[path("rank")]?.intValue } == Array(expectedTop))

        let rankThree = try await store.documents(matching: DocumentQuery(collection: "users").whereField(path("rank"), isEqualTo: 3))
        #expect(rankThree.count == expected.values.filter { $0.rank == 3 }.count + 1)
        let noneIsTrue = try await store.documents(matching: DocumentQuery(collection: "users").whereField(path("rank"), isEqualTo: true))
        #expect(noneIsTrue.isEmpty)

        // The queries made indexes on the fields they ordered by and filtered first, and the
        // answers above came through them; a range with a pending document beside them still
        // finds it in order.
        try await store.updateData(for: DocumentKey(collection: "users", id: "u00000"), set: [path("rank"): .int(-1)])
        let lowest = try await store.documents(
            matching: DocumentQuery(collection: "users").filtered(.init(path: path("rank"), relation: .less, value: 2)).order(
                by: path("rank")
            )
            .limit(3))
        let expectedLowest =
            ["u00000"]
            + expected.filter { $0.key != "u00000" && $0.value.rank < 2 }.sorted { ($0.value.rank, $0.key) < ($1.value.rank, $1.key) }
            .prefix(2).map(\.key)
        #expect(lowest.map(\.key.id) == expectedLowest)
        await store.close()
        let indexes = try Database(path: folder.path("store.sqlite")).query(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND name LIKE 'query%' ORDER BY sql"
        ) { $0.text(0) ?? "" }
        #expect(indexes.count == 2 && indexes.allSatisfy { $0.contains("json_extract(view, '$.") }, "\(indexes)")
    }

    @Test func aSmallCollectionGetsNoIndex() async throws {
        let store = try LocalStore(path: folder.path("small.sqlite"))
        let page = try (0..<(LocalStore.queryIndexThreshold - 1)).map { index in
            var state = DocumentState()
            state.applyLocally(try DocumentDelta.create(["rank": .int(Int64(index))], base: .zero), at: Version(UInt64(index + 1)))
            return (key: DocumentKey(collection: "few", id: "d\(index)"), state: state)
        }
        try await store.applyPulledPage(page, cursor: "1")
        _ = try await store.documents(matching: DocumentQuery(collection: "few").order(by: path("rank")).limit(1))
        await store.close()
        let indexes = try Database(path: folder.path("small.sqlite")).query(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'query%'"
        ) { $0.text(0) ?? "" }
        #expect(indexes.isEmpty)
    }
}

@Suite struct SchemaTests {
    let folder = TemporaryFolder()

    func storeError(_ body: () async throws -> Void) async -> StoreError? {
        do {
            try await body()
            return nil
        } catch {
            return error as? StoreError
        }
    }

    @Test func aFileFromANewerVersionIsRefused() async throws {
        let file = folder.path("store.sqlite")
        _ = try LocalStore(path: file)
        try Database(path: file).execute("PRAGMA user_version = 99")
        let error = await storeError { _ = try LocalStore(path: file) }
        #expect(error?.code == .newerSchema)
    }

    @Test func aDatabaseThatIsNotAStoreIsRefusedAndLeftAlone() async throws {
        let file = folder.path("other.sqlite")
        try Database(path: file).execute("CREATE TABLE notes (id TEXT); INSERT INTO notes VALUES ('keep me')")
        let error = await storeError { _ = try LocalStore(path: file) }
        #expect(error?.code == .notAStore)
        #expect(try Database(path: file).queryFirst("SELECT id FROM notes") { $0.text(0) } == "keep me")
    }

    @Test func aFileThatIsNotADatabaseIsRefused() async throws {
        let file = folder.path("notes.txt")
        try Data(String(repeating: "not a database ", count: 200).utf8).write(to: URL(fileURLWithPath: file))
        let error = await storeError { _ = try LocalStore(path: file) }
        #expect(error?.code == .notAStore)
    }

    @Test func aCorruptFileGivesAClearError() async throws {
        let file = folder.path("store.sqlite")
        do {
            let store = try LocalStore(path: file)
            for index in 0..<200 {
                try await store.setData(
                    ["n": .int(Int64(index)), "pad": .string(String(repeating: "x", count: 500))],
                    for: DocumentKey(collection: "c", id: "d\(index)"))
            }
        }
        try Database(path: file).execute("PRAGMA wal_checkpoint(TRUNCATE)")
        // Scribble over everything after the first page.
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: file))
        try handle.seek(toOffset: 4096)
        try handle.write(contentsOf: Data(repeating: 0xA5, count: 64 * 1024))
        try handle.close()
        let error = await storeError {
            let store = try LocalStore(path: file)
            _ = try await store.document(DocumentKey(collection: "c", id: "d5"))
            _ = try await store.documents(matching: DocumentQuery(collection: "c"))
        }
        #expect(error?.code == .corrupt || error?.code == .notAStore, "\(String(describing: error))")
    }

    @Test func anOlderStoreIsMigratedAndKeepsItsData() async throws {
        let file = folder.path("store.sqlite")
        do {
            _ = try LocalStore(path: file, schemaVersion: 1)
            let database = try Database(path: file)
            try database.run("INSERT INTO meta (key, value) VALUES ('client_id', 'old-client')")
            try database.run("INSERT INTO documents (collection, id, view) VALUES ('c', 'd', '{\"n\":1}')")
        }
        do {
            let store = try LocalStore(path: file)
            #expect(store.clientID == "old-client")
            #expect(try await store.document(DocumentKey(collection: "c", id: "d")).data == ["n": 1])
        }
        #expect(try Database(path: file).queryFirst("PRAGMA user_version") { $0.integer(0) } == Int64(Schema.currentVersion))
    }

    @Test func aRunOfWritesIsNotCheckpointedAtSQLitesDefaultLength() async throws {
        let file = folder.path("store.sqlite")
        let store = try LocalStore(path: file)
        // Each write appends a row in a transaction of its own: at least a frame each.
        for index in 0..<1_500 {
            try await store.setData(["n": .int(Int64(index))], for: DocumentKey(collection: "c", id: "d\(index)"))
        }
        let walBytes = try FileManager.default.attributesOfItem(atPath: file + "-wal")[.size] as? Int ?? 0
        let frameBytes = 24 + LocalStore.pageSize
        #expect(walBytes > 1_400 * frameBytes, "the WAL was folded in at about 1,000 pages (\(walBytes) bytes)")
        #expect(LocalStore.checkpointPages * frameBytes < 20_000_000)
    }

    @Test func aNewStoreHasSmallPagesAndAnOlderOneKeepsItsOwn() async throws {
        let pageSize = { (file: String) in try Database(path: file).queryFirst("PRAGMA page_size") { Int($0.integer(0)) } }
        let new = folder.path("new.sqlite")
        do {
            let store = try LocalStore(path: new)
            try await store.setData(["n": 1], for: DocumentKey(collection: "c", id: "d"))
        }
        #expect(try pageSize(new) == LocalStore.pageSize)
        #expect(LocalStore.pageSize == 2_048)

        // A file made with SQLite's default (as every store was before) keeps it, and works.
        let older = folder.path("older.sqlite")
        _ = try LocalStore(path: older, schemaVersion: Schema.currentVersion - 1)
        do {
            let store = try LocalStore(path: older)
            try await store.setData(["n": 2], for: DocumentKey(collection: "c", id: "d"))
            #expect(try await store.document(DocumentKey(collection: "c", id: "d")).data == ["n": 2])
        }
        #expect(try pageSize(older) == 4_096)
        let reopened = try LocalStore(path: older)
        #expect(try await reopened.document(DocumentKey(collection: "c", id: "d")).data == ["n": 2])
    }

    @Test func theStricterDurabilityCanBeChosen() async throws {
        let file = folder.path("store.sqlite")
        _ = try LocalStore(path: file, durability: .full)
        let database = try Database(path: file, durability: .full) // the store above is closed
        #expect(try database.queryFirst("PRAGMA synchronous") { $0.integer(0) } == 2)
        #expect(try database.queryFirst("PRAGMA journal_mode") { $0.text(0) } == "wal")
    }
}

/// A write taken back (`takeBack(_:)`, for a write that could not be sent with offline
/// persistence off) leaves the queue and the document as they were before it.
@Suite struct TakeBackTests {
    let folder = TemporaryFolder()
    let cart = DocumentKey(collection: "carts", id: "c1")

    @Test func aWriteComposedIntoAnEarlierOneIsTakenBackAloneAndTheEarlierIsSent() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        _ = try await store.write(.set(["qty": 1]), for: cart)
        let (_, receipt) = try await store.write(
            .update(set: [try FieldPath("qty"): 2], remove: [], setAdd: [:], setRemove: [:]), for: cart)
        #expect(try await store.takeBack(receipt))
        #expect(try await store.document(cart).data == ["qty": 1])
        #expect(await store.unsentWriteCount == 1)
        #expect(try await store.takeBack(receipt) == false, "taken back twice")
        let frozen = try #require(try await store.freezeBatch())
        #expect(frozen.batch.changes.count == 1 && frozen.batch.changes[0].writes == 1)
    }

    @Test func aWriteThatMadeItsChangeLeavesNoChangeAndAFrozenOneStays() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        let (_, first) = try await store.write(.set(["qty": 1]), for: cart)
        #expect(try await store.takeBack(first))
        #expect(try await store.document(cart).data == nil)
        #expect(await store.unsentWriteCount == 0)
        #expect(try await store.freezeBatch() == nil)
        let (_, second) = try await store.write(.set(["qty": 3]), for: cart)
        _ = try #require(try await store.freezeBatch())
        #expect(try await store.takeBack(second) == false, "a frozen write may have been sent: it stays")
        #expect(try await store.document(cart).data == ["qty": 3])
    }

    @Test func aWriteAfterAnotherDocumentsTakesBackToTheEarlierChangesView() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        _ = try await store.write(.set(["qty": 1]), for: cart)
        _ = try await store.write(.set(["n": 1]), for: DocumentKey(collection: "carts", id: "other"))
        let (_, receipt) = try await store.write(.set(["qty": 5]), for: cart)
        #expect(try await store.takeBack(receipt))
        #expect(try await store.document(cart).data == ["qty": 1])
        #expect(try await store.documents(matching: DocumentQuery(collection: "carts")).map(\.data) == [["qty": 1], ["n": 1]])
        let reopened = try await reopen(store)
        #expect(try await reopened.document(cart).data == ["qty": 1])
    }

    func reopen(_ store: LocalStore) async throws -> LocalStore {
        await store.close()
        return try LocalStore(path: folder.path("store.sqlite"))
    }
}

/// Writes made while the server answers are saved as written: they never compose with queued
/// writes, and go out under clientWins, through a refusal of the whole batch and a reopen.
@Suite struct AsWrittenTests {
    let folder = TemporaryFolder()
    let cart = DocumentKey(collection: "carts", id: "c1")

    @Test func anOnlineWriteStaysApartFromTheQueuedWritesOfItsDocumentAndKeepsItsPolicy() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        _ = try await store.write(.set(["qty": 1]), for: cart)
        _ = try await store.write(.update(set: [path("qty"): 2], remove: [], setAdd: [:], setRemove: [:]), for: cart)
        _ = try await store.write(.update(set: [path("note"): "a"], remove: [], setAdd: [:], setRemove: [:]), for: cart, asWritten: true)
        _ = try await store.write(.update(set: [path("note"): "b"], remove: [], setAdd: [:], setRemove: [:]), for: cart, asWritten: true)
        _ = try await store.write(.update(set: [path("qty"): 3], remove: [], setAdd: [:], setRemove: [:]), for: cart)
        #expect(try await store.document(cart).data == ["qty": 3, "note": "b"])
        let strategies = { (batch: FrozenBatch) in batch.batch.changes.map { "\($0.writes) \($0.strategy.map(\.rawValue) ?? "-")" } }
        let frozen = try #require(try await store.freezeBatch(strategyOf: { _ in .serverWins }))
        #expect(strategies(frozen) == ["2 serverWins", "2 clientWins", "1 serverWins"])
        // Refused whole and put back, then reopened: each change keeps its policy.
        try await store.unfreezeBatch()
        await store.close()
        let reopened = try LocalStore(path: folder.path("store.sqlite"))
        let again = try #require(try await reopened.freezeBatch(strategyOf: { _ in .merge }))
        #expect(strategies(again) == ["2 merge", "2 clientWins", "1 merge"])
    }

    @Test func aRefusedOnlineChangeIsSentAgainWriteByWriteAsWritten() async throws {
        let store = try LocalStore(path: folder.path("store.sqlite"))
        _ = try await store.write(.set(["qty": 1]), for: cart, asWritten: true)
        _ = try await store.write(.update(set: [path("note"): "a"], remove: [], setAdd: [:], setRemove: [:]), for: cart, asWritten: true)
        let frozen = try #require(try await store.freezeBatch(strategyOf: { _ in .serverWins }))
        #expect(frozen.batch.changes.map(\.writes) == [2])
        let report = try await store.settle(batch: frozen.batch.sequence, results: [.rejected(reason: .invalid, message: "no")])
        #expect(report.resent == [cart])
        let resent = try #require(try await store.freezeBatch(strategyOf: { _ in .serverWins }))
        #expect(resent.batch.changes.map(\.strategy) == [.clientWins, .clientWins])
    }
}
