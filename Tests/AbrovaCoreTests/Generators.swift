import AbrovaCore
import AbrovaTestSupport

/// An app-level operation on one document, as the SDK would turn it into a delta.
enum Operation: CustomStringConvertible {
    case create([String: Value])
    /// `setData(_:merge: true)` by a device whose view has the document (or not).
    case setMerging([String: Value], documentExists: Bool)
    case update(set: [FieldPath: Value], remove: [FieldPath], add: [FieldPath: [Value]], removeElements: [FieldPath: [Value]])
    case delete
    /// `updateData` with `FieldValue.increment` at each path.
    case increment([FieldPath: Value])

    func delta(base: Version) -> DocumentDelta {
        switch self {
        case .create(let data):
            // Generated values are valid, so the builders cannot throw here.
            return (try? DocumentDelta.create(data, base: base)) ?? DocumentDelta()
        case .setMerging(let data, let documentExists):
            return (try? DocumentDelta.setMerging(data, base: base, documentExists: documentExists)) ?? DocumentDelta()
        case .update(let set, let remove, let add, let removeElements):
            return (try? DocumentDelta.update(set: set, remove: remove, setAdd: add, setRemove: removeElements, base: base))
                ?? DocumentDelta()
        case .delete:
            return DocumentDelta.delete(base: base)
        case .increment(let amounts):
            return (try? DocumentDelta.update(increments: amounts, base: base)) ?? DocumentDelta()
        }
    }

    var description: String {
        switch self {
        case .create(let data): "create(\(Value.map(data)))"
        case .setMerging(let data, let documentExists): "setMerging(\(Value.map(data)), exists: \(documentExists))"
        case .update(let set, let remove, let add, let removeElements):
            "update("
                + [
                    set.isEmpty ? nil : "set: " + set.map { "\($0.key)=\($0.value)" }.sorted().joined(separator: ","),
                    remove.isEmpty ? nil : "unset: " + remove.map(\.dotted).sorted().joined(separator: ","),
                    add.isEmpty ? nil : "add: " + add.map { "\($0.key)+\($0.value)" }.sorted().joined(separator: ","),
                    removeElements.isEmpty
                        ? nil : "remove: " + removeElements.map { "\($0.key)-\($0.value)" }.sorted().joined(separator: ","),
                ].compactMap { $0 }.joined(separator: "; ") + ")"
        case .delete: "delete"
        case .increment(let amounts): "increment(" + amounts.map { "\($0.key)+=\($0.value)" }.sorted().joined(separator: ",") + ")"
        }
    }
}

/// Random documents, operations and histories, kept small so that paths collide often.
enum Generate {
    static let registerPaths: [FieldPath] = ["a", "b", "c", "a.x", "a.y", "a.x.z", "b.w"].map { try! FieldPath($0) }
    static let setPaths: [FieldPath] = ["s", "t", "b"].map { try! FieldPath($0) }
    /// Counters, at paths that overlap registers and sets (an increment replaces what is there).
    static let counterPaths: [FieldPath] = ["n", "m", "a", "a.x", "s"].map { try! FieldPath($0) }
    static let elements: [Value] = ["milk", "eggs", "bread", 1, 2.5, .timestamp(Timestamp(microsecondsSince1970: 7)), .bytes([1])]

    static func value(_ choices: inout Choices) -> Value {
        switch choices.below(10) {
        case 0, 1, 2: .int(Int64(choices.below(3)))
        case 3, 4: .string(choices.element(of: ["x", "y", "z"]))
        case 5: .bool(choices.below(2) == 1)
        case 6: .map(["k": .int(Int64(choices.below(2)))])
        case 7: .timestamp(Timestamp(microsecondsSince1970: Int64(choices.below(3)) * 1_500_000))
        case 8: .bytes([UInt8(choices.below(3))])
        default: .array([.int(Int64(choices.below(2)))])
        }
    }

    static func elementList(_ choices: inout Choices) -> [Value] {
        (0..<choices.int(in: 1...2)).map { _ in choices.element(of: elements) }
    }

