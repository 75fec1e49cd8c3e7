import AbrovaServer
import AbrovaTestSupport
import Foundation
import Testing

@testable import AbrovaSync

/// The four strategies end to end: two devices edit one shopping cart offline, then reconnect one
/// after the other against the real server; both end with the same cart, as the strategy says.
@Suite struct StrategyTests {
    let folder = TemporaryFolder()

    struct Outcome {
        var cart: [String: Value]?
        var otherCart: [String: Value]?
        var conflicts: [ConflictInfo]
        var resolverCalls: [ConflictInfo]
    }

    /// Ana's device makes the cart {qty: 1, items: {milk}}; both devices go offline; Ana adds eggs
    /// and sets qty 2; Ben's device adds bread, removes milk and sets qty 3. Ana reconnects first.
    func run(_ strategy: ConflictStrategy, resolution: ConflictResolution = .useServer) async throws -> Outcome {
        let live = try LiveSyncServer(rules: RuleBook(fallback: PresetRules.anyAuthenticatedUser))
        let calls = Locked<[ConflictInfo]>([])
        let ana = try Device(live, folder: folder, name: "ana") { $0.conflictStrategy(strategy).conflictResolver { _ in .useServer } }
        let ben = try Device(live, user: "ben", folder: folder, name: "ben") { builder in
            builder.conflictStrategy(strategy).conflictResolver { info in
                calls.update { $0.append(info) }
                return resolution
            }
        }
        let listener = RecordingListener()
        ben.sync.addSyncListener(listener)
        let streamed = Locked<[ConflictInfo]>([])
        let conflictStream = ben.sync.conflicts
        let collecting = Task { for await conflict in conflictStream { streamed.update { $0.append(conflict) } } }
        defer { collecting.cancel() }
        let cart = ana.carts.document("c1")
        try await cart.setData(["qty": 1])
        try await cart.updateData(["items": .arrayUnion(["milk"])])
        await ben.sync.syncNow()
        #expect(try await ben.carts.document("c1").getDocument(source: .cache).data == ["qty": 1, "items": ["milk"]])
        await ana.sync.disconnect()
        await ben.sync.disconnect()
        try await cart.updateData(["items": .arrayUnion(["eggs"]), "qty": 2])
        try await ben.carts.document("c1").updateData(["items": .arrayUnion(["bread"]), "qty": 3])
        try await ben.carts.document("c1").updateData(["items": .arrayRemove(["milk"])])
        await ana.sync.reconnect()
        #expect(await eventually { await ana.sync.pendingCount == 0 })
        await ben.sync.reconnect()
        #expect(await eventually { await ben.sync.pendingCount == 0 })
        if strategy == .manual {
            // The resolver decides outside the run; its resolution is sent by the run it starts.
            let settled = await eventually {
                let kept = (try? await ben.sync.store.unresolvedConflicts()) ?? []
                let pending = await ben.sync.pendingCount
                return kept.isEmpty && pending == 0
            }
            #expect(settled, "the resolution was not written and sent")
        }
        await ben.sync.syncNow()
        await ana.sync.syncNow()
        let outcome = Outcome(
            cart: try await ben.carts.document("c1").getDocument(source: .cache).data?.mapValue,
            otherCart: try await cart.getDocument(source: .cache).data?.mapValue,
            conflicts: listener.conflicts.value, resolverCalls: calls.value)
        #expect(outcome.cart == outcome.otherCart, "the devices disagree")
        // The stream hears what the listener hears.
        #expect(
            await eventually { streamed.value.map(\.conflicts) == listener.conflicts.value.map(\.conflicts) },
            "the conflicts stream heard \(streamed.value.count), the listener \(listener.conflicts.value.count)")
        let server = try live.service.document(DocumentKey(collection: "carts", id: "c1"), caller: .user("ana")).state.document?.mapValue
        #expect(outcome.cart == server, "the device and the server disagree")
        await live.stop()
        return outcome
    }

    /// Offline, a device edits the cart, then another document, then the cart again: one batch
    /// holds the cart twice. The second change is the device's latest word on the cart: its
    /// quantity stands, and it removes the element the first change added.
    @Test(arguments: [ConflictStrategy.merge, .serverWins, .clientWins])
    func aDocumentQueuedTwiceInOneBatchEndsAsTheDeviceLastWroteIt(strategy: ConflictStrategy) async throws {
        let live = try LiveSyncServer()
        let device = try Device(live, folder: folder) { $0.conflictStrategy(strategy) }
        let cart = device.carts.document("c1")
        try await cart.setData(["qty": 1])
        try await cart.updateData(["items": .arrayUnion(["milk"])])
        await device.sync.disconnect()
        try await cart.updateData(["items": .arrayUnion(["eggs"]), "qty": 2])
        try await device.carts.document("c2").setData(["note": "between"])
        try await cart.updateData(["items": .arrayRemove(["eggs"]), "qty": 3])
        #expect(try await cart.getDocument(source: .cache).data == ["qty": 3, "items": ["milk"]])
        await device.sync.reconnect()
        #expect(await eventually { await device.sync.pendingCount == 0 })
        let server = try live.service.document(DocumentKey(collection: "carts", id: "c1"), caller: .user("ana")).state.document
        #expect(server == ["qty": 3, "items": ["milk"]])
        #expect(try await cart.getDocument(source: .cache).data == server)
        await live.stop()
    }

    @Test func mergeCombinesTheCartsElementByElementAndTheServersQuantityStands() async throws {
        let outcome = try await run(.merge)
        #expect(outcome.cart == ["qty": 2, "items": ["bread", "eggs"]])
        let outcomes = Dictionary(uniqueKeysWithValues: outcome.conflicts.flatMap(\.conflicts).map { ($0.path.dotted, $0.outcome) })
        #expect(outcomes == ["items": .merged, "qty": .serverWon])
    }

    @Test func serverWinsKeepsTheServersCartAndDropsTheDevicesChanges() async throws {
        let outcome = try await run(.serverWins)
        #expect(outcome.cart == ["qty": 2, "items": ["eggs", "milk"]])
        #expect(outcome.conflicts.flatMap(\.conflicts).allSatisfy { $0.outcome == .serverWon })
    }

    @Test func clientWinsAppliesWhatTheDeviceDidAndKeepsWhatOnlyTheServerDid() async throws {
        let outcome = try await run(.clientWins)
        #expect(outcome.cart == ["qty": 3, "items": ["bread", "eggs"]])
        #expect(!outcome.conflicts.isEmpty && outcome.conflicts.flatMap(\.conflicts).allSatisfy { $0.outcome == .clientWon })
    }

    @Test func manualAsksTheResolverAndPushesItsResolution() async throws {
        let outcome = try await run(.manual, resolution: .use(["qty": 5, "note": "settled by hand"]))
        #expect(outcome.resolverCalls.count == 1)
        let call = try #require(outcome.resolverCalls.first)
        #expect(call.local == ["qty": 3, "items": ["bread"]])
        #expect(call.server == ["qty": 2, "items": ["eggs", "milk"]])
        #expect(Set(call.conflicts.map(\.path.dotted)) == ["items", "qty"] && call.conflicts.allSatisfy { $0.outcome == .unresolved })
        #expect(outcome.cart == ["qty": 5, "note": "settled by hand"])
    }

    @Test func eachCollectionSettlesItsConflictsByItsOwnStrategyInOneBatch() async throws {
        let live = try LiveSyncServer(rules: RuleBook(fallback: PresetRules.anyAuthenticatedUser))
        func device(_ user: String) throws -> Device {
            try Device(live, user: user, folder: folder, name: user) {
                $0.conflictStrategy(.serverWins).conflictStrategy(.clientWins, for: "notes")
            }
        }
        let ana = try device("ana")
        let ben = try device("ben")
        try await ana.carts.document("c1").setData(["qty": 1])
        try await ana.sync.collection("notes").document("n1").setData(["text": "draft"])
        await ben.sync.syncNow()
        await ana.sync.disconnect()
        await ben.sync.disconnect()
        try await ana.carts.document("c1").updateData(["qty": 2])
        try await ana.sync.collection("notes").document("n1").updateData(["text": "ana's"])
        try await ben.carts.document("c1").updateData(["qty": 3])
        try await ben.sync.collection("notes").document("n1").updateData(["text": "ben's"])
        await ana.sync.reconnect()
        #expect(await eventually { await ana.sync.pendingCount == 0 })
        await ben.sync.reconnect()
        #expect(await eventually { await ben.sync.pendingCount == 0 })
        #expect(ben.transport.pushCount == 1, "one batch held both collections")
        #expect(try await ben.carts.document("c1").getDocument(source: .server).data == ["qty": 2]) // serverWins
        #expect(try await ben.sync.collection("notes").document("n1").getDocument(source: .server).data == ["text": "ben's"]) // clientWins
        await live.stop()
    }

    @Test func theManualStrategyWithoutAResolverIsAConfigurationError() {
        #expect(throws: AbrovaSyncError.self) { try AbrovaSyncConfigBuilder(apiKey: "k").conflictStrategy(.manual).build() }
        #expect(throws: AbrovaSyncError.self) {
            try AbrovaSyncConfigBuilder(apiKey: "k").conflictStrategy(.manual, for: "orders").build()
        }
    }
}

