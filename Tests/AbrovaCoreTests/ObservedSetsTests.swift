import AbrovaCore
import Testing

@Suite struct ObservedSetsTests {
    let bag = try! FieldPath("bag")
    let inBag = try! FieldPath("bag.note")

    /// Joined concurrent writes can leave a set and a register within it both live. A set change
    /// then starts the set anew (its elements gone), so a remove of one of them takes nothing and
    /// is dropped: only the whole state tells, and the sets alone are not taken for it.
    @Test func aSetOverlappingAnotherLiveFieldIsLeftToTheWholeState() throws {
        let state = DocumentState(
            existence: Existence(exists: true, version: Version(3)),
            fields: [
                bag: .set(ObservedRemoveSet(elements: ["milk": Version(1)], version: Version(1))),
                inBag: .register(Register(value: "fragile", version: Version(2))),
            ])
        #expect(ObservedSets(state) == nil)
        let change = try DocumentDelta.update(setAdd: [bag: ["eggs"]], setRemove: [bag: ["milk"]], base: Version(3))
        let after = state.applyingLocally(change, at: Version(4))
        guard case .set(let set)? = after[bag] else {
            Issue.record("the change leaves no set")
            return
        }
        #expect(Set(set.elements.keys) == ["eggs"])
        // Pruned against the state after the change, a later remove of milk takes nothing.
        let later = try DocumentDelta.update(setRemove: [bag: ["milk"]], base: Version(3))
        #expect(later.droppingUnobservedRemoves(confirmed: after).isEmpty)
    }

    @Test func setsWithNothingOverlappingThemAreTaken() throws {
        let state = DocumentState(
            existence: Existence(exists: true, version: Version(2)),
            fields: [
                bag: .set(ObservedRemoveSet(elements: ["milk": Version(1)], version: Version(1))),
                try FieldPath("note"): .register(Register(value: "fragile", version: Version(2))),
            ])
        var sets = try #require(ObservedSets(state))
        #expect(sets.sets == [bag: ["milk"]])
        sets.apply(try DocumentDelta.update(set: [inBag: "fragile"], base: Version(2)))
        #expect(sets.sets.isEmpty) // a field written within the set replaces it
    }
}
