import AbrovaCore
import AbrovaTestSupport
import Testing

@testable import AbrovaStore

/// Counters in the device's queue: increments compose with each other, but a later write that
/// overwrites a counter starts a change of its own, in the queue and in the frozen batch, so that
/// the server counts the increment whatever it decides about that write.
@Suite struct CounterQueueTests {
    let folder = TemporaryFolder()
    let cart = DocumentKey(collection: "carts", id: "c1")
    let milk = try! FieldPath("qty.milk")

    func increment(_ store: LocalStore, by amount: Int64) async throws {
        _ = try await store.write(
            .update(set: [:], remove: [], setAdd: [:], setRemove: [:], increments: [milk: .int(amount)]), for: cart)
    }

    /// A store holding the cart as the server confirmed it (qty.milk 1 at version 1).
    func storeWithCart(_ server: inout InMemoryServer) async throws -> LocalStore {
        try server.write(DocumentDelta.create(["qty": ["milk": 1]], base: .zero), to: cart)
        let store = try LocalStore(path: folder.path("device.sqlite"))
        let page = server.pull(after: nil)
        try await store.applyPulledPage(page.documents, cursor: page.cursor)
        return store
    }

    @Test func incrementsComposeAndAnOverwriteStartsAChangeOfItsOwn() async throws {
        var server = InMemoryServer()
        let store = try await storeWithCart(&server)
        try await increment(store, by: 2)
        try await increment(store, by: 3)
        let shown = try await store.updateData(for: cart, set: [try FieldPath("note"): "x"])
        #expect(shown.data == ["qty": ["milk": 6], "note": "x"])
        try await store.updateData(for: cart, set: [milk: 0])
        try await increment(store, by: 1)
        #expect(try await store.document(cart).data == ["qty": ["milk": 1], "note": "x"])

        let frozen = try #require(try await store.freezeBatch())
        #expect(frozen.batch.changes.count == 2)
        #expect(frozen.batch.changes.map(\.writes) == [3, 2])
        #expect(frozen.batch.changes[0].delta.increments[milk]?.amount == .int(5))
        #expect(frozen.batch.changes[1].delta.assignments[milk]?.value == .int(0))
        #expect(frozen.batch.changes[1].delta.increments[milk]?.amount == .int(1))
    }

    /// A refused change of several writes is sent again write by write, and the document's later
    /// changes of the batch with it; a later change that was applied is not counted again.
    @Test func anIncrementAppliedAfterARefusedChangeIsNotSentAgain() async throws {
        var server = InMemoryServer(refuse: { _, delta in
            delta.assignments[try! FieldPath("note")]?.value == "bad" ? (.invalid, "no bad notes") : nil
        })
        let store = try await storeWithCart(&server)
        let note = try FieldPath("note")
        try await store.updateData(for: cart, set: [note: "ok"])
        try await store.updateData(for: cart, set: [note: "bad"]) // composed with the one before: 2 writes
        // Another device writes the cart; pulled, it makes the next change's base newer (apart).
        try server.write(DocumentDelta.update(set: [try FieldPath("by"): "ben"], base: Version(1)), to: cart)
        let page = server.pull(after: try await store.pullCursor())
        try await store.applyPulledPage(page.documents, cursor: page.cursor)
        try await increment(store, by: 1)

        for _ in 0..<4 {
            guard let frozen = try await store.freezeBatch() else { break }
            _ = try await store.settle(batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: .serverWins))
        }
        #expect(await store.unsentWriteCount == 0)
        #expect(server.documents[cart]?.document?.mapValue?["qty"] == ["milk": 2])
        #expect(server.documents[cart]?.document?.mapValue?["note"] == "ok")
    }

    /// Another device added to the counter since: under serverWins the device's assignment of it
    /// loses, and the increments made before and after it still count.
    @Test func anAssignmentThatLosesTakesNoIncrementWithIt() async throws {
        var server = InMemoryServer()
        let store = try await storeWithCart(&server)
        try server.write(DocumentDelta.update(increments: [milk: .int(10)], base: Version(1)), to: cart) // 11
        try await increment(store, by: 2)
        try await store.updateData(for: cart, set: [milk: 0])
        try await increment(store, by: 1)

        let frozen = try #require(try await store.freezeBatch())
        let answer = server.push(frozen.batch, strategy: .serverWins)
        _ = try await store.settle(batch: frozen.batch.sequence, results: answer)
        #expect(server.documents[cart]?.document == ["qty": ["milk": 14]])
        let page = server.pull(after: try await store.pullCursor())
        try await store.applyPulledPage(page.documents, cursor: page.cursor)
        #expect(try await store.document(cart).data == ["qty": ["milk": 14]])
        #expect(await store.unsentWriteCount == 0)
    }
}
