import AbrovaCore
import AbrovaTestSupport
import Foundation
import Testing

@Suite struct ValueTests {
    @Test func literalsBuildValues() async {
        let item: Value = ["task": "Buy milk", "qty": 2, "price": 1.5, "done": false, "tags": ["a"], "note": .null]
        #expect(item.mapValue?["task"] == .string("Buy milk"))
        #expect(item.mapValue?["qty"] == .int(2))
        #expect(item.mapValue?["price"] == .double(1.5))
        #expect(item.mapValue?["tags"] == .array([.string("a")]))
    }

    @Test func canonicalEncodingSortsKeysAndKeepsIntegersApartFromDoubles() async {
        let value: Value = ["b": 1, "a": 1.0, "é": "x\"\n\u{1}", "A": [true, .null]]
        #expect(value.canonicalJSON == #"{"A":[true,null],"a":1.0,"b":1,"é":"x\"\n\u0001"}"#)
        #expect(Value.int(1).canonicalJSON != Value.double(1).canonicalJSON)
        #expect(Value.double(-0.0).canonicalJSON == Value.double(0).canonicalJSON)
    }

    @Test func parserRoundTripsTheCanonicalEncoding() throws {
        let values: [Value] = [
            .null, true, 0, -42, .int(Int64.max), .int(Int64.min), 0.1, 1e300, -2.5e-7, "", "snow ☃ and 𝄞",
            ["nested": ["deeper": [1, 2, ["x": "y"]]]], [],
        ]
        for value in values {
            #expect(try Value(json: value.canonicalJSON) == value, "\(value)")
        }
        #expect(
            try Value(json: #" { "a" : [ 1 , 2.0e1 , "\u00e9\ud834\udd1e" ] } "#)
                == ["a": [1, 20.0, "é𝄞"]])
    }

    @Test func theDirectParserKeepsIntegralDoublesApartFromIntegers() throws {
        let value: Value = ["double": 2.0, "int": 2]
        #expect(try Value(json: value.canonicalJSON) == value)
        #expect(value.canonicalJSON == #"{"double":2.0,"int":2}"#)
    }

    @Test func codableMatchesTheValue() throws {
        let value: Value = ["task": "Buy milk", "qty": 2, "price": 1.5, "tags": ["a", "b"]]
        let data = try JSONEncoder().encode(value)
        #expect(try JSONDecoder().decode(Value.self, from: data) == value)
        #expect(try Value(json: data) == value)
    }

