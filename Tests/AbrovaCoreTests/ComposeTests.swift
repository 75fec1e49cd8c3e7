import AbrovaCore
import AbrovaTestSupport
import Testing

@Suite struct ComposeTests {
    let qty = try! FieldPath("qty")
    let items = try! FieldPath("items")

    func cart(items elements: [Value] = ["milk"]) throws -> DocumentState {
        var state = DocumentState()
        state = try ConflictStrategy.serverWins.apply(
            try DocumentDelta.create(["qty": 1], base: .zero), to: state,
            version: Version(1)
        ).state
        let add = try DocumentDelta.update(setAdd: [items: elements], base: state.version)
        return try ConflictStrategy.serverWins.apply(add, to: state, version: Version(2)).state
    }

    @Test func tenEditsOfOneFieldComposeIntoOne() throws {
        var pending = DocumentDelta()
        for edit in 1...10 {
            pending.compose(with: try DocumentDelta.update(set: [qty: .int(Int64(edit))], base: Version(7)))
        }
        #expect(pending.assignments == [qty: .init(value: 10, base: Version(7))])
        #expect(pending.removals.isEmpty && pending.fieldRemovals.isEmpty && pending.setChanges.isEmpty)
    }

    @Test func theEarliestBaseIsKeptSoAPullBetweenEditsHidesNoConflict() throws {
        var pending = try DocumentDelta.update(set: [qty: 2], base: Version(2))
        pending.compose(with: try DocumentDelta.update(set: [qty: 3], base: Version(5)))
        #expect(pending.assignments[qty]?.base == Version(2))

        // The server changed qty at 3; the device pulled version 5 and edited again.
        var server = try cart()
        server = try ConflictStrategy.serverWins.apply(
            try DocumentDelta.update(set: [qty: 9], base: Version(2)),
            to: server, version: Version(3)
        ).state
        let result = try ConflictStrategy.serverWins.apply(pending, to: server, version: Version(6))
        #expect(result.conflicts.map(\.path) == [qty])
        #expect(result.state.document?.mapValue?["qty"] == 9)
    }

    @Test func anAddAndARemoveOfTheSameElementBeforeSyncCancelOut() throws {
        let confirmed = try cart()
        var pending = try DocumentDelta.update(setAdd: [items: ["eggs"]], base: confirmed.version)
        pending.compose(with: try DocumentDelta.update(setRemove: [items: ["eggs"]], base: confirmed.version))
        #expect(pending.droppingUnobservedRemoves(confirmed: confirmed).isEmpty)

        // A remove of an element the device had seen is kept.
        var seen = try DocumentDelta.update(setAdd: [items: ["milk"]], base: confirmed.version)
        seen.compose(with: try DocumentDelta.update(setRemove: [items: ["milk"]], base: confirmed.version))
        #expect(seen.droppingUnobservedRemoves(confirmed: confirmed).setChanges[items]?.removes == ["milk"])
    }

    @Test func aRemovalOfAWriteKeepsTheLeafItReplaced() throws {
        // a is a leaf; writing a.x.z replaces it; removing a.x takes the write away, not the replacement.
        let a = try FieldPath("a")
        var state = DocumentState()
        state.applyLocally(try DocumentDelta.create(["a": 0], base: .zero), at: Version(1))
        var pending = try DocumentDelta.update(set: [try FieldPath("a.x.z"): 0], base: Version(1))
        pending.compose(with: try DocumentDelta.update(remove: [try FieldPath("a.x")], base: Version(1)))
        #expect(pending.fieldRemovals[a] == Version(1))
        #expect(state.applyingLocally(pending, at: Version(2)).document == [:])
    }

    @Test func overlappingPathsOfOneUpdateApplyInPathOrder() throws {
        // Equal dictionaries kept side by side hold their keys in different orders (a table's hash
        // seed comes from its address): a first, then a.y over it, whatever the order.
        let sets: [[FieldPath: Value]] = try (0..<20).map { _ in [try FieldPath("a.y"): 2, try FieldPath("a"): ["x": 1]] }
        let adds: [[FieldPath: [Value]]] = try (0..<20).map { _ in [try FieldPath("b.s"): [1], try FieldPath("b"): [2]] }
        for (set, add) in zip(sets, adds) {
            let delta = try DocumentDelta.update(set: set, setAdd: add, base: .zero)
            var state = DocumentState()
            state.applyLocally(try DocumentDelta.create([:], base: .zero), at: Version(1))
            state.applyLocally(delta, at: Version(2))
            #expect(state.document == ["a": ["x": 1, "y": 2], "b": ["s": [1]]])
        }
    }

    @Test func aLaterChangesPathsComposeInPathOrder() throws {
        // a.b, taken first, keeps the base of the a.b.c it takes away, and passes it on to a.b.d.
        let later = try (0..<20).map { _ in
            try DocumentDelta.update(remove: [try FieldPath("a.b.d"), try FieldPath("a.b")], base: Version(5))
        }
        for later in later {
            var pending = try DocumentDelta.update(set: [try FieldPath("a.b.c"): 0], base: Version(1))
            pending.compose(with: later)
            #expect(pending.removals[try FieldPath("a.b.d")] == Version(1))
        }
    }
}

