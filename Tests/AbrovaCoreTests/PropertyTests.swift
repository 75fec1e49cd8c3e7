import AbrovaCore
import AbrovaTestSupport
import Testing

/// The properties of issue 2, each over `Property.defaultCases` seeded random cases. A failure
/// prints its seed and the smallest failing case; replay with ABROVA_PROPERTY_SEED.
@Suite struct PropertyTests {
    func expectNoFailure(_ failure: Property.Failure?) {
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
    }

    // MARK: The state join

    struct ThreeStates: CustomStringConvertible {
        var states: [DocumentState]
        var origin: String
        var description: String { "\(origin); states: " + states.map(\.shownContent).joined(separator: " / ") }
    }

    /// Snapshots and delta-states of one history, or of unrelated histories (equal versions with
    /// different contents then occur, which the tie-break must order).
    static func threeStates(_ choices: inout Choices) -> ThreeStates {
        let histories = (0..<choices.int(in: 1...2)).map { _ in Generate.history(&choices) }
        var states: [DocumentState] = []
        for _ in 0..<3 {
            let history = choices.element(of: histories)
            if choices.below(2) == 0 || history.changes.isEmpty {
                states.append(choices.element(of: history.states))
            } else {
                states.append(choices.element(of: history.changes))
            }
        }
        return ThreeStates(states: states, origin: histories.map(\.description).joined(separator: " and "))
    }

    @Test func joinIsCommutativeAssociativeAndIdempotent() async {
        expectNoFailure(
            await Property.check("join is a semilattice", generate: Self.threeStates) { input in
                let (a, b, c) = (input.states[0], input.states[1], input.states[2])
                if a.merging(b) != b.merging(a) { return "a ⊔ b != b ⊔ a" }
                if a.merging(b).merging(c) != a.merging(b.merging(c)) { return "(a ⊔ b) ⊔ c != a ⊔ (b ⊔ c)" }
                if a.merging(a) != a { return "a ⊔ a != a" }
                let violations = a.merging(b).invariantViolations()
                return violations.isEmpty ? nil : "invariants: \(violations)"
            })
    }

    // MARK: Convergence

    struct Deliveries: CustomStringConvertible {
        var history: History
        var replicas: [[DocumentState]]
        var description: String { "\(history); \(replicas.map(\.count)) deliveries per replica" }
    }

    @Test func replicasConvergeWhateverTheOrderAndDuplicates() async {
        expectNoFailure(
            await Property.check(
                "replicas converge",
                generate: { choices in
                    let history = Generate.history(&choices, steps: 1...8)
                    let replicas = (0..<3).map { _ in
                        var deliveries = history.changes
                        for _ in 0..<choices.below(4) where !history.changes.isEmpty {
                            deliveries.append(choices.element(of: history.changes)) // duplicates
                        }
                        if choices.chance(oneIn: 3) { deliveries.append(choices.element(of: history.states)) } // a full pull
                        return choices.shuffled(deliveries)
                    }
                    return Deliveries(history: history, replicas: replicas)
                }
            ) { input in
                for (index, deliveries) in input.replicas.enumerated() {
                    var replica = DocumentState()
                    for delivery in deliveries { replica.merge(delivery) }
                    if replica != input.history.final {
                        return "replica \(index) ended \(replica.shownContent), the server has \(input.history.final.shownContent)"
                    }
                    if !replica.invariantViolations().isEmpty { return "replica \(index): \(replica.invariantViolations())" }
                }
                return nil
            })
    }

    // MARK: Compose

    struct TwoEdits: CustomStringConvertible {
        var history: History
        var firstSnapshot: Int
        var secondSnapshot: Int
        var operations: [Operation]
        var first: DocumentDelta
        var second: DocumentDelta
        var description: String {
            "\(history); first edit on state \(firstSnapshot), second on state \(secondSnapshot): \(operations)"
        }
    }

