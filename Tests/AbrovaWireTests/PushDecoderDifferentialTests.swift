import AbrovaTestSupport
import AbrovaWire
import Testing

@testable import AbrovaCore

/// The one-pass push decoder against the tree decoder it replaced (LegacyPushDecoder.swift), over
/// seeded random bodies: valid ones written from random batches (keys in any order, random
/// whitespace and escapes) and the same broken in the tree (wrong types, missing, extra, renamed,
/// swapped and repeated keys) and in the text (truncated, bytes changed, added or taken out). Both
/// must decode the same request, or refuse with the same status and message. A failure prints its
/// seed and the smallest failing body; replay with ABROVA_PROPERTY_SEED.
@Suite struct PushDecoderDifferentialTests {
    @Test func bothDecodersAgree() async {
        let failure = await Property.check("push decoders agree", cases: 3_000, generate: PushBodyCase.make) { bodyCase in
            bodyCase.disagreement
        }
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
    }

    @Test func bothDecodersAgreeOnTheFixtures() throws {
        for fixture in try WireFixture.loadAll() where fixture.kind == "badPushRequest" || fixture.kind == "pushRequest" {
            var bytes: [UInt8] = []
            if let text = fixture.fields["bodyText"]?.stringValue {
                bytes = Array(text.utf8)
            } else {
                fixture.fields["body"]?.writeCanonicalJSON(to: &bytes)
            }
            let bodyCase = PushBodyCase(body: bytes, limits: WireLimits(), origin: fixture.description)
            #expect(bodyCase.disagreement == nil, "\(fixture)")
        }
    }

    /// Cases the random bodies reach only by luck: the order of checks, and keys that are equal as
    /// Swift strings without being equal bytes.
    @Test(arguments: [
        // A JSON error late in the body wins over a wrong part early in it.
        #"{"batchSeq":0,"changes":[],"clientId":"d","strategy":"merge","x":[1,]}"#,
        #"{"batchSeq":1,"changes":[{"collection":"c","delta":{"create":-1},"id":"i"},{"collection":"c","delta":{"create":0},"id":"i","id":"j"}],"clientId":"d","strategy":"merge"}"#,
        // version and owner before unknown keys; version before owner.
        #"{"batchSeq":1,"changes":[{"a":1,"owner":"x","version":2,"collection":"c","delta":{"create":0},"id":"i"}],"clientId":"d","strategy":"merge"}"#,
        // A path problem in any entry before a base problem in any other.
        #"{"batchSeq":1,"changes":[{"collection":"c","delta":{"removals":{"a":-1,"b.":1}},"id":"i"}],"clientId":"d","strategy":"merge"}"#,
        // Parts in init(encoded:)'s order: setChanges after assignments, whatever the text's order.
        #"{"batchSeq":1,"changes":[{"collection":"c","delta":{"setChanges":{"s":5},"assignments":{"a":[1]}},"id":"i"}],"clientId":"d","strategy":"merge"}"#,
        // Several wrong entries of one map: the smallest key.
        #"{"batchSeq":1,"changes":[{"collection":"c","delta":{"assignments":{"z":[1],"b":[1,-1],"m":7}},"id":"i"}],"clientId":"d","strategy":"merge"}"#,
        // Keys equal as Swift strings: a duplicate, whether or not its path is valid.
        #"{"batchSeq":1,"changes":[{"collection":"c","delta":{"assignments":{"caf\u00e9":[1,0],"cafe\u0301":[2,0]}},"id":"i"}],"clientId":"d","strategy":"merge"}"#,
        #"{"batchSeq":1,"changes":[{"collection":"c","delta":{"removals":{"a;":1,"a\u037e":1}},"id":"i"}],"clientId":"d","strategy":"merge"}"#,
        #"{"batchSeq":1,"changes":[{"collection":"c","delta":{"removals":{"a\u037e":1,"a;":1}},"id":"i"}],"clientId":"d","strategy":"merge"}"#,
        // A `.` before a combining mark is no separator.
        #"{"batchSeq":1,"changes":[{"collection":"c","delta":{"removals":{".\u0301":1,"a..\u0301;":1}},"id":"i"}],"clientId":"d","strategy":"merge"}"#,
        // Too many changes wins over a wrong change before the limit and malformed ones after it.
        #"{"batchSeq":1,"changes":[{"collection":"c","delta":{},"id":"i"},{},{"x":1}],"clientId":"d","strategy":"merge"}"#,
        // A repeated part, each read whole first.
        #"{"batchSeq":1,"changes":[{"collection":"c","delta":{"removals":{"a":1},"removals":{"a":2}},"id":"i"}],"clientId":"d","strategy":"merge"}"#,
        #"{"batchSeq":1,"changes":[{"collection":"c","delta":{"setChanges":{"s":{"add":[1],"base":0,"add":[2]}}},"id":"i"}],"clientId":"d","strategy":"merge"}"#,
        // A set element whose map holds two values too deep for a field (32 levels) but not for
        // the body (40): the smallest key is named, not the first in the text or in a dictionary.
        #"{"batchSeq":1,"changes":[{"collection":"c","delta":{"setChanges":{"a":{"add":\#(String(repeating: "[", count: 31)){"remove":[1],"add":[1]}\#(String(repeating: "]", count: 31)),"base":0}}},"id":"i"}],"clientId":"d","strategy":"merge"}"#,
    ])
    func bothDecodersAgreeOn(_ text: String) {
        let bodyCase = PushBodyCase(body: Array(text.utf8), limits: WireLimits(maximumChanges: 2), origin: "fixed")
        #expect(bodyCase.disagreement == nil)
    }
}