    /// An operation that makes sense on a device whose view is `view`.
    /// `afterPending`: the device has a pending change to the document (`view` is not what it
    /// confirmed).
    static func operation(_ choices: inout Choices, view: DocumentState, afterPending: Bool = false) -> Operation {
        guard view.exists else {
            switch choices.below(5) {
            case 0: return .delete
            // As `DocumentDelta.setMerging(_:base:confirmed:view:)` decides.
            case 1: return afterPending ? .create(nestedData(&choices)) : .setMerging(nestedData(&choices), documentExists: false)
            default: return .create(data(&choices))
            }
        }
        switch choices.below(13) {
        case 0: return .create(data(&choices))
        case 1: return .delete
        case 2: return .setMerging(nestedData(&choices), documentExists: true)
        case 3, 4: return .increment(increments(&choices))
        default:
            var set: [FieldPath: Value] = [:]
            var remove: [FieldPath] = []
            var add: [FieldPath: [Value]] = [:]
            var removeElements: [FieldPath: [Value]] = [:]
            for _ in 0..<choices.int(in: 1...3) {
                switch choices.below(4) {
                case 0: set[choices.element(of: registerPaths)] = value(&choices)
                case 1: remove.append(choices.element(of: registerPaths + setPaths))
                case 2: add[choices.element(of: setPaths)] = elementList(&choices)
                default: removeElements[choices.element(of: setPaths)] = elementList(&choices)
                }
            }
            // The SDK's update() takes each set path once; an element is not both added and removed.
            for (path, elements) in removeElements {
                let kept = elements.filter { !(add[path] ?? []).contains($0) }
                removeElements[path] = kept.isEmpty ? nil : kept
            }
            return .update(set: set, remove: remove, add: add, removeElements: removeElements)
        }
    }

    /// Increments of one or two counters, mostly of the counters that are not elsewhere.
    static func increments(_ choices: inout Choices) -> [FieldPath: Value] {
        var amounts: [FieldPath: Value] = [:]
        for _ in 0..<choices.int(in: 1...2) {
            let path = choices.chance(oneIn: 3) ? choices.element(of: counterPaths) : choices.element(of: Array(counterPaths.prefix(2)))
            amounts[path] = choices.chance(oneIn: 4) ? .double(Double(choices.int(in: -2...2)) / 2) : .int(Int64(choices.int(in: -2...3)))
        }
        return amounts
    }

    /// Data whose maps a merging set opens: `a` may hold `{x, y}` (the paths `a.x`, `a.y`).
    static func nestedData(_ choices: inout Choices) -> [String: Value] {
        var data = self.data(&choices)
        if choices.chance(oneIn: 2) {
            var inner: [String: Value] = [:]
            for _ in 0..<choices.int(in: 1...2) { inner[choices.element(of: ["x", "y"])] = value(&choices) }
            data["a"] = .map(inner)
        }
        return data
    }

    static func data(_ choices: inout Choices) -> [String: Value] {
        var data: [String: Value] = [:]
        for _ in 0..<choices.below(3) { data[choices.element(of: ["a", "b", "c"])] = value(&choices) }
        return data
    }

    /// A server history: each step is an operation made by a client that had seen some earlier
    /// state, applied with some strategy. `states[0]` is empty; `changes[i]` is what step i wrote.
    static func history(_ choices: inout Choices, steps: ClosedRange<Int> = 1...6) -> History {
        var history = History()
        for _ in 0..<choices.int(in: steps) {
            let current = history.states[history.states.count - 1]
            let seen = choices.chance(oneIn: 3) ? history.states[choices.below(history.states.count)] : current
            let operation = operation(&choices, view: seen)
            let strategy = choices.element(of: ConflictStrategy.allCases)
            let version = current.version.next
            guard let result = try? strategy.apply(operation.delta(base: seen.version), to: current, version: version) else {
                continue
            }
            history.steps.append("\(operation) based on \(seen.version), \(strategy) at \(version)")
            history.states.append(result.state)
            history.changes.append(result.changes)
        }
        return history
    }
}

/// A sequence of server states and the delta-states between them.
struct History: CustomStringConvertible {
    var states: [DocumentState] = [DocumentState()]
    var changes: [DocumentState] = []
    var steps: [String] = []

    var final: DocumentState { states[states.count - 1] }

    var description: String { "history[" + steps.joined(separator: " | ") + "]" }
}

extension DocumentState {
    /// Everything the state shows, deleted documents' kept fields included, for comparing views.
    var shownContent: String {
        "\(exists ? "exists" : "deleted") \(liveValue(within: .root)?.description ?? "{}")"
    }
}

extension DocumentDelta {
    /// The increments of `delta` alone, at their bases.
    static func onlyIncrements(of delta: DocumentDelta) -> DocumentDelta {
        var result = DocumentDelta()
        for (path, increment) in delta.increments {
            result.compose(with: (try? DocumentDelta.update(increments: [path: increment.amount], base: increment.base)) ?? DocumentDelta())
        }
        return result
    }
}