    /// A device edits on one snapshot, pulls a newer one, and edits again.
    static func twoEdits(_ choices: inout Choices) -> TwoEdits {
        let history = Generate.history(&choices)
        let firstIndex = choices.below(history.states.count)
        let secondIndex = firstIndex + choices.below(history.states.count - firstIndex)
        let firstView = history.states[firstIndex]
        let firstOperation = Generate.operation(&choices, view: firstView)
        let first = firstOperation.delta(base: firstView.version)
        let secondConfirmed = history.states[secondIndex]
        let secondView = secondConfirmed.applyingLocally(first, at: secondConfirmed.version.next)
        let secondOperation = Generate.operation(&choices, view: secondView, afterPending: true)
        let second = secondOperation.delta(base: secondConfirmed.version)
        return TwoEdits(
            history: history, firstSnapshot: firstIndex, secondSnapshot: secondIndex,
            operations: [firstOperation, secondOperation], first: first, second: second)
    }

    @Test func composeEqualsApplyingInOrderOnTheDevice() async {
        expectNoFailure(
            await Property.check("compose on the device", generate: Self.twoEdits) { input in
                let start = input.history.states[input.secondSnapshot]
                let version = input.history.final.version.next
                let inOrder = start.applyingLocally(input.first, at: version).applyingLocally(input.second, at: version)
                let composed = DocumentDelta.compose(input.first, input.second)
                let once = start.applyingLocally(composed, at: version)
                if once.shownContent != inOrder.shownContent {
                    return "in order: \(inOrder.shownContent); composed: \(once.shownContent)"
                }
                let pruned = start.applyingLocally(composed.droppingUnobservedRemoves(confirmed: start), at: version)
                if pruned.shownContent != inOrder.shownContent {
                    return "after dropping unobserved removes: \(pruned.shownContent); in order: \(inOrder.shownContent)"
                }
                return nil
            })
    }

    /// A freeze follows a batch's documents by their sets alone (`ObservedSets`): after each change
    /// the sets are the whole state's, and pruning the next change against them gives what pruning
    /// against the whole state gives. A state where a set overlaps another live field is left to
    /// the whole state.
    @Test func observedSetsFollowTheWholeState() async {
        expectNoFailure(
            await Property.check("observed sets follow the state", generate: Self.twoEdits) { input in
                var state = input.history.states[input.secondSnapshot]
                guard var sets = ObservedSets(state) else {
                    let overlaps = Self.sets(of: state).keys.contains { set in
                        state.fields.contains { path, field in field.isLive && path != set && path.overlaps(set) }
                    }
                    return overlaps ? nil : "no set overlaps another field, yet the sets were not taken"
                }
                let version = input.history.final.version.next
                for delta in [input.first, input.second] {
                    let byState = delta.droppingUnobservedRemoves(confirmed: state)
                    let bySets = delta.droppingUnobservedRemoves(observed: sets)
                    if byState != bySets { return "pruned against the state: \(byState); against the sets: \(bySets)" }
                    state.applyLocally(byState, at: version)
                    sets.apply(byState)
                    if sets.sets != Self.sets(of: state) { return "sets \(sets.sets); the state's \(Self.sets(of: state))" }
                }
                return nil
            })
    }

    static func sets(of state: DocumentState) -> [FieldPath: Set<Value>] {
        state.fields.compactMapValues { field in
            guard case .set(let set) = field else { return nil }
            return Set(set.elements.keys)
        }
    }

