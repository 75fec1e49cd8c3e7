import AbrovaWire

@testable import AbrovaCore

// The push decoder as it was before the one-pass reader (commit 0ddf230), kept as the oracle of the
// differential test: the body parsed whole into a `Value` tree by the parser of that time, then
// walked. One change: where the original walked a dictionary and reported the first wrong key it
// met (whichever its hash order reached first, which varies from run to run), this walks the keys
// in sorted order, so that its answer is repeatable. The new decoder names the smallest key too.
// The same held inside a user's value: `Value.validate`, which both decoders call, named whichever
// wrong key of a map its dictionary's order met first, and the two decoders' equal maps could be
// met in different orders. It now names the smallest key (Validation.swift), the rule this copy
// follows for the delta's own maps.

/// Reads a push body as the tree decoder did.
func legacyPushRequest(body: some Collection<UInt8>, limits: WireLimits = WireLimits()) throws(Refusal) -> PushRequest {
    let value: Value
    do {
        var parser = LegacyJSONParser(bytes: Array(body), maximumDepth: ValueLimits.maximumEncodedDepth)
        value = try parser.parseDocument()
    } catch {
        throw Refusal(error, context: "the body is not valid JSON")
    }
    let parts = try legacyFields(of: value, allowed: ["clientId", "batchSeq", "strategy", "changes"], in: "the push")
    let clientID = try legacyString(parts["clientId"], named: "clientId")
    try checkClientID(clientID)
    guard case .int(let sequence)? = parts["batchSeq"], sequence >= 1 else {
        throw Refusal.invalid("batchSeq must be an integer from 1")
    }
    guard let strategy = ConflictStrategy(rawValue: try legacyString(parts["strategy"], named: "strategy")) else {
        throw Refusal.invalid("strategy must be one of serverWins, clientWins, merge, manual")
    }
    guard case .array(let items)? = parts["changes"] else { throw Refusal.invalid("changes must be an array") }
    guard items.count <= limits.maximumChanges else {
        throw Refusal(
            statusCode: 413, message: "the batch holds \(items.count) changes; the limit is \(limits.maximumChanges) (maximumChanges)")
    }
    var changes: [BatchChange] = []
    changes.reserveCapacity(items.count)
    for (index, item) in items.enumerated() {
        changes.append(try legacyChange(item, at: index))
    }
    // A rule added after the tree decoder, kept by both.
    var ended: Set<Int64> = []
    var current: Int64?
    for (index, change) in changes.enumerated() where change.group != current {
        if let current { ended.insert(current) }
        current = change.group
        if let group = change.group, ended.contains(group) {
            throw Refusal.invalid("changes[\(index)]: the changes of group \(group) must come together in the batch")
        }
    }
    return PushRequest(batch: Batch(clientID: clientID, sequence: sequence, changes: changes), strategy: strategy)
}

private func legacyChange(_ item: Value, at index: Int) throws(Refusal) -> BatchChange {
    let context = "changes[\(index)]"
    if let parts = item.mapValue {
        for owned in ["version", "owner"] where parts[owned] != nil {
            throw Refusal.invalid("\(context): \(owned) is set by the server; a change may not carry it")
        }
    }
    let parts = try legacyFields(of: item, allowed: ["collection", "id", "delta", "strategy", "writes", "group"], in: context)
    let key = DocumentKey(
        collection: try legacyString(parts["collection"], named: "\(context).collection"),
        id: try legacyString(parts["id"], named: "\(context).id"))
    do {
        try key.validate()
    } catch {
        throw Refusal(error, context: context)
    }
    var writes = 1
    if let count = parts["writes"] {
        guard case .int(let number) = count, number >= 1, number <= Int64(Int32.max) else {
            throw Refusal.invalid("\(context).writes must be a positive integer")
        }
        writes = Int(number)
    }
    var strategy: ConflictStrategy?
    if let named = parts["strategy"] {
        guard case .string(let name) = named, let own = ConflictStrategy(rawValue: name) else {
            throw Refusal.invalid("\(context).strategy must be one of serverWins, clientWins, merge, manual")
        }
        strategy = own
    }
    var group: Int64?
    if let named = parts["group"] {
        guard case .int(let number) = named, number >= 1 else { throw Refusal.invalid("\(context).group must be a positive integer") }
        group = number
    }
    guard let encodedDelta = parts["delta"] else { throw Refusal.invalid("\(context).delta is missing") }
    _ = try legacyFields(
        of: encodedDelta,
        allowed: [
            "create", "createIfMissing", "delete", "removals", "fieldRemovals", "assignments", "serverTimestamps", "setChanges",
            "increments",
        ],
        in: "\(context).delta")
    let delta: DocumentDelta
    do {
        delta = try legacyDelta(encoded: encodedDelta)
    } catch {
        throw Refusal(error, context: "\(context) (\(key))")
    }
    guard !delta.isEmpty else { throw Refusal.invalid("\(context) (\(key)) changes nothing") }
    return BatchChange(key: key, delta: delta, writes: writes, strategy: strategy, group: group)
}

