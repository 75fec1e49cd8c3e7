// Compact JSON forms of the CRDT types, used for storage and the wire (Spec/conflicts.md,
// "Encodings"). They go through `Value` so that the hot paths can use the direct JSON writer and
// parser, and `Codable` is built on the same forms.

extension DocumentState {
    /// The compact form: `{"e": [exists, version], "f": {path: field}}` where a register is
    /// `[value, version]`, a removed field `[version]`, and a set `{"s": [[element, addedAt], ...], "v": version}`.
    public var encoded: Value {
        var fieldValues: [String: Value] = [:]
        fieldValues.reserveCapacity(fields.count)
        for (path, field) in fields {
            switch field {
            case .register(let register):
                if let value = register.value {
                    fieldValues[path.dotted] = .array([value, register.version.encoded])
                } else {
                    fieldValues[path.dotted] = .array([register.version.encoded])
                }
            case .set(let set):
                let elements = set.sortedElements.map { element in
                    Value.array([element, (set.elements[element] ?? .zero).encoded])
                }
                fieldValues[path.dotted] = .map(["s": .array(elements), "v": set.version.encoded])
            }
        }
        return .map([
            "e": .array([.int(existence.exists ? 1 : 0), existence.version.encoded]),
            "f": .map(fieldValues),
        ])
    }

    /// Reads the compact form.
    ///
    /// - Throws: `ValueError` (`malformedJSON`, naming the field) when the value is not a state.
    public init(encoded value: Value) throws(ValueError) {
        guard case .map(let parts) = value,
            case .array(let existenceParts)? = parts["e"], existenceParts.count == 2,
            let exists = existenceParts[0].intValue, exists == 0 || exists == 1
        else {
            throw ValueError(.malformedJSON, field: "", detail: "not a document state")
        }
        let existence = Existence(exists: exists == 1, version: try Version(encoded: existenceParts[1], field: "e"))
        var fields: [FieldPath: Field] = [:]
        for (dotted, encodedField) in parts["f"]?.mapValue ?? [:] {
            let path = try FieldPath(dotted)
            try path.checkNotRoot()
            fields[path] = try Self.decodeField(encodedField, at: path)
        }
        self.init(existence: existence, fields: fields)
    }

    /// Reads one field's compact form: `[value, version]`, `[version]` or a set.
    static func decodeField(_ encodedField: Value, at path: FieldPath) throws(ValueError) -> Field {
        let dotted = path.dotted
        switch encodedField {
        case .array(let items) where items.count == 1:
            return .register(Register(value: nil, version: try Version(encoded: items[0], field: dotted)))
        case .array(let items) where items.count == 2:
            try items[0].validate(at: path, depth: path.depth)
            return .register(Register(value: items[0], version: try Version(encoded: items[1], field: dotted)))
        case .map(let setParts):
            var elements: [Value: Version] = [:]
            for pair in setParts["s"]?.arrayValue ?? [] {
                guard case .array(let items) = pair, items.count == 2 else {
                    throw ValueError(.malformedJSON, field: dotted, detail: "not a set element")
                }
                try items[0].validate(at: path, depth: path.depth + 1)
                elements[items[0]] = try Version(encoded: items[1], field: dotted)
            }
            let version = try Version(encoded: setParts["v"] ?? .null, field: dotted)
            return .set(ObservedRemoveSet(elements: elements, version: version))
        default:
            throw ValueError(.malformedJSON, field: dotted, detail: "not a field")
        }
    }
}

extension DocumentState: EncodedAsValue {}

extension DocumentDelta {
    /// The compact form: `{"create": base, "createIfMissing": base, "removals": {path: base},
    /// "fieldRemovals": {path: base}, "assignments": {path: [value, base]}, "serverTimestamps":
    /// {path: [estimate, base]}, "setChanges": {path: {"add": [...], "remove": [...], "base":
    /// base}}, "increments": {path: [amount, base]}, "delete": base}`, each part only when present.
    public var encoded: Value {
        var parts: [String: Value] = [:]
        if let create { parts["create"] = create.encoded }
        if let createIfMissing { parts["createIfMissing"] = createIfMissing.encoded }
        if !removals.isEmpty { parts["removals"] = .map(removals.reduce(into: [:]) { $0[$1.key.dotted] = $1.value.encoded }) }
        if !fieldRemovals.isEmpty {
            parts["fieldRemovals"] = .map(fieldRemovals.reduce(into: [:]) { $0[$1.key.dotted] = $1.value.encoded })
        }
        var values: [String: Value] = [:]
        var stamps: [String: Value] = [:]
        for (path, assignment) in assignments {
            let entry = Value.array([assignment.value, assignment.base.encoded])
            if assignment.isServerTimestamp { stamps[path.dotted] = entry } else { values[path.dotted] = entry }
        }
        if !values.isEmpty { parts["assignments"] = .map(values) }
        if !stamps.isEmpty { parts["serverTimestamps"] = .map(stamps) }
        if !setChanges.isEmpty {
            parts["setChanges"] = .map(
                setChanges.reduce(into: [:]) { result, entry in
                    result[entry.key.dotted] = .map([
                        "add": .array(ObservedRemoveSet.canonicallySorted(entry.value.adds)),
                        "remove": .array(ObservedRemoveSet.canonicallySorted(entry.value.removes)),
                        "base": entry.value.base.encoded,
                    ])
                })
        }
        if !increments.isEmpty {
            parts["increments"] = .map(
                increments.reduce(into: [:]) { $0[$1.key.dotted] = .array([$1.value.amount, $1.value.base.encoded]) })
        }
        if let delete { parts["delete"] = delete.encoded }
        return .map(parts)
    }

