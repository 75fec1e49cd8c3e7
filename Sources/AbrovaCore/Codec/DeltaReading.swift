// Reading a delta's compact form straight from JSON bytes, for the push decoder: the checks and
// errors of `DocumentDelta(encoded:)` without building the `Value` tree of the form first. Only
// the user's values (assigned values, set elements, and whatever stands where a part should be)
// become `Value`s.
//
// The form's keys may come in any order, but a problem must be the one `init(encoded:)` reports
// first, and a JSON error later in the text must win over it (the tree was parsed whole first). So
// problems are noted, the reading goes on, and the first by `init(encoded:)`'s order is reported
// once the object has been read.

extension DocumentDelta {
    /// What `read(from:)` found in a well-formed JSON value.
    package enum ReadOutcome: Hashable, Sendable {
        /// The delta.
        case delta(DocumentDelta)
        /// The value is not a JSON object.
        case notAnObject
        /// The object has a key that is not one of `encodedKeys`: the smallest such key in Swift's
        /// string order.
        case unknownKey(String)
        /// A part is malformed or a value cannot be stored: the error `init(encoded:)` throws for
        /// the same value (where it would find several, the one of the smallest key).
        case invalid(ValueError)
    }

    /// The keys of the compact form, in canonical order.
    public static let encodedKeys = [
        "assignments", "create", "createIfMissing", "delete", "fieldRemovals", "increments", "removals", "serverTimestamps",
        "setChanges",
    ]

    /// Reads the compact form (see `encoded`) at the reader's position, checking every path and
    /// value, and leaves the reader after it.
    ///
    /// Unlike `init(encoded:)`, which ignores them, keys other than `encodedKeys` are reported.
    ///
    /// - Returns: the delta, or why the value (well-formed JSON, read whole) is not one.
    /// - Throws: `ValueError` when the JSON itself is malformed, as `JSONReader.readValue()` would.
    package static func read(from reader: inout JSONReader) throws(ValueError) -> ReadOutcome {
        guard try reader.beginObject() else {
            _ = try reader.readValue()
            return .notAnObject
        }
        var parts = DeltaPartsReader()
        while let key = try reader.nextKey() {
            try parts.readPart(named: key, from: &reader)
        }
        return parts.outcome
    }
}

/// The steps of `DocumentDelta(encoded:)`, in the order it takes them: a problem of an earlier step
/// is the one it reports, wherever the two stand in the text.
private enum DeltaStep: Int, Comparable {
    case create, createIfMissing, createTwice, delete
    case removalPaths, removalBases, fieldRemovalPaths, fieldRemovalBases
    case assignmentPaths, assignments, serverTimestampPaths, serverTimestamps, setChangePaths, setChanges
    case incrementPaths, increments

    static func < (left: DeltaStep, right: DeltaStep) -> Bool { left.rawValue < right.rawValue }
}

/// The problem `DocumentDelta(encoded:)` would report: the one of the earliest step, and within a
/// step (where it walks a dictionary) the one of the smallest key.
private struct FirstProblem {
    private(set) var error: ValueError?
    private var step = DeltaStep.setChanges
    private var key = ""

    mutating func note(_ error: ValueError, step: DeltaStep, key: String = "") {
        if self.error != nil, (self.step, self.key) <= (step, key) { return }
        self.error = error
        self.step = step
        self.key = key
    }
}

/// Reads the parts of a delta as they come.
private struct DeltaPartsReader {
    private var delta = DocumentDelta()
    /// The server timestamps, kept apart until the end: the assignments may come after them.
    private var serverTimestamps: [FieldPath: DocumentDelta.Assignment] = [:]
    private var problem = FirstProblem()
    private var unknownKeys = JSONReader.UnknownKeys()
    private var partsRead: Set<String> = []