/// A body and the limits it is read under.
struct PushBodyCase: CustomStringConvertible {
    var body: [UInt8]
    var limits: WireLimits
    /// How the body was made.
    var origin: String

    var description: String {
        "\(origin), maximumChanges \(limits.maximumChanges): \(String(decoding: body, as: UTF8.self).debugDescription)"
    }

    /// What the two decoders (and the two parsers under them) disagree on, or `nil`.
    var disagreement: String? {
        let new = Result { () throws(Refusal) in try PushRequest(body: body, limits: limits) }
        let old = Result { () throws(Refusal) in try legacyPushRequest(body: body, limits: limits) }
        switch (new, old) {
        case (.success(let newRequest), .success(let oldRequest)):
            if newRequest != oldRequest || newRequest.body != oldRequest.body { return "decoded differently" }
            let nesting = { (request: PushRequest) in request.batch.changes.map(\.delta.hasNestedPaths) }
            if nesting(newRequest) != nesting(oldRequest) { return "hasNestedPaths differs" }
        case (.failure(let newError), .failure(let oldError)):
            if newError != oldError { return "refused differently: new \(newError), old \(oldError)" }
        case (.success, .failure(let oldError)):
            return "only the old decoder refused it: \(oldError)"
        case (.failure(let newError), .success):
            return "only the new decoder refused it: \(newError)"
        }
        let parsed = Result { () throws(ValueError) in try Value(json: body, maximumDepth: ValueLimits.maximumEncodedDepth) }
        let parsedBefore = Result { () throws(ValueError) in
            var parser = LegacyJSONParser(bytes: body, maximumDepth: ValueLimits.maximumEncodedDepth)
            return try parser.parseDocument()
        }
        return parsed == parsedBefore ? nil : "Value(json:) differs: new \(parsed), old \(parsedBefore)"
    }