    @Test func composeLosesNoConflictThatMatters() async {
        expectNoFailure(
            await Property.check("compose loses no conflict", generate: Self.twoEdits) { input in
                let server = input.history.final
                let version = server.version.next
                let composed = DocumentDelta.compose(input.first, input.second)
                // What an increment writes matters to no conflict: increments never conflict.
                let intent = server.applyingLocally(composed, at: version, includingIncrements: false)
                for strategy in ConflictStrategy.allCases {
                    guard let together = try? strategy.apply(composed, to: server, version: version) else { continue }
                    for alone in [input.first, input.second] {
                        guard let separate = try? strategy.apply(alone, to: server, version: version) else { continue }
                        // A conflict still matters when a field there that the server changed since the
                        // change's base is one the composition would change again.
                        let base = alone.earliestBase
                        /// The server fields behind a conflict that the composition would change again.
                        func fieldsThatStillMatter(_ conflict: Conflict) -> [FieldPath] {
                            server.fields.filter { path, field in
                                (conflict.path.isRoot || path.overlaps(conflict.path))
                                    && field.version > base && intent[path]?.value != field.value
                            }.map(\.key)
                        }
                        for conflict in separate.conflicts {
                            let fields = fieldsThatStillMatter(conflict)
                            let existenceMatters =
                                conflict.path.isRoot && server.existence.version > base
                                && intent.exists != server.exists
                            guard existenceMatters || !fields.isEmpty else { continue }
                            let covered = together.conflicts.contains { reported in
                                reported.path.isRoot || conflict.path.isRoot || fields.contains { $0.overlaps(reported.path) }
                            }
                            if !covered {
                                return
                                    "\(strategy): a change alone reports \(conflict.path) but the composition reports \(together.conflicts.map(\.path))"
                            }
                        }
                    }
                }
                return nil
            })
    }

    // MARK: The server join against an independent reading of the table

    struct OneEdit: CustomStringConvertible {
        var history: History
        var snapshot: Int
        var operations: [Operation]
        var delta: DocumentDelta
        var description: String { "\(history); client on state \(snapshot): \(operations)" }
    }

    /// A client's offline edits (one to three operations, composed) on one snapshot.
    static func oneEdit(_ choices: inout Choices) -> OneEdit {
        let history = Generate.history(&choices)
        let index = choices.below(history.states.count)
        let confirmed = history.states[index]
        var view = confirmed
        var delta = DocumentDelta()
        var operations: [Operation] = []
        for _ in 0..<choices.int(in: 1...3) {
            let operation = Generate.operation(&choices, view: view, afterPending: !operations.isEmpty)
            let part = operation.delta(base: confirmed.version)
            operations.append(operation)
            view.applyLocally(part, at: history.final.version.next)
            delta.compose(with: part)
        }
        return OneEdit(
            history: history, snapshot: index, operations: operations,
            delta: delta.droppingUnobservedRemoves(confirmed: confirmed))
    }