    var outcome: DocumentDelta.ReadOutcome {
        if let unknown = unknownKeys.first { return .unknownKey(unknown) }
        var problem = problem
        if delta.create != nil, delta.createIfMissing != nil { problem.note(DocumentDelta.createTwiceError, step: .createTwice) }
        var delta = delta
        for (path, stamp) in serverTimestamps {
            if delta.assignments[path] != nil {
                problem.note(DocumentDelta.assignedTwiceError(at: path), step: .serverTimestamps, key: path.dotted)
            }
            delta.assignments[path] = stamp
        }
        if let error = problem.error { return .invalid(error) }
        delta.notePathDepths()
        do {
            try delta.checkWritesDoNotOverlap()
        } catch {
            return .invalid(error)
        }
        return .delta(delta)
    }

    mutating func readPart(named key: String, from reader: inout JSONReader) throws(ValueError) {
        // Each part is read into a collection of its own, then stored: a repeated part is a JSON
        // error (found after its value), which its entries must not be taken for.
        switch key {
        case "create": delta.create = try readBase(from: &reader, field: key, step: .create)
        case "createIfMissing": delta.createIfMissing = try readBase(from: &reader, field: key, step: .createIfMissing)
        case "delete": delta.delete = try readBase(from: &reader, field: key, step: .delete)
        case "removals": delta.removals = try readBases(named: key, from: &reader, pathStep: .removalPaths, baseStep: .removalBases)
        case "fieldRemovals":
            delta.fieldRemovals = try readBases(named: key, from: &reader, pathStep: .fieldRemovalPaths, baseStep: .fieldRemovalBases)
        case "assignments": delta.assignments = try readAssignments(named: key, from: &reader)
        case "serverTimestamps": serverTimestamps = try readAssignments(named: key, from: &reader)
        case "setChanges": delta.setChanges = try readSetChanges(from: &reader)
        case "increments": delta.increments = try readIncrements(from: &reader)
        default:
            _ = try reader.readValue()
            guard unknownKeys.insert(key) else { throw reader.makeDuplicateKeyError() }
            return
        }
        guard partsRead.insert(key).inserted else { throw reader.makeDuplicateKeyError() }
    }

    private mutating func readBase(from reader: inout JSONReader, field: String, step: DeltaStep) throws(ValueError) -> Version? {
        let value = try reader.readValue()
        do {
            return try Version(encoded: value, field: field)
        } catch {
            problem.note(error, step: step, key: field)
            return nil
        }
    }

    /// The path a key names, or `nil` (the problem noted) when it names none or the root.
    private mutating func path(_ key: String, step: DeltaStep) -> FieldPath? {
        do {
            let path = try FieldPath(key)
            try path.checkNotRoot()
            return path
        } catch {
            problem.note(error, step: step, key: key)
            return nil
        }
    }

    /// Reads a part that is not a map, noting the problem.
    private mutating func readNonMap(named part: String, from reader: inout JSONReader, step: DeltaStep) throws(ValueError) {
        _ = try reader.readValue()
        problem.note(ValueError(.malformedJSON, field: "", detail: "\(part) in a change must be a map"), step: step)
    }

    /// `{path: base}`: removals and field removals.
    private mutating func readBases(
        named part: String, from reader: inout JSONReader,
        pathStep: DeltaStep, baseStep: DeltaStep
    ) throws(ValueError) -> [FieldPath: Version] {
        guard try reader.beginObject() else {
            try readNonMap(named: part, from: &reader, step: pathStep)
            return [:]
        }
        var entries = PathEntries<Version>()
        while let key = try reader.nextKey() {
            let value = try reader.readValue()
            var base: Version?
            let path = self.path(key, step: pathStep)
            if let path {
                do {
                    base = try Version(encoded: value, field: path.dotted)
                } catch {
                    problem.note(error, step: baseStep, key: key)
                }
            }
            guard entries.add(base, at: path, key: key) else { throw reader.makeDuplicateKeyError() }
        }
        return entries.entries
    }

