import AbrovaCore
import AbrovaSQLite
import AbrovaTestSupport
import Foundation
import Testing

@testable import AbrovaStore

/// Only the newest unsent change of a document keeps its view current (Spec/storage.md, "Writes"):
/// settles and pulls render one view a document, not one a change. These check that what the app
/// sees (snapshots, queries, listeners, a store opened again) is still the confirmed state plus every
/// unsent change, after rollbacks, rebases, pulls and cancelled changes.
@Suite struct NewestViewTests {
    let folder = TemporaryFolder()
    let cart = DocumentKey(collection: "carts", id: "c1")
    let other = DocumentKey(collection: "carts", id: "c2")

    func openStore() throws -> LocalStore { try LocalStore(path: folder.path("store.sqlite")) }

    /// The server holding both carts, pulled into `store`.
    func serverWithCarts(
        pulledInto store: LocalStore, refuse: @escaping @Sendable (DocumentKey, DocumentDelta) -> (Refusal.Reason, String)?
    )
        async throws -> InMemoryServer
    {
        var server = InMemoryServer(refuse: refuse)
        try server.write(try DocumentDelta.create(["name": "milk", "price": 5], base: .zero), to: cart)
        try server.write(try DocumentDelta.update(setAdd: [path("items"): ["bread"]], base: server.version), to: cart)
        try server.write(try DocumentDelta.create(["n": 0], base: .zero), to: other)
        let page = server.pull(after: nil)
        try await store.applyPulledPage(page.documents, cursor: page.cursor)
        return server
    }

    /// What each document shows through every reader: the snapshot and a query over the collection.
    func shown(_ store: LocalStore) async throws -> [DocumentKey: Value] {
        var result: [DocumentKey: Value] = [:]
        for key in [cart, other] { result[key] = try await store.document(key).data }
        let queried = try await store.documents(matching: DocumentQuery(collection: "carts"))
        #expect(Dictionary(uniqueKeysWithValues: queried.compactMap { snapshot in snapshot.data.map { (snapshot.key, $0) } }) == result)
        return result
    }

    /// The views the rows of `table` hold for `key`, oldest first.
    func storedViews(_ file: String, table: String, of key: DocumentKey) throws -> [String?] {
        let database = try Database(path: file)
        let ordering = table == "pending" ? "sequence" : "position"
        return try database.query(
            "SELECT view FROM \(table) WHERE collection = ? AND id = ? ORDER BY \(ordering)",
            [.text(key.collection), .text(key.id)]
        ) { $0.text(0) }
    }

    @Test func aRejectedChangeAmongOthersShowsTheConfirmedStatePlusWhatIsStillPending() async throws {
        let file = folder.path("store.sqlite")
        var expected: [DocumentKey: Value] = [:]
        do {
            let store = try openStore()
            var server = try await serverWithCarts(pulledInto: store) { _, delta in
                delta.assignments[path("price")] != nil ? (.forbidden, "the price is the shop's") : nil
            }
            // Interleaved, so that each write is its own pending change: c1 qty, c2 n, c1 price (refused), c2 n, c1 note.
            try await store.updateData(for: cart, set: [path("qty"): 2])
            try await store.updateData(for: other, set: [path("n"): 1])
            try await store.updateData(for: cart, set: [path("price"): 1])
            try await store.updateData(for: other, set: [path("n"): 2])
            try await store.updateData(for: cart, set: [path("note"): "ring twice"], setAdd: [path("tags"): ["gift"]])

            // The batch composes each document's writes into one change; the cart's, refused,
            // goes back write by write.
            let frozen = try #require(try await store.freezeBatch(maximumChanges: 2))
            #expect(frozen.batch.changes.map(\.key) == [cart, other])
            let composed = try await store.settle(batch: frozen.batch.sequence, results: server.push(frozen.batch, strategy: .merge))
            #expect(composed.rejections.isEmpty)
            var cartChanges = await store.changes(of: cart).makeAsyncIterator()
            var queryChanges = await store.changes(matching: DocumentQuery(collection: "carts")).makeAsyncIterator()
            _ = await cartChanges.next()
            _ = await queryChanges.next()
            let alone = try #require(try await store.freezeBatch(maximumChanges: 2))
            #expect(alone.batch.changes.map(\.key) == [cart, cart], "each write alone, never composed again")
            let report = try await store.settle(batch: alone.batch.sequence, results: server.push(alone.batch, strategy: .merge))
            #expect(report.rejections.map(\.key) == [cart])

            expected = [
                cart: ["name": "milk", "price": 5, "items": ["bread"], "qty": 2, "note": "ring twice", "tags": ["gift"]], other: ["n": 2],
            ]
            let rolledBack = try #require(await cartChanges.next())
            #expect(rolledBack.data == expected[cart] && rolledBack.metadata.isRollback && rolledBack.metadata.hasPendingWrites)
            let queried = try #require(await queryChanges.next())
            #expect(queried.first { $0.key == cart }?.data == expected[cart])
            #expect(try await shown(store) == expected)
            await store.close()
            // The newest pending change of each document holds its view.
            #expect(try storedViews(file, table: "pending", of: cart).last??.contains("ring twice") == true)
        }
        // Opened again (as after the app was killed), the store shows the same documents.
        let reopened = try openStore()
        #expect(try await shown(reopened) == expected)
        #expect(await reopened.unsentWriteCount == 1, "the note is still to be sent")
    }