    @Test(arguments: [
        (#"{"a": 1"#, ValueError.Code.malformedJSON),
        (#"{"a": 1, "a": 2}"#, .malformedJSON),
        (#"[01]"#, .malformedJSON),
        (#"1e999"#, .notRepresentable),
        (#""\ud800""#, .invalidUTF8),
        (#""\udc00x""#, .invalidUTF8),
        ("\"tab\there\"", .malformedJSON),
        ("nul", .malformedJSON),
    ])
    func parserRefusesBadJSON(text: String, code: ValueError.Code) {
        #expect(throws: ValueError.self) { try Value(json: text) }
        do {
            _ = try Value(json: text)
        } catch {
            #expect(error.code == code, "\(text): \(error)")
            #expect(error.reason == .invalid)
        }
    }

    @Test func parserRefusesInvalidUTF8() async {
        let bytes: [UInt8] = Array(#"{"a": ""#.utf8) + [0xC3, 0x28] + Array(#""}"#.utf8)
        #expect(throws: ValueError(.invalidUTF8, field: "a", detail: "a string is not valid UTF-8")) {
            try Value(json: bytes)
        }
        // The field is named however deep it lies.
        #expect(throws: ValueError(.invalidUTF8, field: "b.c", detail: "lone surrogate in a string")) {
            try Value(json: #"{"a": 1, "b": {"c": ["\ud800"]}}"#)
        }
    }

    @Test func parserRefusesNestingDeeperThanTheLimit() async {
        let deep = String(repeating: "[", count: ValueLimits.maximumDepth + 1) + String(repeating: "]", count: ValueLimits.maximumDepth + 1)
        #expect(throws: ValueError.self) { try Value(json: deep) }
        let fine = String(repeating: "[", count: ValueLimits.maximumDepth) + String(repeating: "]", count: ValueLimits.maximumDepth)
        #expect(throws: Never.self) { try Value(json: fine) }
    }
}

@Suite struct BadInputTests {
    func error(_ body: () throws -> Void) -> ValueError? {
        do {
            try body()
            return nil
        } catch {
            return error as? ValueError
        }
    }

    @Test func nanAndInfinityAreRefusedNamingTheField() async {
        let nan = error { _ = try DocumentDelta.create(["price": .double(.nan)], base: .zero) }
        #expect(nan?.code == .notRepresentable)
        #expect(nan?.field == "price")
        let infinity = error {
            _ = try DocumentDelta.update(set: [try FieldPath("item.price"): ["amount": .double(.infinity)]], base: .zero)
        }
        #expect(infinity?.code == .notRepresentable)
        #expect(infinity?.field == "item.price.amount")
        let inSet = error { _ = try DocumentDelta.update(setAdd: [try FieldPath("tags"): [.double(-.infinity)]], base: .zero) }
        #expect(inSet?.field == "tags")
    }

    @Test func ofSeveralWrongFieldsTheSmallestKeyIsNamed() throws {
        // Equal maps kept side by side are different dictionaries, most in different orders (a
        // table's hash seed comes from its address); the answer may not differ.
        let values: [Value] = (0..<50).map { _ in
            ["z": ["b": .double(.nan), "a": ["y": .double(.nan), "x.": 1]], "m": .double(.infinity)]
        }
        for value in values {
            #expect(error { try value.validate(at: try FieldPath("f"), depth: 1) }?.field == "f.m")
            #expect(error { try value.mapValue?["z"]?.validate(at: try FieldPath("f.z"), depth: 2) }?.field == "f.z.a.x.")
        }
    }

    @Test func fieldNamesWithTheSeparatorOrEmptySegmentsAreRefused() async {
        let dotted = error { _ = try DocumentDelta.create(["a.b": 1], base: .zero) }
        #expect(dotted?.code == .invalidFieldName)
        #expect(dotted?.field == "a.b")
        let nestedDotted = error { _ = try DocumentDelta.create(["address": ["zip.code": 1]], base: .zero) }
        #expect(nestedDotted?.field == "address.zip.code")
        let empty = error { _ = try DocumentDelta.create(["": 1], base: .zero) }
        #expect(empty?.code == .invalidFieldName)
        for bad in ["a..b", ".a", "a.", "."] {
            #expect(error { _ = try FieldPath(bad) }?.code == .invalidFieldName, "\(bad)")
        }
        #expect(error { _ = try DocumentDelta.update(remove: [.root], base: .zero) }?.code == .invalidFieldName)
    }

    @Test func fieldNamesWithQuotesSemicolonsBackslashesOrControlCharactersAreRefused() async {
        for bad in ["name'", "a\"b", "x;DROP", "back\\slash", "tick`", "tab\t", "nul\u{0}"] {
            #expect(error { _ = try FieldPath(bad) }?.code == .invalidFieldName, "\(bad)")
            #expect(error { _ = try FieldPath(segments: ["ok", bad]) }?.code == .invalidFieldName, "\(bad)")
            let nested = error { _ = try DocumentDelta.create(["address": [bad: 1]], base: .zero) }
            #expect(nested?.code == .invalidFieldName && nested?.field == "address.\(bad)", "\(bad)")
        }
        for good in ["first name", "Content-Type", "ünïcode", "price$", "a-b_c"] {
            #expect(error { _ = try FieldPath(good) } == nil, "\(good)")
        }
    }

    /// `FieldPath(_:)` checks ASCII text in one pass over its bytes: the same answer as splitting it
    /// by characters, as it did before (and still does for other text, where a `.` followed by a
    /// combining mark is no separator).
    @Test func pathsAreCheckedAsSplittingThemWould() async {
        func splitting(_ dotted: String) -> Result<String, ValueError> {
            Result { () throws(ValueError) in
                if !dotted.isEmpty {
                    for segment in dotted.split(separator: ".", omittingEmptySubsequences: false) {
                        if segment.isEmpty { throw ValueError(.invalidFieldName, field: dotted, detail: "a path segment is empty") }
                        try FieldPath.checkName(segment, at: dotted)
                    }
                }
                return dotted
            }
        }
        let pieces = ["a", "b", ".", ".", ";", "\t", "\"", "\u{301}", "é", "K", " ", "\u{7F}"]
        let failure = await Property.check(
            "paths checked as splitting would",
            generate: { choices in
                (0..<choices.below(7)).map { _ in choices.element(of: pieces) }.joined()
            },
            property: { dotted in
                let answer = Result { () throws(ValueError) in try FieldPath(dotted).dotted }
                return answer == splitting(dotted) ? nil : "\(answer) != \(splitting(dotted))"
            })
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
    }

    /// A path keeps its string's hash: two paths are equal, and hash alike, exactly when their
    /// dotted strings are equal (so canonically equivalent spellings are one path, as before).
    @Test func pathsAreEqualAndHashAlikeExactlyWhenTheirStringsAre() async {
        let pieces = ["a", "b", ".", "e\u{301}", "é", "K", "\u{212A}", "qty", "items"]
        let failure = await Property.check(
            "paths equal and hash alike as their strings",
            generate: { choices in
                let one = (1...choices.below(4) + 1).map { _ in choices.element(of: pieces) }.joined()
                let other = choices.below(3) == 0 ? one : (1...choices.below(4) + 1).map { _ in choices.element(of: pieces) }.joined()
                return (one, other)
            },
            property: { pair in
                let (one, other) = pair
                guard let left = try? FieldPath(one), let right = try? FieldPath(other) else { return nil }
                if (left == right) != (one == other) { return "== differs from the strings' for \(one) and \(other)" }
                if left == right, left.hashValue != right.hashValue { return "equal paths hash apart: \(one), \(other)" }
                let keyed: [FieldPath: Int] = [left: 1]
                if (keyed[right] != nil) != (one == other) { return "a dictionary keyed by \(one) answers wrongly for \(other)" }
                return nil
            })
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
    }

    @Test func nestingDeeperThanTheLimitIsRefused() async {
        var value: Value = 1
        for _ in 0..<ValueLimits.maximumDepth { value = ["level": value] }
        let tooDeep = error { _ = try DocumentDelta.create(["top": value], base: .zero) }
        #expect(tooDeep?.code == .tooDeep)
        #expect(tooDeep?.field.hasPrefix("top.level") == true)
    }

    @Test func documentsOverTheSizeLimitAreRefusedAndNothingIsApplied() throws {
        let half = String(repeating: "x", count: ValueLimits.maximumDocumentBytes / 2)
        var state = DocumentState()
        state = try ConflictStrategy.serverWins.apply(
            try DocumentDelta.create(["a": .string(half)], base: .zero),
            to: state, version: Version(1)
        ).state
        let tooBig = try DocumentDelta.update(set: [try FieldPath("b"): .string(half)], base: state.version)
        let refused = error { _ = try ConflictStrategy.serverWins.apply(tooBig, to: state, version: Version(2)) }
        #expect(refused?.code == .tooLarge)
        #expect(refused?.reason == .tooLarge)
        #expect(state.document == ["a": .string(half)])
        // Shrinking an oversized document stays possible.
        let shrink = try DocumentDelta.update(remove: [try FieldPath("a")], base: state.version)
        #expect(throws: Never.self) { try ConflictStrategy.serverWins.apply(shrink, to: state, version: Version(2)) }
    }

    @Test func anUpdateOfADocumentThatDoesNotExistIsNotFound() throws {
        let update = try DocumentDelta.update(set: [try FieldPath("a"): 1], base: .zero)
        let missing = error { _ = try ConflictStrategy.merge.apply(update, to: DocumentState(), version: Version(1)) }
        #expect(missing?.code == .documentNotFound)
        #expect(missing?.reason == .notFound)
    }

    @Test func malformedEncodedStatesAndDeltasAreRefused() async {
        let badStates: [Value] = [
            1, ["e": [2, 1]], ["e": [1, -1]], ["e": [1, 1], "f": ["a..b": [1, 1]]],
            ["e": [1, 1], "f": ["a": [1, 2, 3]]], ["e": [1, 1], "f": ["a": [.double(.nan), 1]]],
        ]
        for bad in badStates {
            #expect(throws: ValueError.self, "\(bad)") { try DocumentState(encoded: bad) }
        }
        let badDeltas: [Value] = [
            1, ["assignments": ["a": [1]]], ["removals": ["": 1]],
            ["setChanges": ["s": ["add": [1], "remove": [1], "base": 1]]], ["create": "x"],
        ]
        for bad in badDeltas {
            #expect(throws: ValueError.self, "\(bad)") { try DocumentDelta(encoded: bad) }
        }
    }
}

@Suite struct EncodingTests {
    @Test func stateAndDeltaEncodingsRoundTrip() throws {
        var state = DocumentState()
        let create = try DocumentDelta.create(["title": "Cart", "address": ["city": "Oslo", "zip": 150]], base: .zero)
        state = try ConflictStrategy.serverWins.apply(create, to: state, version: Version(1)).state
        let update = try DocumentDelta.update(
            set: [try FieldPath("address.city"): "Bergen"], remove: [try FieldPath("title")],
            setAdd: [try FieldPath("items"): ["milk", 2]], base: state.version)
        state = try ConflictStrategy.serverWins.apply(update, to: state, version: Version(2)).state
        #expect(try DocumentState(encoded: state.encoded) == state)
        #expect(try DocumentState(encoded: Value(json: state.encoded.canonicalJSON)) == state)
        #expect(try JSONDecoder().decode(DocumentState.self, from: JSONEncoder().encode(state)) == state)
        #expect(try DocumentDelta(encoded: update.encoded) == update)
        #expect(try JSONDecoder().decode(DocumentDelta.self, from: JSONEncoder().encode(update)) == update)
        #expect(state.document == ["address": ["city": "Bergen", "zip": 150], "items": ["milk", 2]])
    }
}

@Suite struct CanonicalSizeTests {
    @Test func theCountedSizeIsTheEncodedSize() async {
        let failure = await Property.check(
            "canonicalByteCount",
            generate: { choices -> Value in
                func make(_ depth: Int) -> Value {
                    switch choices.below(depth > 2 ? 6 : 8) {
                    case 0: return .null
                    case 1: return .bool(choices.below(2) == 1)
                    case 2: return .int(Int64(bitPattern: choices.next()) >> choices.below(64))
                    case 3: return .double(Double(Int64(bitPattern: choices.next()) >> 20) / Double(choices.int(in: 1...1000)))
                    case 4, 5:
                        let alphabet: [Character] = ["a", "é", "\"", "\\", "\n", "\u{1}", "𝄞", " "]
                        return .string(String((0..<choices.below(6)).map { _ in choices.element(of: alphabet) }))
                    case 6: return .array((0..<choices.below(4)).map { _ in make(depth + 1) })
                    default:
                        var entries: [String: Value] = [:]
                        for _ in 0..<choices.below(4) { entries[choices.element(of: ["k", "é", "q\"", ""])] = make(depth + 1) }
                        return .map(entries)
                    }
                }
                return make(0)
            },
            property: { value in
                value.canonicalByteCount == value.canonicalJSON.utf8.count
                    ? nil : "counted \(value.canonicalByteCount), encoded \(value.canonicalJSON.utf8.count)"
            })
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
    }
}