    /// `{path: [value, base]}`: assignments, and server timestamps (`[estimate, base]`).
    private mutating func readAssignments(
        named part: String, from reader: inout JSONReader
    ) throws(ValueError) -> [FieldPath: DocumentDelta.Assignment] {
        let isServerTimestamp = part == "serverTimestamps"
        let (pathStep, step): (DeltaStep, DeltaStep) =
            isServerTimestamp ? (.serverTimestampPaths, .serverTimestamps) : (.assignmentPaths, .assignments)
        guard try reader.beginObject() else {
            try readNonMap(named: part, from: &reader, step: pathStep)
            return [:]
        }
        var entries = PathEntries<DocumentDelta.Assignment>()
        while let key = try reader.nextKey() {
            let pair = try Self.readPair(from: &reader)
            var assignment: DocumentDelta.Assignment?
            let path = self.path(key, step: pathStep)
            if let path {
                do {
                    assignment =
                        isServerTimestamp ? try Self.serverTimestamp(pair, at: path) : try Self.assignment(pair, at: path)
                } catch {
                    problem.note(error, step: step, key: key)
                }
            }
            guard entries.add(assignment, at: path, key: key) else { throw reader.makeDuplicateKeyError() }
        }
        return entries.entries
    }

    /// Reads `[value, base]`; `nil` (after reading whatever stands there) when it is not an array of two.
    private static func readPair(from reader: inout JSONReader) throws(ValueError) -> (value: Value, base: Value)? {
        guard try reader.beginArray() else {
            _ = try reader.readValue()
            return nil
        }
        var value: Value?
        var base: Value?
        var count = 0
        while try reader.nextElement() {
            let element = try reader.readValue()
            if count == 0 { value = element } else if count == 1 { base = element }
            count += 1
        }
        guard count == 2, let value, let base else { return nil }
        return (value, base)
    }

    private static func assignment(_ pair: (value: Value, base: Value)?, at path: FieldPath) throws(ValueError) -> DocumentDelta.Assignment
    {
        guard let pair else {
            throw ValueError(.malformedJSON, field: path.dotted, detail: "an assignment is not [value, base]")
        }
        try pair.value.validate(at: path, depth: path.depth)
        return DocumentDelta.Assignment(value: pair.value, base: try Version(encoded: pair.base, field: path.dotted))
    }

    private static func serverTimestamp(
        _ pair: (value: Value, base: Value)?, at path: FieldPath
    ) throws(ValueError) -> DocumentDelta.Assignment {
        guard let pair, case .timestamp = pair.value else { throw DocumentDelta.serverTimestampShapeError(at: path) }
        try pair.value.validate(at: path, depth: path.depth)
        return DocumentDelta.Assignment(
            value: pair.value, base: try Version(encoded: pair.base, field: path.dotted), isServerTimestamp: true)
    }

    /// `{path: [amount, base]}`: increments.
    private mutating func readIncrements(from reader: inout JSONReader) throws(ValueError) -> [FieldPath: DocumentDelta.Increment] {
        guard try reader.beginObject() else {
            try readNonMap(named: "increments", from: &reader, step: .incrementPaths)
            return [:]
        }
        var entries = PathEntries<DocumentDelta.Increment>()
        while let key = try reader.nextKey() {
            let pair = try Self.readPair(from: &reader)
            var increment: DocumentDelta.Increment?
            let path = self.path(key, step: .incrementPaths)
            if let path {
                do throws(ValueError) {
                    guard let pair else { throw DocumentDelta.incrementShapeError(at: path) }
                    try DocumentDelta.Increment.validate(pair.value, at: path)
                    increment = DocumentDelta.Increment(amount: pair.value, base: try Version(encoded: pair.base, field: path.dotted))
                } catch {
                    problem.note(error, step: .increments, key: key)
                }
            }
            guard entries.add(increment, at: path, key: key) else { throw reader.makeDuplicateKeyError() }
        }
        return entries.entries
    }

