import AbrovaTestSupport
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

@Suite struct RenderedFieldsTests {
    /// Local edits, mostly of top-level fields (so that most steps follow the rendering rather
    /// than render again), some nested, some creating or deleting the document: wherever the
    /// rendering follows a change, it writes what `documentJSON` writes.
    @Test func aRenderingFollowedThroughEditsWritesTheDocumentJSON() async {
        let topLevel: [FieldPath] = ["a", "b", "c", "s", "t"].map { try! FieldPath($0) }
        var followedSteps = 0
        let failure = await Property.check(
            "rendered fields follow edits",
            generate: { choices in
                var state = DocumentState()
                var operations: [Operation] = []
                for _ in 0..<choices.int(in: 1...8) {
                    var operation = Generate.operation(&choices, view: state, afterPending: !operations.isEmpty)
                    if case .update(let set, let remove, let add, let removeElements) = operation, !choices.chance(oneIn: 4) {
                        // Mostly top-level paths with leaf values: what the rendering follows.
                        func flat<V>(_ entries: [FieldPath: V]) -> [FieldPath: V] {
                            Dictionary(
                                entries.map { (topLevel[Int($0.key.dotted.utf8.first ?? 0) % 3], $0.value) },
                                uniquingKeysWith: { first, _ in first })
                        }
                        operation = .update(
                            set: flat(set).mapValues { if case .map = $0 { .int(1) } else { $0 } },
                            remove: remove.filter { topLevel.contains($0) },
                            add: add.filter { topLevel.contains($0.key) },
                            removeElements: removeElements.filter { topLevel.contains($0.key) })
                    }
                    state.applyLocally(operation.delta(base: state.version), at: state.version.next)
                    operations.append(operation)
                }
                return operations
            },
            property: { operations in
                var state = DocumentState()
                var rendered: RenderedFields?
                for operation in operations {
                    let delta = operation.delta(base: state.version)
                    state.applyLocally(delta, at: state.version.next)
                    if var followed = rendered, followed.update(after: delta, in: state) {
                        followedSteps += 1
                        if followed.json != state.documentJSON {
                            return "after \(operation): \(followed.json), documentJSON \(state.documentJSON ?? "nil")"
                        }
                        rendered = followed
                    } else {
                        rendered = RenderedFields(state)
                        if let rendered, rendered.json != state.documentJSON {
                            return "rendered anew: \(rendered.json), documentJSON \(state.documentJSON ?? "nil")"
                        }
                    }
                }
                return nil
            })
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
        #expect(followedSteps >= Property.plannedCases() / 2, "the rendering followed only \(followedSteps) edits")
    }

    /// A state with a nested path, or one deleted, is rendered whole each time.
    @Test func nestedOrDeletedDocumentsAreNotFollowed() throws {
        var state = DocumentState()
        state.applyLocally(try DocumentDelta.create(["b": 1], base: .zero), at: Version(1))
        var rendered = try #require(RenderedFields(state))
        let renderedBeforeDelete = rendered
        let nested = try DocumentDelta.update(set: [try FieldPath("a.x"): 2], base: Version(1))
        let nestedState = state.applyingLocally(nested, at: Version(2))
        let followedNested = rendered.update(after: nested, in: nestedState)
        #expect(!followedNested)
        #expect(RenderedFields(nestedState) == nil)
        rendered = renderedBeforeDelete
        let delete = DocumentDelta.delete(base: Version(1))
        let followedDelete = rendered.update(after: delete, in: state.applyingLocally(delete, at: Version(2)))
        #expect(!followedDelete)
    }
}

@Suite struct PulledStateTests {
    /// A state read as a page brings it is the state its compact form holds, with the stored forms
    /// the state writes: for random server histories, for flat documents of top-level values (the
    /// shape read with its forms written on the way), and for the same bytes mutated, which it
    /// refuses exactly when the state reader does.
    @Test func aPulledStateIsTheStateWithItsStoredForms() async {
        var flatCases = 0
        var mutatedAccepted = 0
        let failure = await Property.check(
            "pulled states",
            generate: { choices -> (state: DocumentState, mutated: [UInt8]) in
                var state: DocumentState
                if choices.chance(oneIn: 2) {
                    state = Generate.history(&choices).final
                } else {
                    state = DocumentState()
                    for step in 0..<choices.int(in: 1...3) {
                        var data: [String: Value] = [:]
                        for _ in 0..<choices.below(5) { data[choices.element(of: ["a", "b", "c", "é", "a-b"])] = Generate.value(&choices) }
                        let assignments = Dictionary(uniqueKeysWithValues: data.map { (try! FieldPath($0.key), $0.value) })
                        let delta: DocumentDelta =
                            step == 0 || choices.chance(oneIn: 2)
                            ? ((try? .create(data, base: state.version)) ?? DocumentDelta())
                            : ((try? .update(set: assignments, base: state.version)) ?? DocumentDelta())
                        state.applyLocally(delta, at: Version(UInt64(choices.int(in: 1...4))))
                    }
                }
                return (state, JSONMutation.mutated(state.encodedBytes, &choices))
            },
            property: { input in
                func read(_ bytes: [UInt8]) -> (pulled: PulledState?, state: DocumentState?) {
                    var reader = JSONReader(bytes: bytes, maximumDepth: ValueLimits.maximumEncodedDepth)
                    var other = reader
                    let pulled = PulledState.read(from: &reader)
                    let state = DocumentState.readEncoded(from: &other)
                    let pulledEnds = pulled != nil && (try? reader.finish()) != nil
                    let stateEnds = state != nil && (try? other.finish()) != nil
                    return (pulledEnds ? pulled : nil, stateEnds ? state : nil)
                }
                let (pulled, state) = read(input.state.encodedBytes)
                guard let pulled, state == input.state else { return "not read back" }
                if pulled.state != input.state { return "read as \(pulled.state.shownContent)" }
                if pulled.isFlat { flatCases += 1 }
                let forms = pulled.storedForms
                let expected = input.state.storedForms
                if forms.versions != expected.versions || forms.view != expected.view {
                    return "stored forms \(String(decoding: forms.versions, as: UTF8.self)) \(forms.view ?? "nil"), "
                        + "expected \(String(decoding: expected.versions, as: UTF8.self)) \(expected.view ?? "nil")"
                }
                let mutated = read(input.mutated)
                switch (mutated.pulled, mutated.state) {
                case (nil, nil): return nil
                case (let pulled?, let state?):
                    if pulled.isFlat { mutatedAccepted += 1 }
                    if pulled.state != state { return "a mutated form read as another state" }
                    let forms = pulled.storedForms
                    let expected = state.storedForms
                    return forms.versions == expected.versions && forms.view == expected.view ? nil : "a mutated form's stored forms differ"
                default:
                    return "the mutated bytes were read by one reader and not the other: \(String(decoding: input.mutated, as: UTF8.self))"
                }
            })
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
        #expect(flatCases >= Property.plannedCases() * 3 / 20, "only \(flatCases) flat states")
        #expect(mutatedAccepted > 0 || Property.plannedCases() < 1_000, "no mutated form was read flat")
    }
}