/// The entries of a map whose keys are all in `allowed`.
private func legacyFields(of value: Value, allowed: Set<String>, in context: String) throws(Refusal) -> [String: Value] {
    guard case .map(let parts) = value else { throw Refusal.invalid("\(context) must be a JSON object") }
    if let unknown = parts.keys.sorted().first(where: { !allowed.contains($0) }) {
        throw Refusal.invalid(
            "\(context) has an unknown key \"\(unknown.prefix(60))\"; allowed: \(allowed.sorted().joined(separator: ", "))")
    }
    return parts
}

private func legacyString(_ value: Value?, named name: String) throws(Refusal) -> String {
    guard case .string(let text)? = value else { throw Refusal.invalid("\(name) must be a string") }
    return text
}

/// `DocumentDelta(encoded:)`, walking its maps in sorted order.
private func legacyDelta(encoded value: Value) throws(ValueError) -> DocumentDelta {
    guard case .map(let parts) = value else {
        throw ValueError(.malformedJSON, field: "", detail: "a change is not a map")
    }
    var delta = DocumentDelta()
    func paths(_ key: String) throws(ValueError) -> [(FieldPath, Value)] {
        guard let part = parts[key] else { return [] }
        guard case .map(let entries) = part else {
            throw ValueError(.malformedJSON, field: "", detail: "\(key) in a change must be a map")
        }
        var result: [(FieldPath, Value)] = []
        for (dotted, item) in entries.sorted(by: { $0.key < $1.key }) {
            let path = try FieldPath(dotted)
            try path.checkNotRoot()
            result.append((path, item))
        }
        return result
    }
    if let base = parts["create"] { delta.create = try Version(encoded: base, field: "create") }
    // A part added after the tree decoder, checked as the tree decoder checks it.
    if let base = parts["createIfMissing"] { delta.createIfMissing = try Version(encoded: base, field: "createIfMissing") }
    if delta.create != nil, delta.createIfMissing != nil {
        throw ValueError(.malformedJSON, field: "", detail: "a change has create or createIfMissing, not both")
    }
    if let base = parts["delete"] { delta.delete = try Version(encoded: base, field: "delete") }
    for (path, base) in try paths("removals") { delta.removals[path] = try Version(encoded: base, field: path.dotted) }
    for (path, base) in try paths("fieldRemovals") { delta.fieldRemovals[path] = try Version(encoded: base, field: path.dotted) }
    for (path, item) in try paths("assignments") {
        guard case .array(let items) = item, items.count == 2 else {
            throw ValueError(.malformedJSON, field: path.dotted, detail: "an assignment is not [value, base]")
        }
        try items[0].validate(at: path, depth: path.depth)
        delta.assignments[path] = DocumentDelta.Assignment(value: items[0], base: try Version(encoded: items[1], field: path.dotted))
    }
    // A part added after the tree decoder, checked as the tree decoder checks it.
    for (path, item) in try paths("serverTimestamps") {
        guard case .array(let items) = item, items.count == 2, case .timestamp = items[0] else {
            throw ValueError(.malformedJSON, field: path.dotted, detail: "a server timestamp is not [timestamp, base]")
        }
        try items[0].validate(at: path, depth: path.depth)
        let base = try Version(encoded: items[1], field: path.dotted)
        guard delta.assignments[path] == nil else {
            throw ValueError(
                .malformedJSON, field: path.dotted,
                detail: "the change writes \"\(path.dotted)\" both as a value and as a server timestamp; a change writes each place once")
        }
        delta.assignments[path] = DocumentDelta.Assignment(value: items[0], base: base, isServerTimestamp: true)
    }
    for (path, item) in try paths("setChanges") {
        let shape = "a set change is {\"add\": [...], \"remove\": [...], \"base\": version}"
        guard case .map(let change) = item, change["add"].map({ $0.arrayValue != nil }) ?? true,
            change["remove"].map({ $0.arrayValue != nil }) ?? true
        else {
            throw ValueError(.malformedJSON, field: path.dotted, detail: shape)
        }
        if let unknown = change.keys.sorted().first(where: { $0 != "add" && $0 != "remove" && $0 != "base" }) {
            throw ValueError(.malformedJSON, field: path.dotted, detail: "unknown key \"\(unknown.prefix(40))\": \(shape)")
        }
        let adds = change["add"]?.arrayValue ?? []
        let removes = change["remove"]?.arrayValue ?? []
        for element in adds + removes { try element.validate(at: path, depth: path.depth + 1) }
        guard Set(adds).isDisjoint(with: removes) else {
            throw ValueError(.malformedJSON, field: path.dotted, detail: "an element is both added and removed")
        }
        delta.setChanges[path] = DocumentDelta.SetChange(
            adds: Set(adds), removes: Set(removes),
            base: try Version(encoded: item.mapValue?["base"] ?? .null, field: path.dotted))
    }
    // A part added after the tree decoder, checked as the tree decoder checks it.
    for (path, item) in try paths("increments") {
        guard case .array(let items) = item, items.count == 2 else {
            throw ValueError(.malformedJSON, field: path.dotted, detail: "an increment is not [amount, base]")
        }
        switch items[0] {
        case .int: break
        case .double: try items[0].validate(at: path, depth: path.depth)
        default: throw ValueError(.malformedJSON, field: path.dotted, detail: "an increment adds an integer or a double")
        }
        delta.increments[path] = DocumentDelta.Increment(amount: items[0], base: try Version(encoded: items[1], field: path.dotted))
    }
    delta.notePathDepths()
    try delta.checkWritesDoNotOverlap() // a rule added after the tree decoder, kept by both
    return delta
}