    /// A valid body from a random batch, often broken afterwards.
    static func make(_ choices: inout Choices) -> PushBodyCase {
        let (batch, strategy) = RandomBatch.make(&choices)
        var tree = JSONNode(PushRequest(batch: batch, strategy: strategy).body, &choices)
        var origin = ["\(batch.changes.count) changes"]
        var lastSite: [JSONNode.PathStep] = []
        for _ in 0..<choices.element(of: [0, 1, 1, 2, 2, 3, 4, 5]) {
            // Often near the last change, so that one change has several wrong parts.
            let near = choices.chance(oneIn: 3) ? [] : Array(lastSite.prefix(2))
            if let mutation = tree.mutate(&choices, near: near) {
                origin.append(mutation.name)
                lastSite = mutation.path
            }
        }
        var body: [UInt8] = []
        tree.write(to: &body, &choices)
        if choices.chance(oneIn: 3) {
            origin.append(corrupt(&body, &choices))
        }
        let limits = choices.chance(oneIn: 5) ? WireLimits(maximumChanges: choices.int(in: 1...3)) : WireLimits()
        return PushBodyCase(body: body, limits: limits, origin: origin.joined(separator: ", "))
    }

    private static let interestingBytes: [UInt8] = Array(#""{}[],:\.;0-1eau "#.utf8) + [0x00, 0x1F, 0x7F, 0x80, 0xC3, 0xED, 0xFF]

    /// Breaks the text; returns what it did.
    private static func corrupt(_ body: inout [UInt8], _ choices: inout Choices) -> String {
        let position = choices.below(body.count + 1)
        switch choices.below(5) {
        case 0:
            body.removeSubrange(position...)
            return "truncated at \(position)"
        case 1 where position < body.count:
            body[position] = choices.element(of: interestingBytes)
            return "byte \(position) changed"
        case 2:
            body.insert(choices.element(of: interestingBytes), at: position)
            return "byte inserted at \(position)"
        case 3 where position < body.count:
            body.remove(at: position)
            return "byte \(position) taken out"
        default:
            body.append(contentsOf: choices.element(of: [" ", "x", "{}", "\n\t", "]"]).utf8)
            return "text appended"
        }
    }
}

/// Random batches, made with the SDK's builders, with names and values that need escapes.
enum RandomBatch {
    static let names = ["a", "b", "qty", "café", "größe", "😀", "x y", "Zeta", "ｚ", "K", "a/b"]
    static let strings = ["", "milk", "line\nbreak", "quote\"back\\slash", "\u{1}\u{1F}", "☃", "𝄞", "Crème brûlée", "tab\t", "<&>"]

    static func make(_ choices: inout Choices) -> (Batch, ConflictStrategy) {
        let changes = (0..<choices.int(in: 1...4)).map { _ in
            BatchChange(
                key: DocumentKey(
                    collection: choices.element(of: ["carts", "todos", "c", "Col_-9"]),
                    id: choices.element(of: ["c1", "t-9", "p:oslo@2026", "...", "x=y+z~"])),
                delta: delta(&choices), writes: choices.int(in: 1...3))
        }
        let clientID = choices.element(of: ["4c1b9e0e-58f4-4d0c-9a50-6a3c8c1f0a77", "device-A_01", "d"])
        let batch = Batch(clientID: clientID, sequence: Int64(choices.int(in: 1...1_000)), changes: changes)
        return (batch, choices.element(of: ConflictStrategy.allCases))
    }