    /// Reads the compact form, validating every path and value.
    ///
    /// - Throws: `ValueError` naming the field when a part is malformed or a value cannot be stored.
    public init(encoded value: Value) throws(ValueError) {
        guard case .map(let parts) = value else {
            throw ValueError(.malformedJSON, field: "", detail: "a change is not a map")
        }
        self.init()
        func paths(_ key: String) throws(ValueError) -> [(FieldPath, Value)] {
            guard let part = parts[key] else { return [] }
            guard case .map(let entries) = part else {
                throw ValueError(.malformedJSON, field: "", detail: "\(key) in a change must be a map")
            }
            var result: [(FieldPath, Value)] = []
            for (dotted, item) in entries {
                let path = try FieldPath(dotted)
                try path.checkNotRoot()
                result.append((path, item))
            }
            return result
        }
        if let base = parts["create"] { create = try Version(encoded: base, field: "create") }
        if let base = parts["createIfMissing"] { createIfMissing = try Version(encoded: base, field: "createIfMissing") }
        if create != nil, createIfMissing != nil { throw Self.createTwiceError }
        if let base = parts["delete"] { delete = try Version(encoded: base, field: "delete") }
        for (path, base) in try paths("removals") { removals[path] = try Version(encoded: base, field: path.dotted) }
        for (path, base) in try paths("fieldRemovals") { fieldRemovals[path] = try Version(encoded: base, field: path.dotted) }
        for (path, item) in try paths("assignments") {
            guard case .array(let items) = item, items.count == 2 else {
                throw ValueError(.malformedJSON, field: path.dotted, detail: "an assignment is not [value, base]")
            }
            try items[0].validate(at: path, depth: path.depth)
            assignments[path] = Assignment(value: items[0], base: try Version(encoded: items[1], field: path.dotted))
        }
        for (path, item) in try paths("serverTimestamps") {
            guard case .array(let items) = item, items.count == 2, case .timestamp = items[0] else {
                throw Self.serverTimestampShapeError(at: path)
            }
            try items[0].validate(at: path, depth: path.depth)
            let base = try Version(encoded: items[1], field: path.dotted)
            guard assignments[path] == nil else { throw Self.assignedTwiceError(at: path) }
            assignments[path] = Assignment(value: items[0], base: base, isServerTimestamp: true)
        }
        for (path, item) in try paths("setChanges") {
            let shape = "a set change is {\"add\": [...], \"remove\": [...], \"base\": version}"
            guard case .map(let change) = item, change["add"].map({ $0.arrayValue != nil }) ?? true,
                change["remove"].map({ $0.arrayValue != nil }) ?? true
            else {
                throw ValueError(.malformedJSON, field: path.dotted, detail: shape)
            }
            if let unknown = change.keys.first(where: { $0 != "add" && $0 != "remove" && $0 != "base" }) {
                throw ValueError(.malformedJSON, field: path.dotted, detail: "unknown key \"\(unknown.prefix(40))\": \(shape)")
            }
            let adds = change["add"]?.arrayValue ?? []
            let removes = change["remove"]?.arrayValue ?? []
            for element in adds + removes { try element.validate(at: path, depth: path.depth + 1) }
            guard Set(adds).isDisjoint(with: removes) else {
                throw ValueError(.malformedJSON, field: path.dotted, detail: "an element is both added and removed")
            }
            setChanges[path] = SetChange(
                adds: Set(adds), removes: Set(removes),
                base: try Version(encoded: item.mapValue?["base"] ?? .null, field: path.dotted))
        }
        for (path, item) in try paths("increments") {
            guard case .array(let items) = item, items.count == 2 else { throw Self.incrementShapeError(at: path) }
            try Increment.validate(items[0], at: path)
            increments[path] = Increment(amount: items[0], base: try Version(encoded: items[1], field: path.dotted))
        }
        notePathDepths()
        try checkWritesDoNotOverlap()
    }
}