    /// `{path: {"add": [...], "remove": [...], "base": base}}`.
    private mutating func readSetChanges(from reader: inout JSONReader) throws(ValueError) -> [FieldPath: DocumentDelta.SetChange] {
        guard try reader.beginObject() else {
            try readNonMap(named: "setChanges", from: &reader, step: .setChangePaths)
            return [:]
        }
        var entries = PathEntries<DocumentDelta.SetChange>()
        while let key = try reader.nextKey() {
            let form = try SetChangeForm.read(from: &reader)
            var change: DocumentDelta.SetChange?
            let path = self.path(key, step: .setChangePaths)
            if let path {
                do {
                    change = try form.setChange(at: path)
                } catch {
                    problem.note(error, step: .setChanges, key: key)
                }
            }
            guard entries.add(change, at: path, key: key) else { throw reader.makeDuplicateKeyError() }
        }
        return entries.entries
    }
}

/// The entries of one `{path: ...}` map, and the keys of those that were refused, so that a key
/// repeated in the text is found whichever of the two holds it (keys compare as Swift strings do,
/// as a `Value` map's keys do).
private struct PathEntries<Entry> {
    private(set) var entries: [FieldPath: Entry] = [:]
    private var refusedKeys: Set<String> = []

    /// Adds the entry of `key` (`nil` when it was refused); `false` when `key` was there already.
    mutating func add(_ entry: Entry?, at path: FieldPath?, key: String) -> Bool {
        if let path, let entry {
            return entries.updateValue(entry, forKey: path) == nil && !refusedKeys.contains(key)
        }
        return refusedKeys.insert(key).inserted && entries[FieldPath(unchecked: key)] == nil
    }
}

/// A set change as read, checked afterwards in the order `DocumentDelta(encoded:)` checks it.
private struct SetChangeForm {
    private var isMap = true
    private var adds: [Value] = []
    private var removes: [Value] = []
    /// Whether `add` and `remove`, where present, are arrays.
    private var isWellShaped = true
    private var base = Value.null
    private var unknownKeys = JSONReader.UnknownKeys()

    static func read(from reader: inout JSONReader) throws(ValueError) -> SetChangeForm {
        var form = SetChangeForm()
        guard try reader.beginObject() else {
            _ = try reader.readValue()
            form.isMap = false
            return form
        }
        var keysRead: Set<String> = []
        while let key = try reader.nextKey() {
            switch key {
            case "add": form.adds = try form.readElements(from: &reader)
            case "remove": form.removes = try form.readElements(from: &reader)
            case "base": form.base = try reader.readValue()
            default:
                _ = try reader.readValue()
                guard form.unknownKeys.insert(key) else { throw reader.makeDuplicateKeyError() }
                continue
            }
            guard keysRead.insert(key).inserted else { throw reader.makeDuplicateKeyError() }
        }
        return form
    }

    /// Reads the elements of `add` or `remove`; anything but an array makes the form misshapen.
    private mutating func readElements(from reader: inout JSONReader) throws(ValueError) -> [Value] {
        guard try reader.beginArray() else {
            _ = try reader.readValue()
            isWellShaped = false
            return []
        }
        var elements: [Value] = []
        while try reader.nextElement() {
            elements.append(try reader.readValue())
        }
        return elements
    }

    func setChange(at path: FieldPath) throws(ValueError) -> DocumentDelta.SetChange {
        let shape = "a set change is {\"add\": [...], \"remove\": [...], \"base\": version}"
        guard isMap, isWellShaped else { throw ValueError(.malformedJSON, field: path.dotted, detail: shape) }
        if let unknown = unknownKeys.first {
            throw ValueError(.malformedJSON, field: path.dotted, detail: "unknown key \"\(unknown.prefix(40))\": \(shape)")
        }
        for element in adds { try element.validate(at: path, depth: path.depth + 1) }
        for element in removes { try element.validate(at: path, depth: path.depth + 1) }
        let addSet = Set(adds)
        let removeSet = Set(removes)
        guard addSet.isDisjoint(with: removeSet) else {
            throw ValueError(.malformedJSON, field: path.dotted, detail: "an element is both added and removed")
        }
        return DocumentDelta.SetChange(adds: addSet, removes: removeSet, base: try Version(encoded: base, field: path.dotted))
    }
}