    /// One to three operations composed: creates, merging sets, updates (nested paths, sets) and deletes.
    static func delta(_ choices: inout Choices) -> DocumentDelta {
        var delta = DocumentDelta()
        for _ in 0..<choices.int(in: 1...3) {
            let base = Version(UInt64(choices.below(20)))
            let operation: DocumentDelta?
            switch choices.below(7) {
            case 0:
                var data: [String: Value] = [:]
                for _ in 0..<choices.below(4) { data[choices.element(of: names)] = value(&choices, depth: 0) }
                operation = try? DocumentDelta.create(data, base: base)
            case 1:
                operation = DocumentDelta.delete(base: base)
            case 2:
                var data: [String: Value] = [:]
                for _ in 0..<choices.below(4) { data[choices.element(of: names)] = value(&choices, depth: 0) }
                operation = try? DocumentDelta.setMerging(data, base: base, documentExists: choices.chance(oneIn: 2))
            default:
                var set: [FieldPath: Value] = [:]
                var remove: [FieldPath] = []
                var add: [FieldPath: [Value]] = [:]
                var removeElements: [FieldPath: [Value]] = [:]
                var stamps: [FieldPath: Timestamp] = [:]
                var increments: [FieldPath: Value] = [:]
                for _ in 0..<choices.int(in: 1...4) {
                    switch choices.below(6) {
                    case 0: set[path(&choices)] = value(&choices, depth: 0)
                    case 1: remove.append(path(&choices))
                    case 2: add[path(&choices)] = [value(&choices, depth: 1)]
                    case 3: stamps[path(&choices)] = Timestamp(microsecondsSince1970: Int64(choices.below(1 << 20)))
                    case 4: increments[path(&choices)] = choices.chance(oneIn: 3) ? .double(0.25) : .int(Int64(choices.int(in: -9...9)))
                    default: removeElements[path(&choices)] = [value(&choices, depth: 1)]
                    }
                }
                operation = try? DocumentDelta.update(
                    set: set, remove: remove, setAdd: add, setRemove: removeElements, serverTimestamps: stamps, increments: increments,
                    base: base)
            }
            if let operation { delta.compose(with: operation) }
        }
        return delta
    }

    static func path(_ choices: inout Choices) -> FieldPath {
        let segments = (0..<choices.int(in: 1...2)).map { _ in choices.element(of: names) }
        return (try? FieldPath(segments: segments)) ?? FieldPath.root
    }