    @Test func viewsAfterManyBatchesAndAPullMatchAReplayOfTheChanges() async throws {
        let file = folder.path("store.sqlite")
        let store = try openStore()
        var server = try await serverWithCarts(pulledInto: store) { _, _ in nil }
        for round in 0..<12 {
            try await store.updateData(for: cart, set: [path("qty.a"): .int(Int64(round))], setAdd: [path("items"): [.string("i\(round)")]])
            try await store.updateData(for: other, set: [path("n"): .int(Int64(round))])
            if round % 3 == 0 { try await store.updateData(for: cart, setRemove: [path("items"): [.string("i\(round)")]]) }
        }
        // Someone else writes c1 meanwhile; the pull lands while changes are in flight and pending.
        try server.write(try DocumentDelta.update(set: [path("name"): "oat milk"], base: server.version), to: cart)
        let first = try #require(try await store.freezeBatch(maximumBytes: 400))
        let page = server.pull(after: try await store.pullCursor())
        try await store.applyPulledPage(page.documents, cursor: page.cursor)
        let wanted = try await shown(store)
        #expect(wanted[cart]?.mapValue?["name"] == "oat milk")
        _ = try await store.settle(batch: first.batch.sequence, results: server.push(first.batch, strategy: .merge))
        #expect(try await shown(store) == wanted)
        while let batch = try await store.freezeBatch(maximumBytes: 400) {
            _ = try await store.settle(batch: batch.batch.sequence, results: server.push(batch.batch, strategy: .merge))
            #expect(try await shown(store) == wanted)
            await store.close()
            let reopened = try LocalStore(path: file)
            #expect(try await shown(reopened) == wanted)
            await reopened.close()
            return try await finish(file: file, server: &server, wanted: wanted)
        }
        Issue.record("the first batch held everything")
    }

    /// Settles what is left on a store opened again; the server ends with what the device showed.
    func finish(file: String, server: inout InMemoryServer, wanted: [DocumentKey: Value]) async throws {
        let store = try LocalStore(path: file)
        while let batch = try await store.freezeBatch(maximumBytes: 400) {
            _ = try await store.settle(batch: batch.batch.sequence, results: server.push(batch.batch, strategy: .merge))
            #expect(try await shown(store) == wanted)
        }
        #expect(await store.unsentWriteCount == 0)
        #expect(server.documents[cart]?.document == wanted[cart] && server.documents[other]?.document == wanted[other])
    }

    @Test func aCancelledNewestChangeLeavesTheViewOnTheChangeBeforeIt() async throws {
        let file = folder.path("store.sqlite")
        do {
            let store = try openStore()
            var server = try await serverWithCarts(pulledInto: store) { _, _ in nil }
            try await store.updateData(for: cart, set: [path("qty"): 1])
            try await store.updateData(for: other, set: [path("n"): 1])
            try await store.updateData(for: cart, set: [path("qty"): 2])
            try await store.updateData(for: other, set: [path("n"): 2])
            // Takes nothing: the server never showed this element. Frozen, it is dropped.
            try await store.updateData(for: cart, setRemove: [path("items"): ["ghost"]])
            let frozen = try #require(try await store.freezeBatch())
            #expect(frozen.batch.changes.map(\.key) == [cart, other])
            await store.close()
            #expect(try storedViews(file, table: "inflight", of: cart).last??.contains("\"qty\":2") == true)
            let reopened = try LocalStore(path: file)
            #expect(try await shown(reopened) == [cart: ["name": "milk", "price": 5, "items": ["bread"], "qty": 2], other: ["n": 2]])
            let batch = try #require(try await reopened.freezeBatch())
            #expect(batch == frozen)
            _ = try await reopened.settle(batch: batch.batch.sequence, results: server.push(batch.batch, strategy: .merge))
            #expect(try await shown(reopened) == [cart: ["name": "milk", "price": 5, "items": ["bread"], "qty": 2], other: ["n": 2]])
        }
    }
}