extension DocumentDelta: EncodedAsValue {
    /// Why a server timestamp's entry is refused.
    static func serverTimestampShapeError(at path: FieldPath) -> ValueError {
        ValueError(.malformedJSON, field: path.dotted, detail: "a server timestamp is not [timestamp, base]")
    }

    /// Why a path both assigned and stamped by the server is refused.
    static func assignedTwiceError(at path: FieldPath) -> ValueError {
        ValueError(
            .malformedJSON, field: path.dotted,
            detail: "the change writes \"\(path.dotted)\" both as a value and as a server timestamp; a change writes each place once")
    }

    /// Why an increment's entry that is not a pair is refused.
    static func incrementShapeError(at path: FieldPath) -> ValueError {
        ValueError(.malformedJSON, field: path.dotted, detail: "an increment is not [amount, base]")
    }

    /// Why a change with both `create` and `createIfMissing` is refused.
    static let createTwiceError = ValueError(.malformedJSON, field: "", detail: "a change has create or createIfMissing, not both")
}

/// A type with a compact form as a `Value`; its `Codable` conformance goes through that form, so
/// JSON written by Foundation's coders and by the direct writer is the same.
public protocol EncodedAsValue: Codable {
    /// The compact form.
    var encoded: Value { get }
    /// Reads the compact form.
    init(encoded: Value) throws(ValueError)
}

extension EncodedAsValue {
    public init(from decoder: any Decoder) throws {
        let value = try decoder.singleValueContainer().decode(Value.self)
        do {
            try self.init(encoded: value)
        } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.description))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(encoded)
    }
}

extension ObservedRemoveSet {
    /// Appends the compact form of a set field: `{"s": [[element, addedAt], ...], "v": version}`.
    func writeEncoded(to bytes: inout [UInt8]) {
        bytes.append(contentsOf: #"{"s":["#.utf8)
        // Each element's JSON is made once: it is both the sort key and what is written.
        let sorted = elements.map { (json: $0.key.canonicalJSON, addedAt: $0.value) }.sorted { Value.canonicalOrder($0.json, $1.json) }
        for (position, element) in sorted.enumerated() {
            if position > 0 { bytes.append(UInt8(ascii: ",")) }
            bytes.append(UInt8(ascii: "["))
            bytes.append(contentsOf: element.json.utf8)
            bytes.append(UInt8(ascii: ","))
            Value.writeDecimal(Int64(bitPattern: element.addedAt.rawValue), to: &bytes)
            bytes.append(UInt8(ascii: "]"))
        }
        bytes.append(contentsOf: #"],"v":"#.utf8)
        Value.writeDecimal(Int64(bitPattern: version.rawValue), to: &bytes)
        bytes.append(UInt8(ascii: "}"))
    }

    static func canonicallySorted(_ elements: some Sequence<Value>) -> [Value] {
        elements.map { ($0.canonicalJSON, $0) }.sorted { Value.canonicalOrder($0.0, $1.0) }.map(\.1)
    }
}

extension Version {
    var encoded: Value { .int(Int64(bitPattern: rawValue)) }

    /// Appends `{path: version, ...}` for entries already in canonical order.
    static func writeMap(_ entries: [(key: FieldPath, value: Version)], to bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "{"))
        for (index, entry) in entries.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            Value.writeJSONString(entry.key.dotted, to: &bytes)
            bytes.append(UInt8(ascii: ":"))
            Value.writeDecimal(Int64(bitPattern: entry.value.rawValue), to: &bytes)
        }
        bytes.append(UInt8(ascii: "}"))
    }

    init(encoded value: Value, field: String) throws(ValueError) {
        guard case .int(let number) = value, number >= 0 else {
            throw ValueError(.malformedJSON, field: field, detail: "a version is not a non-negative integer")
        }
        self.init(UInt64(number))
    }
}

extension Batch: EncodedAsValue {
    /// The compact form: `{"clientId": id, "batchSeq": n, "changes": [{"collection": c, "id": id,
    /// "delta": delta, "writes": n, "strategy"?: s, "group"?: g}, ...]}`, changes in the app's order.
    public var encoded: Value {
        .map([
            "clientId": .string(clientID),
            "batchSeq": .int(sequence),
            "changes": .array(
                changes.map { change in
                    var parts: [String: Value] = [
                        "collection": .string(change.key.collection), "id": .string(change.key.id),
                        "delta": change.delta.encoded, "writes": .int(Int64(change.writes)),
                    ]
                    if let strategy = change.strategy { parts["strategy"] = .string(strategy.rawValue) }
                    if let group = change.group { parts["group"] = .int(group) }
                    return .map(parts)
                }),
        ])
    }

    /// At least the bytes a batch's body (`writeEncoded(to:strategy:)`) takes besides its
    /// changes: its number, client id (128 characters at most) and strategy.
    public static let encodedOverhead = 256