    @Test func noClientChangeIsLostAndServerChangesAreOverwrittenOnlyByTheTable() async {
        expectNoFailure(
            await Property.check("no loss", generate: Self.oneEdit) { input in
                let server = input.history.final
                let base = input.history.states[input.snapshot].version
                let version = server.version.next
                for strategy in ConflictStrategy.allCases {
                    guard let result = try? strategy.apply(input.delta, to: server, version: version) else { continue }
                    let documentDropped = result.conflicts.contains { $0.path.isRoot && $0.outcome != .clientWon && !server.exists }
                    let nothingApplied = strategy == .manual && !result.conflicts.isEmpty
                    func changedOnServer(overlapping path: FieldPath) -> Bool {
                        server.fields.contains { $0.key.overlaps(path) && $0.value.version > base }
                    }
                    if !documentDropped && !nothingApplied {
                        for (path, assignment) in input.delta.assignments where !changedOnServer(overlapping: path) {
                            // An increment of the path adds to what the change assigns.
                            let expected = input.delta.increments[path].map { Value.adding($0.amount, to: assignment.value) }
                            if result.state.liveValue(within: path) != expected ?? assignment.value {
                                return "\(strategy): the client's \(path)=\(assignment.value) was lost"
                            }
                        }
                        let intent = server.applyingLocally(input.delta, at: version)
                        for path in input.delta.setChanges.keys where !changedOnServer(overlapping: path) {
                            if result.state.liveValue(within: path) != intent.liveValue(within: path) {
                                return "\(strategy): the client's set change at \(path) was lost"
                            }
                        }
                    }
                    // An increment adds to the number the server has: it never conflicts, and
                    // counts wherever the document stands (under manual, beside a conflict too).
                    let increments = input.delta.increments
                    if !documentDropped, !increments.isEmpty,
                        input.delta == DocumentDelta.onlyIncrements(of: input.delta),
                        !increments.keys.contains(where: { path in increments.keys.contains { $0 != path && $0.overlaps(path) } })
                    {
                        for (path, increment) in increments {
                            var held: Value?
                            if case .register(let register)? = server[path] { held = register.value }
                            let expected = Value.adding(increment.amount, to: held)
                            if result.state[path]?.value != expected {
                                return
                                    "\(strategy): \(path) += \(increment.amount) over \(held?.description ?? "nothing") gave \(result.state[path]?.value?.description ?? "nothing")"
                            }
                        }
                    }
                    for (path, field) in server.fields where field.version > base {
                        // The server's number is kept within the sum an increment makes of it.
                        if input.delta.increments.keys.contains(where: { $0.overlaps(path) }) { continue }
                        guard result.state[path]?.value != field.value else { continue }
                        let allowed = result.conflicts.contains {
                            ($0.path.isRoot || $0.path.overlaps(path)) && ($0.outcome == .clientWon || $0.outcome == .merged)
                        }
                        if !allowed {
                            return "\(strategy): the server's change to \(path) was overwritten without a conflict won by the client"
                        }
                    }
                }
                return nil
            })
    }

    @Test func everySettledConflictIsReportedAndNothingElse() async {
        expectNoFailure(
            await Property.check("conflicts reported exactly", generate: Self.oneEdit) { input in
                let server = input.history.final
                let base = input.history.states[input.snapshot].version
                let version = server.version.next
                let delta = input.delta
                // Increments are not in the table: they never conflict.
                let intent = server.applyingLocally(delta, at: version, includingIncrements: false)
                for strategy in ConflictStrategy.allCases {
                    guard let result = try? strategy.apply(delta, to: server, version: version) else { continue }
                    // The table, read independently: a root conflict for delete-versus-edit and
                    // edit-versus-delete; a field conflict where the server changed a field since the
                    // base and the client's intent gives it another value.
                    let deletedSinceBase = !server.exists && server.existence.version > base && delta.hasEdits
                    let editedSinceBase = server.exists && delta.delete != nil && server.version > base
                    var expected: Set<FieldPath> = deletedSinceBase || editedSinceBase ? [.root] : []
                    if !(deletedSinceBase && strategy == .serverWins) {
                        for (path, field) in server.fields where field.version > base && field.value != intent[path]?.value {
                            let written = Array(delta.assignments.keys) + Array(delta.setChanges.keys)
                            let above = written.filter { path.isWithin($0) }
                            let under = written.filter { $0.isWithin(path) }
                            expected.formUnion(!above.isEmpty ? above : !under.isEmpty ? under : [path])
                        }
                    }
                    let reported = Set(result.conflicts.map(\.path))
                    if reported != expected {
                        return "\(strategy): reported \(reported.map(\.dotted).sorted()), the table says \(expected.map(\.dotted).sorted())"
                    }
                    let outcomes = Set(result.conflicts.map(\.outcome))
                    switch strategy {
                    case .serverWins where !outcomes.isSubset(of: [.serverWon]),
                        .clientWins where !outcomes.isSubset(of: [.clientWon]),
                        .manual where !outcomes.isSubset(of: [.unresolved]):
                        return "\(strategy): outcomes \(outcomes)"
                    default: break
                    }
                }
                return nil
            })
    }

    // MARK: Sets

