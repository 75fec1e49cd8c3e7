import AbrovaCore
import AbrovaTestSupport
import Testing

@testable import AbrovaStore

/// The sync scope in the device store: narrowing removes what lies outside at once, but what has
/// unsent changes, which goes once they are sent; widening asks the next pull for the new part.
@Suite struct SyncScopeStoreTests {
    let folder = TemporaryFolder()

    @Test func narrowingKeepsUnsentDocumentsUntilSentAndWideningAsksForTheNewPart() async throws {
        var server = InMemoryServer()
        let cart = DocumentKey(collection: "carts", id: "c1")
        let order = DocumentKey(collection: "orders", id: "o1")
        try server.write(DocumentDelta.create(["n": 1], base: .zero), to: cart)
        try server.write(DocumentDelta.create(["n": 1], base: .zero), to: order)
        let store = try LocalStore(path: folder.path("device.sqlite"))
        let page = server.pull(after: nil)
        try await store.applyPulledPage(page.documents, cursor: page.cursor)
        #expect(try await store.scopeWidening() == nil)

        let pending = DocumentKey(collection: "orders", id: "o2")
        try await store.setData(["n": 2], for: pending)
        #expect(try await store.setSyncScope(["carts"]))
        #expect(try await store.document(order).exists == false)
        #expect(try await store.document(pending).exists)
        #expect(try await store.document(cart).exists)
        #expect(try await store.scopeWidening() == nil)

        let frozen = try #require(try await store.freezeBatch())
        _ = try await store.settle(batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: .merge))
        #expect(try await store.document(pending).exists == false)

        // A write outside the scope goes once sent too.
        let another = DocumentKey(collection: "orders", id: "o3")
        try await store.setData(["n": 3], for: another)
        let next = try #require(try await store.freezeBatch())
        _ = try await store.settle(batch: next.batch.sequence, results: server.push(next.batch, strategy: .merge))
        #expect(try await store.document(another).exists == false)

        #expect(try await store.setSyncScope(["carts", "orders"]))
        #expect(try await store.scopeWidening() == .collections(["orders"]))
        // A widening made while one is pulled stays for the next pull.
        #expect(try await store.setSyncScope(["carts", "orders", "lists"]))
        try await store.finishScopeWidening(.collections(["orders"]))
        #expect(try await store.scopeWidening() == .collections(["lists"]))
        // Narrowed again before it was pulled: only what the scope still holds is asked for.
        #expect(try await store.setSyncScope(["carts"]))
        #expect(try await store.scopeWidening() == nil)
        #expect(try await store.setSyncScope(nil as SyncScope?))
        #expect(try await store.scopeWidening() == .everything)
        #expect(try await store.setSyncScope(["orders"]))
        #expect(try await store.scopeWidening() == .collections(["orders"]))
        try await store.finishScopeWidening(.collections(["orders"]))
        #expect(try await store.scopeWidening() == nil)
        #expect(try await store.setSyncScope(["orders"]) == false)
    }

    @Test func aDocumentThatLeftTheScopeGoesButWaitsForItsUnsentChanges() async throws {
        let store = try LocalStore(path: folder.path("device.sqlite"))
        let anas = try SyncScope(jsonText: #"[{"collection":"carts","where":{"owner":"ana"}}]"#)
        #expect(try await store.setSyncScope(anas))
        #expect(try await store.scopeWidening() == nil) // narrower than everything
        var server = InMemoryServer()
        let (c1, c2, c3) = (
            DocumentKey(collection: "carts", id: "c1"), DocumentKey(collection: "carts", id: "c2"),
            DocumentKey(collection: "carts", id: "c3")
        )
        for key in [c1, c2, c3] { try server.write(DocumentDelta.create(["owner": "ana"], base: .zero), to: key) }
        let page = server.pull(after: nil)
        try await store.applyPulledPage(page.documents, cursor: page.cursor)
        try await store.updateData(for: c2, set: [try FieldPath("n"): 1])

        // The page says c1 and c2 left: c1 goes at once, c2 once its change is sent.
        try await store.applyPulledPage(pulled: [], cursor: page.cursor, left: [c1, c2])
        #expect(try await store.document(c1).exists == false)
        #expect(try await store.document(c2).exists)
        let frozen = try #require(try await store.freezeBatch())
        try server.write(DocumentDelta.update(set: [try FieldPath("owner"): "ben"], base: Version(2)), to: c2)
        _ = try await store.settle(batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: .merge))
        #expect(try await store.document(c2).exists == false)

        // A write that makes a document stop matching keeps it until sent, then it goes.
        try await store.updateData(for: c3, set: [try FieldPath("owner"): "cleo"])
        #expect(try await store.document(c3).exists)
        let next = try #require(try await store.freezeBatch())
        _ = try await store.settle(batch: next.batch.sequence, results: server.push(next.batch, strategy: .merge))
        #expect(try await store.document(c3).exists == false)

        // A page asked for under a wider scope brings what this one does not cover: it goes at
        // the end of the pull.
        let whole = server.pull(after: nil)
        try await store.applyPulledPage(whole.documents, cursor: whole.cursor)
        #expect(try await store.endOfPull() == [c2, c3])
        #expect(try await store.document(c1).exists)
    }

    /// A document named in `left` while it had an unsent change goes once that change is settled,
    /// even when the settle leaves it as it was before (a refusal rolls back onto the old state,
    /// which the scope still covers): what it shows is older than what the server said.
    @Test func aDocumentThatLeftGoesAfterItsRefusedChangeEvenIfItsOldStateMatches() async throws {
        let store = try LocalStore(path: folder.path("device.sqlite"))
        #expect(try await store.setSyncScope(try SyncScope(jsonText: #"[{"collection":"carts","where":{"owner":"ana"}}]"#)))
        var server = InMemoryServer()
        let cart = DocumentKey(collection: "carts", id: "c1")
        try server.write(DocumentDelta.create(["owner": "ana"], base: .zero), to: cart)
        let page = server.pull(after: nil)
        try await store.applyPulledPage(page.documents, cursor: page.cursor)
        try await store.updateData(for: cart, set: [try FieldPath("n"): 1])
        try await store.applyPulledPage(pulled: [], cursor: page.cursor, left: [cart])
        #expect(try await store.document(cart).exists)
        let frozen = try #require(try await store.freezeBatch())
        _ = try await store.settle(batch: frozen.batch.sequence, results: [.rejected(reason: .forbidden, message: "not yours any more")])
        #expect(try await store.document(cart).exists == false)
    }
}