/// A manual resolver that waits for the user holds back only its own document.
@Suite struct WaitingResolverTests {
    let folder = TemporaryFolder()

    /// Ana makes cart c1 with qty 1 and ben's device syncs it; ben goes offline; ana sets qty 2, ben
    /// qty 3; ben reconnects, and his resolver is asked.
    func makeConflictOverQuantity(ana: Device, ben: Device) async throws {
        try await ana.carts.document("c1").setData(["qty": 1])
        await ben.sync.syncNow()
        await ben.sync.disconnect()
        try await ana.carts.document("c1").updateData(["qty": 2])
        try await ben.carts.document("c1").updateData(["qty": 3])
        await ben.sync.reconnect()
    }

    @Test func aResolverWaitingForTheUserHoldsBackNoOtherWrite() async throws {
        let live = try LiveSyncServer(rules: RuleBook(fallback: PresetRules.anyAuthenticatedUser))
        let userChose = Locked(false)
        let asked = Locked(false)
        let resolverGaveUp = Locked(false)
        let ana = try Device(live, folder: folder, name: "ana")
        let ben = try Device(live, user: "ben", folder: folder, name: "ben") { builder in
            builder.conflictStrategy(.manual).conflictResolver { _ in
                asked.update { $0 = true }
                // The user takes their time (at most 10 s, so a blocked write cannot hang the test).
                if !(await eventually(10) { userChose.value }) { resolverGaveUp.update { $0 = true } }
                return .useLocal
            }
        }
        try await makeConflictOverQuantity(ana: ana, ben: ben)
        #expect(await eventually { asked.value }, "the resolver was never asked")
        // Ben's write is not on the server until the resolution is: it counts as pending, so that
        // an app waiting for nothing pending does not stop before the resolution is sent.
        #expect(await ben.sync.pendingCount == 1)
        // While the resolver waits, an unrelated online write goes through at once; a write of the
        // document in conflict waits for the resolution, and stays on top of it.
        let snapshot = try await ben.carts.document("other").setData(["n": 1])
        let held = try await ben.carts.document("c1").updateData(["note": "while deciding"])
        let wroteBeforeTheUserChose = !resolverGaveUp.value
        #expect(held.metadata.hasPendingWrites)
        userChose.update { $0 = true }
        #expect(wroteBeforeTheUserChose, "the online write waited for the resolver")
        #expect(!snapshot.metadata.hasPendingWrites)
        #expect(
            await eventually {
                (try? live.service.document(DocumentKey(collection: "carts", id: "c1"), caller: .user("ana")).state.document)
                    == ["qty": 3, "note": "while deciding"]
            }, "the resolution and the write after it were not sent")
        #expect(try await ben.carts.document("c1").getDocument(source: .cache).data == ["qty": 3, "note": "while deciding"])
        await live.stop()
    }

    /// A resolution is made from the server's document the resolver was shown. Should a newer one
    /// arrive while it decides, the resolution is not written over it (the newer change would be
    /// lost without anyone having seen it): the resolver is asked again, with the newer document.
    @Test func aResolutionMadeFromAnOlderServerDocumentIsAskedForAgainNotWrittenOverTheNewerOne() async throws {
        let live = try LiveSyncServer(rules: RuleBook(fallback: PresetRules.anyAuthenticatedUser))
        let userChose = Locked(false)
        let shown = Locked<[[String: Value]?]>([])
        let ana = try Device(live, folder: folder, name: "ana")
        let ben = try Device(live, user: "ben", folder: folder, name: "ben") { builder in
            builder.conflictStrategy(.manual).conflictResolver { info in
                shown.update { $0.append(info.server) }
                if shown.value.count == 1 { _ = await eventually(10) { userChose.value } }
                // The server's document, with ben's quantity.
                var merged = info.server ?? [:]
                merged["qty"] = info.local?["qty"]
                return .use(merged)
            }
        }
        try await makeConflictOverQuantity(ana: ana, ben: ben)
        #expect(await eventually { shown.value.count == 1 }, "the resolver was never asked")
        // While ben's user decides, ana adds a field, and ben's device pulls it.
        try await ana.carts.document("c1").updateData(["coupon": "ana's"])
        await ben.sync.syncNow()
        let benSees = try await ben.carts.document("c1").getDocument(source: .cache).data
        #expect(benSees?.mapValue?["coupon"] == "ana's")
        userChose.update { $0 = true }
        let key = DocumentKey(collection: "carts", id: "c1")
        #expect(
            await eventually {
                (try? live.service.document(key, caller: .user("ana")).state.document) == ["qty": 3, "coupon": "ana's"]
            }, "ana's later coupon was lost under a resolution made without it")
        #expect(shown.value == [["qty": 2], ["qty": 2, "coupon": "ana's"]])
        #expect(
            await eventually {
                let kept = (try? await ben.sync.store.unresolvedConflicts()) ?? []
                let pending = await ben.sync.pendingCount
                return kept.isEmpty && pending == 0
            })
        await live.stop()
    }
}
