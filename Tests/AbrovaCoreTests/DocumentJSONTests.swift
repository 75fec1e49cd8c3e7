import Testing

@testable import AbrovaCore

@Suite struct DocumentJSONTests {
    /// Nested documents are written from their fields in canonical order: a name that is a prefix
    /// of another (`a`, `ab`) and names with bytes below the separator (`a-c`, `a c`) sort as
    /// canonical JSON sorts keys at each level. (The property test above compares random states.)
    @Test func aNestedDocumentIsWrittenInCanonicalOrderWithoutAValueTree() throws {
        var state = DocumentState()
        state.applyLocally(try DocumentDelta.create(["b": 1], base: .zero), at: Version(1))
        let paths = ["a.x", "ab", "a-c", "a.y.z", "a.y.w", "c.d", "a c"]
        let assignments = Dictionary(uniqueKeysWithValues: try paths.enumerated().map { (try FieldPath($1), Value.int(Int64($0))) })
        state.applyLocally(try DocumentDelta.update(set: assignments, base: Version(1)), at: Version(2))
        state.applyLocally(try DocumentDelta.update(setAdd: [try FieldPath("s.t"): ["milk", "eggs"]], base: Version(2)), at: Version(3))
        let written = try #require(state.nestedDocumentJSON())
        #expect(String(decoding: written, as: UTF8.self) == state.document?.canonicalJSON)
        #expect(
            state.documentJSON == #"{"a":{"x":0,"y":{"w":4,"z":3}},"a c":6,"a-c":2,"ab":1,"b":1,"c":{"d":5},"s":{"t":["eggs","milk"]}}"#)
    }

    /// A name that is not ASCII is left to the `Value` tree, which makes canonically equivalent
    /// names one key.
    @Test func aNameThatIsNotASCIIIsLeftToTheValueTree() throws {
        var state = DocumentState()
        state.applyLocally(try DocumentDelta.create(["b": 1], base: .zero), at: Version(1))
        state.applyLocally(try DocumentDelta.update(set: [try FieldPath("caf\u{E9}.x"): 1], base: Version(1)), at: Version(2))
        #expect(state.nestedDocumentJSON() == nil)
        #expect(state.documentJSON == state.document?.canonicalJSON)
    }
}

@Suite struct StoredVersionsTests {
    /// A document written at once has one version throughout: its stored versions say it once,
    /// and a field written later is the only one listed.
    @Test func registersAtTheCommonVersionAreNotListed() throws {
        var state = DocumentState()
        state.applyLocally(
            try DocumentDelta.create(["title": "milk", "qty": 2, "tags": [], "box": .map([:])], base: .zero), at: Version(7))
        var bytes: [UInt8] = []
        state.writeVersions(to: &bytes)
        #expect(String(decoding: bytes, as: UTF8.self) == #"{"d":7,"e":[1,7]}"#)
        state.applyLocally(
            try DocumentDelta.update(
                set: [try FieldPath("qty"): 3], remove: [try FieldPath("box")], setAdd: [try FieldPath("s"): ["a"]], base: Version(7)),
            at: Version(9))
        bytes = []
        state.writeVersions(to: &bytes)
        #expect(String(decoding: bytes, as: UTF8.self) == #"{"d":7,"e":[1,7],"r":{"qty":9},"s":{"s":{"s":[["a",9]],"v":9}},"t":{"box":9}}"#)
        let read = try DocumentState(versions: try Value(json: bytes), view: state.document)
        #expect(read == state)
    }

    /// Shapes the random edits do not make: empty maps and nulls as values, nested and empty sets,
    /// a field removed under a live one, a document whose only field is a set. Each reads back whole.
    @Test func unusualShapesReadBackWhole() throws {
        func path(_ dotted: String) throws -> FieldPath { try FieldPath(dotted) }
        var edits: [[DocumentDelta]] = []
        edits.append([
            try DocumentDelta.create(["x": .null, "box": .map([:]), "list": []], base: .zero),
            try DocumentDelta.update(set: [try path("a.b"): .map([:]), try path("a.c"): 1, try path("y.z"): .null], base: Version(1)),
        ])
        edits.append([
            try DocumentDelta.create(["n": 1], base: .zero),
            try DocumentDelta.update(setAdd: [try path("s.t"): ["milk", "eggs"], try path("e.f"): ["x"]], base: Version(1)),
            try DocumentDelta.update(setRemove: [try path("e.f"): ["x"]], base: Version(2)),
        ])
        edits.append([
            try DocumentDelta.create(["n": 1], base: .zero),
            try DocumentDelta.update(set: [try path("a.b"): 1, try path("a.c"): 2], base: Version(1)),
            try DocumentDelta.update(set: [try path("a"): 3], base: Version(2)),
        ])
        edits.append([
            try DocumentDelta.create([:], base: .zero),
            try DocumentDelta.update(setAdd: [try path("items"): ["milk"]], base: Version(1)),
        ])
        for deltas in edits {
            var state = DocumentState()
            for (index, delta) in deltas.enumerated() { state.applyLocally(delta, at: Version(UInt64(index + 1))) }
            let (versions, view) = state.storedForms
            let read = try DocumentState(versions: try Value(json: versions), view: try view.map { try Value(json: $0) })
            #expect(read == state, "\(String(decoding: versions, as: UTF8.self)) beside \(view ?? "nil")")
        }
    }

    /// Stores written before the default version list every live register, and read as before.
    @Test func versionsListedOneByOneStillRead() throws {
        var state = DocumentState()
        state.applyLocally(try DocumentDelta.create(["title": "milk", "qty": 2], base: .zero), at: Version(7))
        state.applyLocally(try DocumentDelta.update(set: [try FieldPath("qty"): 3], base: Version(7)), at: Version(9))
        let listed = try Value(json: #"{"e":[1,7],"r":{"qty":9,"title":7},"s":{},"t":{}}"#)
        #expect(try DocumentState(versions: listed, view: state.document) == state)
    }
}