/// The JSON parser as it was: recursive descent over bytes, building the whole tree.
struct LegacyJSONParser {
    let bytes: [UInt8]
    let maximumDepth: Int
    var index = 0
    /// The keys from the top to the value being parsed: the dotted path is built only for an
    /// error, not for every key.
    private var keys: [String] = []

    private var path: String { keys.joined(separator: ".") }

    init(bytes: [UInt8], maximumDepth: Int) {
        self.bytes = bytes
        self.maximumDepth = maximumDepth
    }

    mutating func parseDocument() throws(ValueError) -> Value {
        skipWhitespace()
        let value = try parseValue(depth: 0)
        skipWhitespace()
        guard index == bytes.count else { throw malformed("trailing characters") }
        return value
    }

    private func malformed(_ what: String) -> ValueError {
        ValueError(.malformedJSON, field: "", detail: "\(what) at byte \(index)")
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1
            default: return
            }
        }
    }

    private mutating func expect(_ literal: String, _ value: Value) throws(ValueError) -> Value {
        let expected = Array(literal.utf8)
        guard bytes.count - index >= expected.count, Array(bytes[index..<index + expected.count]) == expected else {
            throw malformed("unexpected character")
        }
        index += expected.count
        return value
    }

    private mutating func parseValue(depth: Int) throws(ValueError) -> Value {
        guard index < bytes.count else { throw malformed("unexpected end") }
        switch bytes[index] {
        case UInt8(ascii: "n"): return try expect("null", .null)
        case UInt8(ascii: "t"): return try expect("true", .bool(true))
        case UInt8(ascii: "f"): return try expect("false", .bool(false))
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "["):
            guard depth < maximumDepth else {
                throw ValueError(.tooDeep, field: path, detail: "deeper than \(maximumDepth) levels")
            }
            index += 1
            var elements: [Value] = []
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
            while true {
                skipWhitespace()
                elements.append(try parseValue(depth: depth + 1))
                skipWhitespace()
                guard index < bytes.count else { throw malformed("unexpected end") }
                if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
                throw malformed("expected , or ]")
            }
        case UInt8(ascii: "{"):
            guard depth < maximumDepth else {
                throw ValueError(.tooDeep, field: path, detail: "deeper than \(maximumDepth) levels")
            }
            index += 1
            var entries: [String: Value] = [:]
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") { index += 1; return .map(entries) }
            while true {
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw malformed("expected a key") }
                let key = try parseString()
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw malformed("expected :") }
                index += 1
                skipWhitespace()
                keys.append(key)
                guard entries.updateValue(try parseValue(depth: depth + 1), forKey: key) == nil else {
                    throw ValueError(.malformedJSON, field: path, detail: "duplicate key")
                }
                keys.removeLast()
                skipWhitespace()
                guard index < bytes.count else { throw malformed("unexpected end") }
                if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                if bytes[index] == UInt8(ascii: "}") {
                    index += 1
                    // The JSON forms of timestamps and bytes, which came after this parser.
                    if entries.count == 1, let (key, value) = entries.first, let tagged = Value.tagged(key: key, value: value) {
                        return tagged
                    }
                    return .map(entries)
                }
                throw malformed("expected , or }")
            }
        default:
            return try parseNumber()
        }
    }

    private mutating func parseNumber() throws(ValueError) -> Value {
        let start = index
        var isInteger = true
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        let digitsStart = index
        while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
        guard index > digitsStart else { throw malformed("unexpected character") }
        if bytes[digitsStart] == UInt8(ascii: "0"), index - digitsStart > 1 { throw malformed("leading zero") }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            let fractionStart = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            guard index > fractionStart else { throw malformed("digit expected") }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            let exponentStart = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            guard index > exponentStart else { throw malformed("digit expected") }
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        if isInteger, let int = Int64(text) { return .int(int) }
        guard let double = Double(text), double.isFinite else {
            throw ValueError(.notRepresentable, field: path, detail: "number \(text) does not fit a double")
        }
        return .double(double)
    }

    private mutating func parseHex4() throws(ValueError) -> UInt32 {
        guard bytes.count - index >= 4 else { throw malformed("bad \\u escape") }
        var scalar: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw malformed("bad \\u escape")
            }
            scalar = scalar << 4 | UInt32(digit)
            index += 1
        }
        return scalar
    }

    private mutating func parseString() throws(ValueError) -> String {
        index += 1 // opening quote
        var utf8: [UInt8] = []
        while true {
            guard index < bytes.count else { throw malformed("unterminated string") }
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                // Validating decode: invalid UTF-8 is refused, never repaired.
                guard let string = String(validating: utf8, as: UTF8.self) else {
                    throw ValueError(.invalidUTF8, field: path, detail: "a string is not valid UTF-8")
                }
                return string
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { throw malformed("unterminated string") }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): utf8.append(UInt8(ascii: "\""))
                case UInt8(ascii: "\\"): utf8.append(UInt8(ascii: "\\"))
                case UInt8(ascii: "/"): utf8.append(UInt8(ascii: "/"))
                case UInt8(ascii: "b"): utf8.append(0x08)
                case UInt8(ascii: "f"): utf8.append(0x0C)
                case UInt8(ascii: "n"): utf8.append(0x0A)
                case UInt8(ascii: "r"): utf8.append(0x0D)
                case UInt8(ascii: "t"): utf8.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try parseHex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                            throw ValueError(.invalidUTF8, field: path, detail: "lone surrogate in a string")
                        }
                        index += 2
                        let low = try parseHex4()
                        guard (0xDC00...0xDFFF).contains(low) else {
                            throw ValueError(.invalidUTF8, field: path, detail: "lone surrogate in a string")
                        }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw ValueError(.invalidUTF8, field: path, detail: "lone surrogate in a string")
                    }
                    guard let unicodeScalar = Unicode.Scalar(scalar) else {
                        throw ValueError(.invalidUTF8, field: path, detail: "lone surrogate in a string")
                    }
                    utf8.append(contentsOf: String(Character(unicodeScalar)).utf8)
                default: throw malformed("bad escape")
                }
            case 0..<0x20:
                throw malformed("control character in a string")
            default:
                utf8.append(byte)
                index += 1
            }
        }
    }
}