    static func value(_ choices: inout Choices, depth: Int) -> Value {
        switch choices.below(depth < 2 ? 10 : 8) {
        case 0: return .int(Int64(choices.below(5)))
        case 1: return .int(choices.element(of: [-1, Int64.max, Int64.min, 1 << 53, 1_700_000_001]))
        case 2: return .double(choices.element(of: [0.1, -0.0, 2.5, 1e300, .leastNonzeroMagnitude, -1.5, 1e20]))
        case 3, 4: return .string(choices.element(of: strings))
        case 5: return .bool(choices.below(2) == 1)
        case 6: return .null
        case 7: return .array([])
        case 8: return .array((0..<choices.int(in: 1...2)).map { _ in value(&choices, depth: depth + 1) })
        default: return .map([choices.element(of: names): value(&choices, depth: depth + 1)])
        }
    }
}

/// A JSON text as a tree that keeps the order of keys and may repeat them; scalars are kept as
/// their text, so that the tree can hold what no `Value` can (a lone surrogate, a number too large).
indirect enum JSONNode {
    case text(String)
    case string(String)
    case array([JSONNode])
    case object([(key: String, value: JSONNode)])

    /// The tree of a valid JSON text, keys in a random order.
    init(_ json: [UInt8], _ choices: inout Choices) {
        let value = (try? Value(json: json, maximumDepth: 64)) ?? .null
        self.init(value, &choices)
    }

    init(_ value: Value, _ choices: inout Choices) {
        switch value {
        case .string(let string): self = .string(string)
        case .array(let elements): self = .array(elements.map { JSONNode($0, &choices) })
        case .map(let entries):
            // Sorted first: a dictionary's order varies from run to run, the shuffle must not.
            let sorted = entries.sorted { $0.key < $1.key }
            self = .object(choices.shuffled(sorted).map { ($0.key, JSONNode($0.value, &choices)) })
        default: self = .text(value.canonicalJSON)
        }
    }

    // MARK: Writing

    /// Appends the text, with random whitespace and escapes.
    func write(to bytes: inout [UInt8], _ choices: inout Choices) {
        switch self {
        case .text(let text): bytes.append(contentsOf: text.utf8)
        case .string(let string): Self.writeString(string, to: &bytes, &choices)
        case .array(let elements):
            bytes.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                Self.writeSpace(to: &bytes, &choices)
                element.write(to: &bytes, &choices)
            }
            Self.writeSpace(to: &bytes, &choices)
            bytes.append(UInt8(ascii: "]"))
        case .object(let entries):
            bytes.append(UInt8(ascii: "{"))
            for (index, entry) in entries.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                Self.writeSpace(to: &bytes, &choices)
                Self.writeString(entry.key, to: &bytes, &choices)
                Self.writeSpace(to: &bytes, &choices)
                bytes.append(UInt8(ascii: ":"))
                Self.writeSpace(to: &bytes, &choices)
                entry.value.write(to: &bytes, &choices)
            }
            Self.writeSpace(to: &bytes, &choices)
            bytes.append(UInt8(ascii: "}"))
        }
    }

    private static func writeSpace(to bytes: inout [UInt8], _ choices: inout Choices) {
        if choices.chance(oneIn: 6) { bytes.append(contentsOf: choices.element(of: [" ", "\n", "\t ", "\r\n  "]).utf8) }
    }

    /// A JSON string; some characters escaped that need not be (`\u` escapes, surrogate pairs, `\/`).
    private static func writeString(_ string: String, to bytes: inout [UInt8], _ choices: inout Choices) {
        guard choices.chance(oneIn: 4) else {
            Value.writeJSONString(string, to: &bytes)
            return
        }
        bytes.append(UInt8(ascii: "\""))
        for scalar in string.unicodeScalars {
            if scalar == "/" && choices.chance(oneIn: 2) {
                bytes.append(contentsOf: #"\/"#.utf8)
            } else if scalar.value < 0x20 || scalar == "\"" || scalar == "\\" || choices.chance(oneIn: 3) {
                for unit in String(scalar).utf16 {
                    let hex = String(unit, radix: 16)
                    bytes.append(contentsOf: ("\\u" + String(repeating: "0", count: 4 - hex.count) + hex).utf8)
                }
            } else {
                bytes.append(contentsOf: String(scalar).utf8)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    // MARK: Breaking

    struct Mutation {
        var name: String
        var path: [PathStep]
    }

    static let keyPool = [
        "version", "owner", "create", "createIfMissing", "serverTimestamps", "delete", "assignments", "removals", "fieldRemovals",
        "setChanges", "increments", "group",
        "add", "remove", "base", "collection", "id", "delta", "writes", "clientId", "batchSeq", "strategy",
        "changes", "zzz", "Extra", "é", "\u{212A}", "a;b", "", "a.b", "x.\u{301}", ".", "a..b", "qty", "cafe\u{301}",
        "a\u{37E}", "a;", "tab\there", "\u{7F}",
    ]

    static func randomNode(_ choices: inout Choices) -> JSONNode {
        switch choices.below(14) {
        case 0:
            return .text(
                choices.element(of: [
                    "-1", "0", "1", "7", "1.5", "1.0", "-0", "2147483648", "2147483647", "99999999999999999999",
                    "9223372036854775807", "-9223372036854775809", "1e400", "1e-400", "true", "false", "null",
                ]))
        case 1: return .string(choices.element(of: ["x", "", "serverWins", "merge", "carts", "bad name", "..", "c1", "ok"]))
        case 2: return .text(choices.element(of: [#""\ud800""#, #""\udc00x""#, #""a\ud83d\ude00b""#, #""\u00e9""#]))
        case 3: return .array([])
        case 4: return .object([])
        case 5: return .array([.text("1")])
        case 6: return .array([.text("1"), .text("2")])
        case 7: return .array([.string("x"), .text("-1")])
        case 8: return .object([(choices.element(of: keyPool), .text("1"))])
        case 9: return .object([("add", .array([.text("1")])), ("remove", .array([.text("1")])), ("base", .text("0"))])
        case 10: return .array([nested(choices.int(in: 28...40)), .text("0")])
        case 11: return nested(choices.int(in: 30...42))
        case 12: return .object([("a", .array([.text("1"), .text("0")]))])
        default: return .object([("k", nested(choices.int(in: 30...34)))])
        }
    }

    /// Arrays nested `levels` deep.
    static func nested(_ levels: Int) -> JSONNode {
        (0..<levels).reduce(JSONNode.array([])) { inner, _ in .array([inner]) }
    }

    /// Applies one random change to a random node under `near`, when it has some; `nil` when it
    /// did nothing.
    mutating func mutate(_ choices: inout Choices, near: [PathStep]) -> Mutation? {
        let allSites = sites(under: [])
        let nearSites = allSites.filter { $0.starts(with: near) { $0.description == $1.description } }
        let sites = nearSites.isEmpty ? allSites : nearSites
        guard !sites.isEmpty else { return nil }
        let site = choices.element(of: sites)
        var name = ""
        let changed = update(at: site[...]) { node in
            name = node.mutateHere(&choices)
        }
        guard changed else { return nil }
        return Mutation(name: "\(name) at \(site.map(\.description).joined(separator: "/"))", path: site)
    }

    /// Changes this node; returns what it did.
    private mutating func mutateHere(_ choices: inout Choices) -> String {
        switch (self, choices.below(8)) {
        case (.object(var entries), 0) where !entries.isEmpty:
            entries.remove(at: choices.below(entries.count))
            self = .object(entries)
            return "key removed"
        case (.object(var entries), 1):
            entries.insert((choices.element(of: Self.keyPool), Self.randomNode(&choices)), at: choices.below(entries.count + 1))
            self = .object(entries)
            return "key added"
        case (.object(var entries), 2) where !entries.isEmpty:
            entries[choices.below(entries.count)].key = choices.element(of: Self.keyPool)
            self = .object(entries)
            return "key renamed"
        case (.object(var entries), 3) where entries.count >= 2:
            let first = choices.below(entries.count)
            let second = choices.below(entries.count)
            (entries[first].key, entries[second].key) = (entries[second].key, entries[first].key)
            self = .object(entries)
            return "keys swapped"
        case (.object(var entries), 4) where !entries.isEmpty:
            var entry = entries[choices.below(entries.count)]
            if choices.chance(oneIn: 2) { entry.value = Self.randomNode(&choices) }
            entries.insert(entry, at: choices.below(entries.count + 1))
            self = .object(entries)
            return "key repeated"
        case (_, 5):
            self = choices.chance(oneIn: 2) ? .array([self]) : .object([(choices.element(of: Self.keyPool), self)])
            return "wrapped"
        default:
            self = Self.randomNode(&choices)
            return "replaced"
        }
    }

    enum PathStep: CustomStringConvertible {
        case key(Int, String)
        case index(Int)
        var description: String {
            switch self {
            case .key(_, let key): key
            case .index(let index): "\(index)"
            }
        }
    }

    /// The path of every node. A user's value (an assigned value, a set element) may be changed
    /// several times, and so hold several wrong map keys: `Value.validate` names the smallest.
    private func sites(under path: [PathStep]) -> [[PathStep]] {
        var sites = [path]
        switch self {
        case .array(let elements):
            for (index, element) in elements.enumerated() {
                sites += element.sites(under: path + [.index(index)])
            }
        case .object(let entries):
            for (index, entry) in entries.enumerated() {
                sites += entry.value.sites(under: path + [.key(index, entry.key)])
            }
        default:
            break
        }
        return sites
    }

    /// Applies `change` to the node at `path`; `false` when there is none.
    private mutating func update(at path: ArraySlice<PathStep>, _ change: (inout JSONNode) -> Void) -> Bool {
        guard let step = path.first else {
            change(&self)
            return true
        }
        switch (self, step) {
        case (.array(var elements), .index(let index)) where index < elements.count:
            let changed = elements[index].update(at: path.dropFirst(), change)
            self = .array(elements)
            return changed
        case (.object(var entries), .key(let index, _)) where index < entries.count:
            let changed = entries[index].value.update(at: path.dropFirst(), change)
            self = .object(entries)
            return changed
        default:
            return false
        }
    }
}