@Suite struct HarnessTests {
    @Test func aFailureIsShrunkToTheSmallestCaseAndNamesItsSeed() async {
        let failure = await Property.check(
            "no element reaches 10", cases: 200,
            generate: { choices in
                (0..<choices.int(in: 0...20)).map { _ in choices.below(100) }
            },
            property: { list in
                list.contains { $0 >= 10 } ? "found \(list.filter { $0 >= 10 })" : nil
            })
        #expect(failure?.smallestCase == "[10]")
        #expect(failure?.description.contains("ABROVA_PROPERTY_SEED=\(failure?.seed ?? 0)") == true)
    }

    @Test func theSameSeedGivesTheSameCaseAndADrawRecordingReplaysIt() async {
        var first = Choices(seed: 42)
        var second = Choices(seed: 42)
        let values = (0..<50).map { _ in first.below(1000) }
        #expect(values == (0..<50).map { _ in second.below(1000) })
        var replay = Choices(replaying: first.draws)
        #expect((0..<50).map { _ in replay.below(1000) } == values)
    }
}

@Suite struct RebaseTests {
    let qty = try! FieldPath("qty")
    let note = try! FieldPath("note")

    @Test func aPartNobodyElseTouchedTakesTheClientsOwnVersionAndOneTheyTouchedKeepsItsBase() throws {
        // The server state after this client's own write at 7; someone else changed note at 6.
        var confirmed = DocumentState()
        confirmed.applyLocally(try DocumentDelta.create(["qty": 1, "note": "a"], base: .zero), at: Version(3))
        confirmed.applyLocally(try DocumentDelta.update(set: [note: "b"], base: Version(3)), at: Version(6))
        confirmed.applyLocally(try DocumentDelta.update(set: [qty: 2], base: Version(3)), at: Version(7))
        // A change made before the answer came, based on version 3.
        let pending = try DocumentDelta.update(set: [qty: 5, note: "c"], base: Version(3))
        let rebased = pending.rebased(onto: confirmed, ownVersions: [Version(7)])
        #expect(rebased.assignments[qty]?.base == Version(7))
        #expect(rebased.assignments[note]?.base == Version(3))
        // So the client's own write is no conflict, and the other client's still is.
        let report = try ConflictStrategy.serverWins.apply(rebased, to: confirmed, version: Version(8))
        #expect(report.conflicts.map(\.path) == [note])
        #expect(report.state.document == ["qty": 5, "note": "b"])
    }

    @Test func anotherClientsWriteNearThePathBeforeTheClientsOwnWriteOfItKeepsNoBase() throws {
        // Made with an empty map qty at 1; another client set qty.a at 2 (which removed the map's
        // register qty), then this client set qty.b at 3, after that write.
        let qtyA = try FieldPath("qty.a")
        let qtyB = try FieldPath("qty.b")
        var confirmed = DocumentState()
        confirmed.applyLocally(try DocumentDelta.create(["qty": .map([:])], base: .zero), at: Version(1))
        confirmed.applyLocally(try DocumentDelta.update(set: [qtyA: 0], base: Version(1)), at: Version(2))
        confirmed.applyLocally(try DocumentDelta.update(set: [qtyB: 0], base: Version(1)), at: Version(3))
        // The client's next edit of qty.b, made before the answer came.
        let pending = try DocumentDelta.update(set: [qtyB: 4], base: Version(1))
        let rebased = pending.rebased(onto: confirmed, ownVersions: [Version(3)])
        #expect(rebased.assignments[qtyB]?.base == Version(3))
        let report = try ConflictStrategy.serverWins.apply(rebased, to: confirmed, version: Version(4))
        #expect(report.conflicts.isEmpty)
        #expect(report.state.document == ["qty": ["a": 0, "b": 4]])
        // Another client's write of the path after the client's own still keeps the base.
        confirmed.applyLocally(try DocumentDelta.update(set: [qtyB: 7], base: Version(3)), at: Version(4))
        confirmed.applyLocally(try DocumentDelta.update(set: [qtyA: 1], base: Version(4)), at: Version(5))
        #expect(pending.rebased(onto: confirmed, ownVersions: [Version(3), Version(5)]).assignments[qtyB]?.base == Version(1))
    }

    @Test func severalOwnWritesInOneBatchAreAllTheClients() throws {
        // The client wrote qty at 5 and note at 7 (two changes of one document in one batch).
        var confirmed = DocumentState()
        confirmed.applyLocally(try DocumentDelta.create(["qty": 1, "note": "a"], base: .zero), at: Version(3))
        confirmed.applyLocally(try DocumentDelta.update(set: [qty: 2], base: Version(3)), at: Version(5))
        confirmed.applyLocally(try DocumentDelta.update(set: [note: "b"], base: Version(3)), at: Version(7))
        let pending = try DocumentDelta.update(set: [qty: 9], base: Version(3))
        #expect(pending.rebased(onto: confirmed, ownVersions: [Version(7)]).assignments[qty]?.base == Version(3))
        #expect(pending.rebased(onto: confirmed, ownVersions: [Version(5), Version(7)]).assignments[qty]?.base == Version(7))
    }
}