    struct ConcurrentAddAndRemove: CustomStringConvertible {
        var history: History
        var element: Value
        var serverOperations: [Operation]
        var clientOperations: [Operation]
        var description: String {
            "\(history); element \(element); server: \(serverOperations); client: \(clientOperations)"
        }
    }

    @Test func anAddConcurrentWithARemoveSurvivesUnderMerge() async {
        let setPath = try! FieldPath("cart")
        expectNoFailure(
            await Property.check(
                "add wins under merge",
                generate: { choices in
                    let history = Generate.history(&choices)
                    let element = choices.element(of: Generate.elements)
                    // The element is in the set when the client takes its snapshot...
                    var serverOperations: [Operation] = [.update(set: [:], remove: [], add: [setPath: [element]], removeElements: [:])]
                    if !history.final.exists { serverOperations.insert(.create([:]), at: 0) }
                    // ...then the server adds it again, among other changes, while the client removes it.
                    var clientOperations: [Operation] = [.update(set: [:], remove: [], add: [:], removeElements: [setPath: [element]])]
                    for _ in 0..<choices.below(3) {
                        clientOperations.append(
                            .update(
                                set: [choices.element(of: Generate.registerPaths): Generate.value(&choices)],
                                remove: [], add: [:], removeElements: [:]))
                    }
                    return ConcurrentAddAndRemove(
                        history: history, element: element, serverOperations: serverOperations,
                        clientOperations: clientOperations)
                }
            ) { input in
                var server = input.history.final
                for operation in input.serverOperations {
                    guard
                        let next = try? ConflictStrategy.serverWins.apply(
                            operation.delta(base: server.version), to: server,
                            version: server.version.next)
                    else {
                        return "could not set up the server"
                    }
                    server = next.state
                }
                let snapshot = server
                let readd = Operation.update(set: [:], remove: [], add: [setPath: [input.element]], removeElements: [:])
                guard
                    let readded = try? ConflictStrategy.serverWins.apply(
                        readd.delta(base: server.version), to: server,
                        version: server.version.next)
                else {
                    return "could not re-add"
                }
                server = readded.state
                var delta = DocumentDelta()
                for operation in input.clientOperations { delta.compose(with: operation.delta(base: snapshot.version)) }
                delta = delta.droppingUnobservedRemoves(confirmed: snapshot)
                guard let result = try? ConflictStrategy.merge.apply(delta, to: server, version: server.version.next) else {
                    return "the merge threw"
                }
                guard case .set(let set)? = result.state[setPath], set.elements[input.element] != nil else {
                    return "the concurrently added \(input.element) is gone: \(result.state.shownContent)"
                }
                guard result.conflicts.contains(where: { $0.path == setPath && $0.outcome == .merged }) else {
                    return "the set conflict was not reported as merged: \(result.conflicts)"
                }
                return nil
            })
    }
}

@Suite struct EncodingPropertyTests {
    @Test func theDirectWritersWriteTheCanonicalEncodingAndItReadsBack() async {
        let failure = await Property.check("direct writers", generate: PropertyTests.oneEdit) { input in
            var stateBytes: [UInt8] = []
            input.history.final.writeEncoded(to: &stateBytes)
            if String(decoding: stateBytes, as: UTF8.self) != input.history.final.encoded.canonicalJSON { return "state bytes differ" }
            var deltaBytes: [UInt8] = []
            input.delta.writeEncoded(to: &deltaBytes)
            if String(decoding: deltaBytes, as: UTF8.self) != input.delta.encoded.canonicalJSON { return "delta bytes differ" }
            guard let state = try? DocumentState(encoded: Value(json: stateBytes)), state == input.history.final else {
                return "the state does not read back"
            }
            guard let delta = try? DocumentDelta(encoded: Value(json: deltaBytes)), delta == input.delta else {
                return "the delta does not read back"
            }
            let change = BatchChange(key: DocumentKey(collection: "carts", id: "c-1:x@y"), delta: input.delta, writes: 3)
            let other = BatchChange(key: DocumentKey(collection: "lists", id: "l1"), delta: input.delta, writes: 1, strategy: .manual)
            for batch in [
                Batch(clientID: "device-1", sequence: 7, changes: [change, other, change]), Batch(clientID: "d", sequence: 1, changes: []),
            ] {
                var batchBytes: [UInt8] = []
                batch.writeEncoded(to: &batchBytes)
                if String(decoding: batchBytes, as: UTF8.self) != batch.encoded.canonicalJSON { return "batch bytes differ" }
            }
            return nil
        }
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
    }
}