    /// At least the bytes a change of `key` takes in a batch's body besides its delta: the keys,
    /// the names (safe in JSON as they are), a strategy and the count of writes.
    public static func encodedOverhead(of key: DocumentKey) -> Int { 96 + key.collection.utf8.count + key.id.utf8.count }

    /// Appends the canonical JSON of `encoded`, each change's delta written from its parts (no
    /// `Value` tree of the batch is built). With `strategy`, the object also holds
    /// `"strategy": strategy` (last: keys are in canonical order), as a push body does.
    public func writeEncoded(to bytes: inout [UInt8], strategy: ConflictStrategy? = nil) {
        bytes.append(contentsOf: #"{"batchSeq":"#.utf8)
        Value.writeDecimal(sequence, to: &bytes)
        bytes.append(contentsOf: #","changes":["#.utf8)
        for (index, change) in changes.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            bytes.append(contentsOf: #"{"collection":"#.utf8)
            Value.writeJSONString(change.key.collection, to: &bytes)
            bytes.append(contentsOf: #","delta":"#.utf8)
            change.delta.writeEncoded(to: &bytes)
            if let group = change.group {
                bytes.append(contentsOf: #","group":"#.utf8)
                Value.writeDecimal(group, to: &bytes)
            }
            bytes.append(contentsOf: #","id":"#.utf8)
            Value.writeJSONString(change.key.id, to: &bytes)
            if let strategy = change.strategy {
                bytes.append(contentsOf: #","strategy":"#.utf8)
                Value.writeJSONString(strategy.rawValue, to: &bytes)
            }
            bytes.append(contentsOf: #","writes":"#.utf8)
            Value.writeDecimal(Int64(change.writes), to: &bytes)
            bytes.append(UInt8(ascii: "}"))
        }
        bytes.append(contentsOf: #"],"clientId":"#.utf8)
        Value.writeJSONString(clientID, to: &bytes)
        if let strategy {
            bytes.append(contentsOf: #","strategy":"#.utf8)
            Value.writeJSONString(strategy.rawValue, to: &bytes)
        }
        bytes.append(UInt8(ascii: "}"))
    }

    /// Reads the compact form.
    ///
    /// - Throws: `ValueError` naming the part that is malformed.
    public init(encoded value: Value) throws(ValueError) {
        guard let parts = value.mapValue, let clientID = parts["clientId"]?.stringValue,
            let sequence = parts["batchSeq"]?.intValue, let changes = parts["changes"]?.arrayValue
        else {
            throw ValueError(.malformedJSON, field: "", detail: "a batch needs clientId, batchSeq and changes")
        }
        var decoded: [BatchChange] = []
        for (index, change) in changes.enumerated() {
            guard let fields = change.mapValue, let collection = fields["collection"]?.stringValue,
                let id = fields["id"]?.stringValue, let delta = fields["delta"]
            else {
                throw ValueError(.malformedJSON, field: "changes.\(index)", detail: "a change needs collection, id and delta")
            }
            decoded.append(
                BatchChange(
                    key: DocumentKey(collection: collection, id: id), delta: try DocumentDelta(encoded: delta),
                    writes: Int(fields["writes"]?.intValue ?? 1),
                    strategy: fields["strategy"]?.stringValue.flatMap(ConflictStrategy.init(rawValue:)),
                    group: fields["group"]?.intValue))
        }
        self.init(clientID: clientID, sequence: sequence, changes: decoded)
    }
}

// Direct writers of the compact forms: the same bytes as `encoded.writeCanonicalJSON(to:)`
// without building the intermediate `Value` (the device store writes these on every change).

extension DocumentState {
    /// Appends the canonical JSON of `encoded`.
    public func writeEncoded(to bytes: inout [UInt8]) {
        writeEncoded(to: &bytes, sortedFields: sortedFields)
    }

    /// The canonical JSON of `encoded`.
    public var encodedBytes: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(32 + byteSize + 16 * fields.count)
        writeEncoded(to: &bytes)
        return bytes
    }

    /// The document's canonical JSON (`nil` when it does not exist) and the compact form, from one
    /// sort of the fields: a pulled page carries both for every document.
    public var documentJSONAndEncoded: (documentJSON: String?, encoded: [UInt8]) {
        let sorted = sortedFields
        var encoded: [UInt8] = []
        encoded.reserveCapacity(32 + byteSize + 16 * fields.count)
        writeEncoded(to: &encoded, sortedFields: sorted)
        return (documentJSON(sortedFields: sorted), encoded)
    }

    func writeEncoded(to bytes: inout [UInt8], sortedFields: [Dictionary<FieldPath, Field>.Index]) {
        bytes.append(contentsOf: #"{"e":["#.utf8)
        bytes.append(existence.exists ? UInt8(ascii: "1") : UInt8(ascii: "0"))
        bytes.append(UInt8(ascii: ","))
        Value.writeDecimal(Int64(bitPattern: existence.version.rawValue), to: &bytes)
        bytes.append(contentsOf: #"],"f":{"#.utf8)
        for (position, index) in sortedFields.enumerated() {
            let (path, field) = fields[index]
            if position > 0 { bytes.append(UInt8(ascii: ",")) }
            Value.writeJSONString(path.dotted, to: &bytes)
            bytes.append(UInt8(ascii: ":"))
            switch field {
            case .register(let register):
                bytes.append(UInt8(ascii: "["))
                if let value = register.value {
                    value.writeCanonicalJSON(to: &bytes)
                    bytes.append(UInt8(ascii: ","))
                }
                Value.writeDecimal(Int64(bitPattern: register.version.rawValue), to: &bytes)
                bytes.append(UInt8(ascii: "]"))
            case .set(let set):
                set.writeEncoded(to: &bytes)
            }
        }
        bytes.append(contentsOf: "}}".utf8)
    }
}

extension DocumentDelta {
    /// Appends the canonical JSON of `encoded`.
    public func writeEncoded(to bytes: inout [UInt8]) {
        var first = true
        // The keys are plain ASCII names: written as they are, with their quotes.
        func key(_ quotedName: StaticString) {
            bytes.append(first ? UInt8(ascii: "{") : UInt8(ascii: ","))
            first = false
            bytes.append(contentsOf: UnsafeBufferPointer(start: quotedName.utf8Start, count: quotedName.utf8CodeUnitCount))
            bytes.append(UInt8(ascii: ":"))
        }
        func writeVersion(_ version: Version) {
            Value.writeDecimal(Int64(bitPattern: version.rawValue), to: &bytes)
        }
        func write(_ path: FieldPath, _ assignment: Assignment) {
            Value.writeJSONString(path.dotted, to: &bytes)
            bytes.append(contentsOf: ":[".utf8)
            assignment.value.writeCanonicalJSON(to: &bytes)
            bytes.append(UInt8(ascii: ","))
            writeVersion(assignment.base)
            bytes.append(UInt8(ascii: "]"))
        }
        func writeSorted(_ entries: [(key: FieldPath, value: Assignment)]) {
            bytes.append(UInt8(ascii: "{"))
            for (index, (path, assignment)) in entries.sorted(by: { $0.key < $1.key }).enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                write(path, assignment)
            }
            bytes.append(UInt8(ascii: "}"))
        }
        let hasServerTimestamps = self.hasServerTimestamps
        // Keys in canonical order: assignments, create, createIfMissing, delete, fieldRemovals,
        // increments, removals, serverTimestamps, setChanges.
        if hasServerTimestamps {
            let values = assignments.filter { !$0.value.isServerTimestamp }
            if !values.isEmpty {
                key(#""assignments""#)
                writeSorted(Array(values))
            }
        } else if !assignments.isEmpty {
            key(#""assignments""#)
            if assignments.count == 1, let (path, assignment) = assignments.first {
                bytes.append(UInt8(ascii: "{"))
                write(path, assignment) // the usual write: nothing to sort
                bytes.append(UInt8(ascii: "}"))
            } else {
                writeSorted(Array(assignments))
            }
        }
        if let create {
            key(#""create""#)
            writeVersion(create)
        }
        if let createIfMissing {
            key(#""createIfMissing""#)
            writeVersion(createIfMissing)
        }
        if let delete {
            key(#""delete""#)
            writeVersion(delete)
        }
        if !fieldRemovals.isEmpty {
            key(#""fieldRemovals""#)
            Version.writeMap(fieldRemovals.sorted { $0.key < $1.key }, to: &bytes)
        }
        if !increments.isEmpty {
            key(#""increments""#)
            bytes.append(UInt8(ascii: "{"))
            for (index, (path, increment)) in increments.sorted(by: { $0.key < $1.key }).enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                write(path, Assignment(value: increment.amount, base: increment.base))
            }
            bytes.append(UInt8(ascii: "}"))
        }
        if !removals.isEmpty {
            key(#""removals""#)
            Version.writeMap(removals.sorted { $0.key < $1.key }, to: &bytes)
        }
        if hasServerTimestamps {
            key(#""serverTimestamps""#)
            writeSorted(Array(assignments.filter(\.value.isServerTimestamp)))
        }
        if !setChanges.isEmpty {
            key(#""setChanges""#)
            bytes.append(UInt8(ascii: "{"))
            for (index, path) in setChanges.keys.sorted().enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                Value.writeJSONString(path.dotted, to: &bytes)
                bytes.append(UInt8(ascii: ":"))
                let change = setChanges[path] ?? SetChange(base: .zero)
                Value.map([
                    "add": .array(ObservedRemoveSet.canonicallySorted(change.adds)),
                    "remove": .array(ObservedRemoveSet.canonicallySorted(change.removes)),
                    "base": change.base.encoded,
                ]).writeCanonicalJSON(to: &bytes)
            }
            bytes.append(UInt8(ascii: "}"))
        }
        if first { bytes.append(UInt8(ascii: "{")) }
        bytes.append(UInt8(ascii: "}"))
    }
}

// The stored form of a confirmed state beside its view: the view already holds every live value,
// so the state keeps only what the view cannot say (versions, tombstones, set elements' adds). A
// state the view cannot carry (a deleted document, which keeps its fields but has no view; or a
// malformed one) is stored whole, in the compact form.

extension DocumentState {
    /// Whether `document` holds every live register's value at its own path: no register holds a
    /// non-empty map, and no live field lies under another.
    var isCarriedByView: Bool {
        guard existence.exists else { return false }
        for (path, field) in fields where field.isLive {
            if case .register(let register) = field, case .map(let entries)? = register.value, !entries.isEmpty { return false }
            if isFlat { continue } // no field can lie under another
            var prefix = path
            while let parent = prefix.parent, !parent.isRoot {
                if fields[parent]?.isLive == true { return false }
                prefix = parent
            }
        }
        return true
    }

    /// Appends what the view does not carry: `{"e": [1, version], "r": {path: version},
    /// "s": {path: {"s": [[element, addedAt], ...], "v": version}}, "t": {path: version}}` (live
    /// registers, sets, removed fields), or the whole compact form when the view cannot carry it.
    public func writeVersions(to bytes: inout [UInt8]) {
        writeVersions(to: &bytes, sortedFields: sortedFields)
    }

    /// `writeVersions(to:)`'s bytes and `documentJSON`, from one sort of the fields: the device
    /// store writes both for every document it saves.
    public var storedForms: (versions: [UInt8], view: String?) {
        let sorted = sortedFields
        var versions: [UInt8] = []
        versions.reserveCapacity(24 + 16 * fields.count)
        writeVersions(to: &versions, sortedFields: sorted)
        return (versions, documentJSON(sortedFields: sorted))
    }

    /// The positions of the fields in path order, the order of every canonical map of them.
    /// (Positions, not entries: sorting entries would copy, and retain, every value.)
    var sortedFields: [Dictionary<FieldPath, Field>.Index] { fields.keys.indices.sorted { fields.keys[$0] < fields.keys[$1] } }

    private func writeVersions(to bytes: inout [UInt8], sortedFields: [Dictionary<FieldPath, Field>.Index]) {
        guard isCarriedByView else {
            writeEncoded(to: &bytes, sortedFields: sortedFields)
            return
        }
        // Keys in canonical order: d, e, r, s, t (empty maps left out); each map's paths in the
        // fields' sorted order. Live registers at the default version `d` are not listed.
        let common = commonRegisterVersion
        Self.writeVersionsOpening(common: common, existence: existence.version, to: &bytes)
        for part in StoredPart.allCases { write(part, sortedFields, besides: common, to: &bytes) }
        bytes.append(UInt8(ascii: "}"))
    }

    /// `{"d":common,"e":[1,existence]` (no `d` without a common version): the stored versions'
    /// opening, before the maps of `StoredPart`.
    @inline(__always)
    static func writeVersionsOpening(common: Version?, existence: Version, to bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "{"))
        if let common {
            bytes.append(contentsOf: #""d":"#.utf8)
            Value.writeDecimal(Int64(bitPattern: common.rawValue), to: &bytes)
            bytes.append(UInt8(ascii: ","))
        }
        bytes.append(contentsOf: #""e":[1,"#.utf8)
        Value.writeDecimal(Int64(bitPattern: existence.rawValue), to: &bytes)
        bytes.append(UInt8(ascii: "]"))
    }

    /// The version most live registers hold (the smallest of the most frequent), which the stored
    /// form leaves unsaid for each of them: a document written at once has one version throughout.
    private var commonRegisterVersion: Version? {
        Self.mostCommon { visit in
            for case .register(let register) in fields.values where register.value != nil {
                guard visit(register.version) else { return }
            }
        }
    }

    /// The most frequent of the versions `forEach` gives (it stops when its visitor returns
    /// `false`), the smallest of those equally frequent; `nil` for none.
    @inline(__always)
    static func mostCommon(_ forEach: ((Version) -> Bool) -> Void) -> Version? {
        // Mostly one version: found without counting (and without a copy of the versions).
        var only: Version?
        var isOnly = true
        forEach { version in
            if only == nil { only = version } else if only != version { isOnly = false }
            return isOnly
        }
        if isOnly { return only }
        var counts: [Version: Int] = [:]
        forEach { version in
            counts[version, default: 0] += 1
            return true
        }
        return counts.max { $0.value < $1.value || ($0.value == $1.value && $0.key > $1.key) }?.key
    }

    /// The maps of the stored form after `e`, in canonical order.
    private enum StoredPart: CaseIterable {
        /// `r`: live registers off the default version, with their versions.
        case registers
        /// `s`: sets, whole.
        case sets
        /// `t`: removed fields, with their versions.
        case tombstones

        var key: String {
            switch self {
            case .registers: "r"
            case .sets: "s"
            case .tombstones: "t"
            }
        }
    }

    /// Appends `,"key":{path: entry, ...}` for the fields of `part`, nothing when there are none.
    private func write(
        _ part: StoredPart, _ sortedFields: [Dictionary<FieldPath, Field>.Index], besides common: Version?, to bytes: inout [UInt8]
    ) {
        var isFirst = true
        for index in sortedFields {
            let (path, field) = fields[index]
            switch (part, field) {
            case (.registers, .register(let register)) where register.value != nil && register.version != common: break
            case (.sets, .set): break
            case (.tombstones, .register(let register)) where register.value == nil: break
            default: continue
            }
            if isFirst {
                bytes.append(UInt8(ascii: ","))
                Value.writeJSONString(part.key, to: &bytes)
                bytes.append(contentsOf: ":{".utf8)
            } else {
                bytes.append(UInt8(ascii: ","))
            }
            isFirst = false
            Value.writeJSONString(path.dotted, to: &bytes)
            bytes.append(UInt8(ascii: ":"))
            switch field {
            case .register(let register): Value.writeDecimal(Int64(bitPattern: register.version.rawValue), to: &bytes)
            case .set(let set): set.writeEncoded(to: &bytes)
            }
        }
        if !isFirst { bytes.append(UInt8(ascii: "}")) }
    }

    /// Reads a state stored with `writeVersions(to:)` beside `view`, the document it shows.
    ///
    /// - Throws: `ValueError` (`malformedJSON`, naming the field) when the two do not fit.
    public init(versions: Value, view: Value?) throws(ValueError) {
        guard case .map(let parts) = versions, parts["f"] == nil else {
            try self.init(encoded: versions) // stored whole
            return
        }
        guard let view, case .array(let existenceParts)? = parts["e"], existenceParts.count == 2 else {
            throw ValueError(.malformedJSON, field: "", detail: "stored versions without their view")
        }
        var fields: [FieldPath: Field] = [:]
        for (dotted, version) in parts["r"]?.mapValue ?? [:] {
            let path = try FieldPath(dotted)
            guard let value = view[path] else {
                throw ValueError(.malformedJSON, field: dotted, detail: "the view lacks a stored field")
            }
            fields[path] = .register(Register(value: value, version: try Version(encoded: version, field: dotted)))
        }
        if let common = parts["d"] {
            // Every other value the view shows, but for sets, is a register at the default version.
            let version = try Version(encoded: common, field: "d")
            let sets = parts["s"]?.mapValue ?? [:]
            try Self.visitLeaves(of: view, within: []) { path, value throws(ValueError) in
                if fields[path] == nil, sets[path.dotted] == nil { fields[path] = .register(Register(value: value, version: version)) }
            }
        }
        for (dotted, version) in parts["t"]?.mapValue ?? [:] {
            fields[try FieldPath(dotted)] = .register(Register(value: nil, version: try Version(encoded: version, field: dotted)))
        }
        for (dotted, set) in parts["s"]?.mapValue ?? [:] {
            var elements: [Value: Version] = [:]
            for pair in set.mapValue?["s"]?.arrayValue ?? [] {
                guard case .array(let items) = pair, items.count == 2 else {
                    throw ValueError(.malformedJSON, field: dotted, detail: "not a set element")
                }
                elements[items[0]] = try Version(encoded: items[1], field: dotted)
            }
            fields[try FieldPath(dotted)] = .set(
                ObservedRemoveSet(
                    elements: elements,
                    version: try Version(encoded: set.mapValue?["v"] ?? .null, field: dotted)))
        }
        self.init(existence: Existence(exists: true, version: try Version(encoded: existenceParts[1], field: "e")), fields: fields)
    }

    /// Calls `visit` with each value of `value` at `segments` that is not a non-empty map, and its path.
    private static func visitLeaves(
        of value: Value, within segments: [String], _ visit: (FieldPath, Value) throws(ValueError) -> Void
    ) throws(ValueError) {
        guard case .map(let entries) = value, !entries.isEmpty || segments.isEmpty else {
            guard !segments.isEmpty else { throw ValueError(.malformedJSON, field: "", detail: "a view that is not a document") }
            try visit(try FieldPath(segments: segments), value)
            return
        }
        for (name, entry) in entries { try visitLeaves(of: entry, within: segments + [name], visit) }
    }
}

extension DocumentState {
    /// The canonical JSON of `document` (`nil` when it does not exist), written straight from the
    /// fields without building the document first (but for the rare states `nestedDocumentJSON`
    /// leaves to the `Value` tree).
    public var documentJSON: String? {
        guard exists else { return nil }
        return documentJSON(sortedFields: isFlat ? sortedFields : [])
    }

    /// The document JSON from the fields in path order (`sortedFields`, read only when the state
    /// is flat): nested states go through `nestedDocumentJSON`, or the `Value` tree for the rare
    /// ones it leaves.
    private func documentJSON(sortedFields: [Dictionary<FieldPath, Field>.Index]) -> String? {
        guard exists else { return nil }
        guard isFlat else {
            guard let bytes = nestedDocumentJSON() else { return document?.canonicalJSON }
            return String(decoding: bytes, as: UTF8.self)
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(byteSize + 2 * fields.count + 2)
        bytes.append(UInt8(ascii: "{"))
        var first = true
        for index in sortedFields {
            let (path, field) = fields[index]
            guard field.isLive else { continue }
            if !first { bytes.append(UInt8(ascii: ",")) }
            first = false
            Self.writeMember(path, field, to: &bytes)
        }
        bytes.append(UInt8(ascii: "}"))
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends a flat document's member for a live field: `"path":value`.
    static func writeMember(_ path: FieldPath, _ field: Field, to bytes: inout [UInt8]) {
        Value.writeJSONString(path.dotted, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        switch field {
        case .register(let register): register.value?.writeCanonicalJSON(to: &bytes)
        case .set(let set): Value.array(set.sortedElements).writeCanonicalJSON(to: &bytes)
        }
    }

    /// The canonical JSON of a document with nested fields, written from the fields without a
    /// `Value` tree: sorted segment by segment, the live paths come in the order canonical JSON
    /// writes them. `nil` for a state this does not cover, which the caller builds as a `Value`:
    /// a path that is not ASCII (canonically equivalent names would be one key there), or a live
    /// path within another (a broken state, where the newer field shows).
    func nestedDocumentJSON() -> [UInt8]? {
        var live: [(path: [UInt8], field: Field)] = []
        live.reserveCapacity(fields.count)
        for (path, field) in fields where field.isLive {
            let bytes = Array(path.dotted.utf8)
            guard bytes.allSatisfy({ $0 < 0x80 }) else { return nil }
            live.append((bytes, field))
        }
        live.sort { Self.precedesSegmentBySegment($0.path, $1.path) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(byteSize + 4 * live.count + 2)
        bytes.append(UInt8(ascii: "{"))
        var open: [ArraySlice<UInt8>] = [] // the maps open below the root, outermost first
        var previous: [ArraySlice<UInt8>] = []
        func writeKey(_ segment: ArraySlice<UInt8>) {
            // After a value or a closed map, a comma; right after an opened map, none.
            if bytes.last != UInt8(ascii: "{") { bytes.append(UInt8(ascii: ",")) }
            Value.writeJSONString(String(decoding: segment, as: UTF8.self), to: &bytes)
            bytes.append(UInt8(ascii: ":"))
        }
        for (path, field) in live {
            let segments = path.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
            // Sorted, a path within another comes right after it.
            if !previous.isEmpty, previous.count < segments.count, previous.elementsEqual(segments.prefix(previous.count)) { return nil }
            previous = segments
            var common = 0
            while common < open.count, common < segments.count - 1, open[common].elementsEqual(segments[common]) { common += 1 }
            while open.count > common {
                bytes.append(UInt8(ascii: "}"))
                open.removeLast()
            }
            for segment in segments[common..<(segments.count - 1)] {
                writeKey(segment)
                bytes.append(UInt8(ascii: "{"))
                open.append(segment)
            }
            writeKey(segments[segments.count - 1])
            switch field {
            case .register(let register): (register.value ?? .null).writeCanonicalJSON(to: &bytes)
            case .set(let set): Value.array(set.sortedElements).writeCanonicalJSON(to: &bytes)
            }
        }
        bytes.append(contentsOf: repeatElement(UInt8(ascii: "}"), count: open.count + 1))
        return bytes
    }

    /// Whether ASCII path `left` sorts before `right` segment by segment: a segment that is a
    /// prefix of another comes first (the separator sorts below every other byte).
    private static func precedesSegmentBySegment(_ left: [UInt8], _ right: [UInt8]) -> Bool {
        func rank(_ byte: UInt8) -> UInt8 { byte == UInt8(ascii: ".") ? 0 : byte }
        for (leftByte, rightByte) in zip(left, right) where leftByte != rightByte {
            return rank(leftByte) < rank(rightByte)
        }
        return left.count < right.count
    }
}
