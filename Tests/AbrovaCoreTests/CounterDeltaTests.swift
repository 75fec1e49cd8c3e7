import AbrovaCore
import Testing

/// Counters in the core: the arithmetic, what composes, how the two readers take the part, and
/// the rebase past an own increment that met others' writes. (The join's cases are fixtures:
/// Fixtures/conflicts/counters.json.)
@Suite struct CounterDeltaTests {
    let milk = try! FieldPath("qty.milk")

    @Test(arguments: [
        (Value?.none, Value.int(2), Value.int(2)),
        (.int(1), .int(2), .int(3)),
        (.int(.max - 1), .int(5), .int(.max)),
        (.int(.min + 1), .int(-5), .int(.min)),
        (.int(1), .double(0.5), .double(1.5)),
        (.double(1.5), .int(1), .double(2.5)),
        (.double(.greatestFiniteMagnitude), .double(.greatestFiniteMagnitude), .double(.greatestFiniteMagnitude)),
        (.string("bags"), .int(2), .int(2)),
        (.bool(true), .double(0.25), .double(0.25)),
    ])
    func addingIsACountersArithmetic(current: Value?, amount: Value, sum: Value) {
        #expect(Value.adding(amount, to: current) == sum)
    }

    @Test func incrementsComposeAndAnOverwriteOfACounterDoesNot() throws {
        let base = Version(3)
        let plus2 = try DocumentDelta.update(increments: [milk: 2], base: base)
        let plus3 = try DocumentDelta.update(increments: [milk: 3], base: base)
        #expect(plus2.canCompose(with: plus3))
        #expect(DocumentDelta.compose(plus2, plus3).increments[milk]?.amount == .int(5))
        let note = try DocumentDelta.update(set: [try FieldPath("note"): "x"], base: base)
        #expect(plus2.canCompose(with: note))
        // What would take the increment with it starts a change of its own.
        for overwrite in [
            try DocumentDelta.update(set: [milk: 0], base: base),
            try DocumentDelta.update(set: [try FieldPath("qty"): ["eggs": 1]], base: base),
            try DocumentDelta.update(remove: [try FieldPath("qty")], base: base),
            try DocumentDelta.update(setAdd: [milk: ["x"]], base: base),
            try DocumentDelta.create([:], base: base),
            try DocumentDelta.setMerging(["a": 1], base: base, documentExists: false),
            DocumentDelta.delete(base: base),
        ] {
            #expect(!plus2.canCompose(with: overwrite), "\(overwrite.encoded)")
        }
        // Integers that would leave Int64's range stay apart.
        let big = try DocumentDelta.update(increments: [milk: .int(.max)], base: base)
        #expect(!big.canCompose(with: plus2))
        // An assignment then an increment of one path: the increment adds to what it assigns.
        let assigned = try DocumentDelta.update(set: [milk: 10], base: base)
        let both = DocumentDelta.compose(assigned, plus2)
        #expect(both.assignments[milk]?.value == .int(10) && both.increments[milk]?.amount == .int(2))
        var state = try DocumentState().applyingLocally(DocumentDelta.create(["qty": ["milk": 1]], base: .zero), at: Version(1))
        state.applyLocally(both, at: Version(2))
        #expect(state.document == ["qty": ["milk": 12]])
    }

    @Test func bothReadersTakeThePartAndRefuseWhatIsNotOne() throws {
        let delta = try DocumentDelta.update(
            set: [milk: 1], increments: [milk: .int(2), try FieldPath("total"): .double(0.5)], base: Version(4))
        #expect(try DocumentDelta(encoded: delta.encoded) == delta)
        var bytes: [UInt8] = []
        delta.writeEncoded(to: &bytes)
        #expect(
            String(decoding: bytes, as: UTF8.self) == #"{"assignments":{"qty.milk":[1,4]},"increments":{"qty.milk":[2,4],"total":[0.5,4]}}"#
        )
        #expect(try DocumentDelta(encoded: Value(json: bytes)) == delta)

        for (text, detail) in [
            (#"{"increments":{"n":["1",1]}}"#, "an increment adds an integer or a double"),
            (#"{"increments":{"n":[1]}}"#, "an increment is not [amount, base]"),
            (#"{"increments":{"n":[1,1]},"setChanges":{"n":{"add":[1],"base":1}}}"#, "a change writes each place once"),
            (#"{"increments":{"a":[1,1],"a.b":[1,1]}}"#, "a change writes each place once"),
        ] {
            #expect(throws: ValueError.self, "\(text)") { try DocumentDelta(encoded: Value(json: Array(text.utf8))) }
            do {
                _ = try DocumentDelta(encoded: Value(json: Array(text.utf8)))
            } catch {
                #expect(error.description.contains(detail), "\(text): \(error)")
            }
        }
    }

    /// Another client added 10 before this client's own increment (answered with the state): its
    /// later assignment of the counter did not see those 10 and still meets them as a conflict;
    /// without others' writes (answered without a state) it is the sequel of its own.
    @Test func anOwnIncrementOverOthersWritesHidesNothing() throws {
        let assignment = try DocumentDelta.update(set: [milk: 0], base: Version(1))
        var confirmed = try DocumentState().applyingLocally(DocumentDelta.create(["qty": ["milk": 1]], base: .zero), at: Version(1))
        confirmed.applyLocally(try DocumentDelta.update(increments: [milk: 12], base: Version(1)), at: Version(3))
        let increment = try DocumentDelta.update(increments: [milk: 2], base: Version(1))

        var contested = OwnWrites()
        contested.note(.applied(version: Version(3), state: confirmed, conflicts: []), of: increment)
        #expect(assignment.rebased(onto: confirmed, past: contested).assignments[milk]?.base == Version(1))

        var alone = OwnWrites()
        alone.note(.applied(version: Version(3), state: nil, conflicts: []), of: increment)
        #expect(assignment.rebased(onto: confirmed, past: alone).assignments[milk]?.base == Version(3))
    }
}