@Suite struct StoredFormPropertyTests {
    @Test func aStateStoredBesideItsViewReadsBackWhole() async {
        let failure = await Property.check("versions beside the view", generate: PropertyTests.oneEdit) { input in
            for state in input.history.states {
                var bytes: [UInt8] = []
                state.writeVersions(to: &bytes)
                let viewText = state.document?.canonicalJSON
                guard let versions = try? Value(json: bytes),
                    let read = try? DocumentState(versions: versions, view: viewText.flatMap { try? Value(json: $0) })
                else {
                    return "does not read back: \(String(decoding: bytes, as: UTF8.self))"
                }
                if read != state { return "read back differently: \(read.shownContent) vs \(state.shownContent)" }
                if state.documentJSON != viewText { return "documentJSON \(state.documentJSON ?? "nil") is not \(viewText ?? "nil")" }
                if versions.canonicalJSON != String(decoding: bytes, as: UTF8.self) {
                    return "the versions are not canonical JSON: \(String(decoding: bytes, as: UTF8.self))"
                }
                let forms = state.storedForms
                if forms.versions != bytes || forms.view != viewText { return "storedForms differs from writeVersions and documentJSON" }
                let wireForms = state.documentJSONAndEncoded
                if wireForms.documentJSON != viewText || wireForms.encoded != Array(state.encoded.canonicalJSON.utf8) {
                    return "documentJSONAndEncoded differs from documentJSON and the canonical compact form"
                }
            }
            return nil
        }
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
    }
}

/// The one-pass reader of a state's compact form against the tree decoder, on states and on
/// bytes mutated from them: what the one pass takes, the tree takes alike.
@Suite struct StateReadingPropertyTests {
    /// The tree decoder's answer, as a comparable result.
    static func treeResult(_ bytes: [UInt8]) -> Result<DocumentState, ValueError> {
        Result { () throws(ValueError) in
            try DocumentState(encoded: try Value(json: bytes, maximumDepth: ValueLimits.maximumEncodedDepth))
        }
    }

    @Test func theOnePassReaderAgreesWithTheTree() async {
        let failure = await Property.check(
            "state readers agree",
            generate: { choices in
                let history = Generate.history(&choices)
                var bytes: [UInt8] = []
                history.final.writeEncoded(to: &bytes)
                return (history: history, bytes: bytes, mutated: JSONMutation.mutated(bytes, &choices))
            }
        ) { input in
            var reader = JSONReader(bytes: input.bytes, maximumDepth: ValueLimits.maximumEncodedDepth)
            guard let read = DocumentState.readEncoded(from: &reader), read == input.history.final else {
                return "a written state is not read back in one pass: \(String(decoding: input.bytes, as: UTF8.self))"
            }
            // What the one pass takes, the tree takes alike (the rest is read by the tree itself,
            // whose refusals name the first fault in its dictionary's order, not comparable here).
            var mutatedReader = JSONReader(bytes: input.mutated, maximumDepth: ValueLimits.maximumEncodedDepth)
            guard let onePass = DocumentState.readEncoded(from: &mutatedReader), (try? mutatedReader.finish()) != nil else { return nil }
            let tree = Self.treeResult(input.mutated)
            if tree != .success(onePass) { return "\(String(decoding: input.mutated, as: UTF8.self)): \(onePass) vs the tree's \(tree)" }
            return nil
        }
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
    }

    @Test(arguments: [
        #"{"e":[1,2],"f":{"a":[1,2]},"e":[1,2]}"#, // a repeated key
        #"{"e":[1,2],"f":{"caf\u00e9":[1,2],"cafe\u0301":[2,2]}}"#, // paths equal as Swift strings
        #"{"e":[1,2],"f":{"a":[1,2]},"x":1}"#, // an unknown key the tree ignores
        #"{"e":[1,2],"f":[]}"#, // fields that are not a map
        #"{"e":[1,2],"f":{"a":[]}}"#,
        #"{"e":[1,2],"f":{"a":[1,2,3]}}"#,
        #"{"e":[1,-2],"f":{}}"#,
        #"{"e":[2,2]}"#,
        #"{"f":{}}"#,
        #"{"e":[1,2],"f":{"s":{"s":[[1,2]],"v":2}}}"#, // a set, read by the tree's code
        #"{"e":[1,2],"f":{"a":[1,2]}} x"#,
    ])
    func edgeCasesAgree(text: String) {
        let bytes = Array(text.utf8)
        let onePass = Result { () throws(ValueError) in try DocumentState(encodedJSON: bytes) }
        #expect(onePass == Self.treeResult(bytes))
    }
}

/// `JSONReader.skipValue()` takes exactly what `readValue()` takes, on values and on texts
/// mutated from them.
@Suite struct SkipValuePropertyTests {
    static func accepts(_ bytes: [UInt8], skipping: Bool) -> Bool {
        var reader = JSONReader(bytes: bytes)
        do {
            if skipping { try reader.skipValue() } else { _ = try reader.readValue() }
            try reader.finish()
            return true
        } catch {
            return false
        }
    }

    @Test func skippingTakesWhatReadingTakes() async {
        let failure = await Property.check(
            "skip agrees with read",
            generate: { choices in
                let value = Value.map(Generate.data(&choices))
                var text = value.canonicalJSON
                // Texts canonical JSON never holds: escapes, non-ASCII, a repeated key, spaces.
                switch choices.below(4) {
                case 0: text = text.replacing("a", with: #"\u00e9"#)
                case 1: text = text.replacing("{", with: #"{"k":1, "k" :2,"#).replacing(",}", with: "}")
                case 2: text = text.replacing(":", with: " : ").replacing("e", with: "é")
                default: break
                }
                let bytes = Array(text.utf8)
                return (bytes: bytes, mutated: JSONMutation.mutated(bytes, &choices))
            }
        ) { input in
            for bytes in [input.bytes, input.mutated] {
                let read = Self.accepts(bytes, skipping: false)
                if Self.accepts(bytes, skipping: true) != read {
                    return "\(String(decoding: bytes, as: UTF8.self)): readValue \(read ? "takes" : "refuses") it, skipValue does not"
                }
            }
            return nil
        }
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
    }

    @Test(arguments: [
        #"{"a":1,"a":2}"#, #"{"caf\u00e9":1,"cafe\u0301":2}"#, #"{"a":{"b":[1,{"c":"\ud800"}]}}"#, #""\u00e9x""#,
        #"[1e999]"#, "\"\u{01}\"", #"{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"a":10}"#, #"[01]"#, #""é""#,
        #"{"$timestamp":5}"#, #"{"$bytes":"AA=="}"#, #"{"$bytes":"AB=="}"#, #"{"$x":1}"#, #"{"a":1,"$bytes":"AA=="}"#,
        #"{"$timestamp":"2024-02-29T00:00:00.000000Z"}"#, #"{"$timestamp":"2023-02-29T00:00:00.000000Z"}"#,
    ])
    func edgeCasesAgree(text: String) {
        let bytes = Array(text.utf8)
        #expect(Self.accepts(bytes, skipping: true) == Self.accepts(bytes, skipping: false))
    }
}
