import AbrovaCore
import Testing

/// The sync scope as a value: what it covers, how it reads and writes, and what it refuses.
@Suite struct SyncScopeTests {
    static func part(_ collection: String, _ equalities: [String: Value] = [:]) -> SyncScope.Part {
        SyncScope.Part(
            collection: collection, equalities: equalities.map { SyncScope.Equality(path: try! FieldPath($0.key), value: $0.value) })
    }

    @Test(arguments: [
        (Value?.none, Value.string("ana"), false),
        (.string("ana"), .string("ana"), true),
        (.string("Ana"), .string("ana"), false),
        (.int(2), .double(2), true),
        (.double(2), .int(2), true),
        (.double(2.5), .int(2), false),
        (.string("2"), .int(2), false),
        (.bool(true), .int(1), false),
        (.null, .null, true),
        (Value?.none, .null, false),
        (.array([.string("ana")]), .string("ana"), false),
    ])
    func anEqualityHoldsForItsValueNumbersAcrossKinds(field: Value?, value: Value, holds: Bool) {
        #expect(SyncScope.Equality(path: try! FieldPath("f"), value: value).holds(for: field) == holds)
    }

    @Test func aScopeCoversWhatAnyPartCovers() throws {
        let scope = try SyncScope(parts: [Self.part("carts", ["owner": "ana", "shop.city": "Oslo"]), Self.part("lists")])
        #expect(scope.covers("carts", document: ["owner": "ana", "shop": ["city": "Oslo"]]))
        #expect(!scope.covers("carts", document: ["owner": "ana", "shop": ["city": "Bergen"]]))
        #expect(!scope.covers("carts", document: ["owner": "ana"]))
        #expect(!scope.covers("carts", document: nil))
        #expect(scope.covers("lists", document: nil))
        #expect(!scope.covers("orders", document: ["owner": "ana"]))
        #expect(scope.excludes("orders") && !scope.excludes("carts"))
        #expect(scope.coversWhole("lists") && !scope.coversWhole("carts"))
        #expect(scope.collections == ["carts", "lists"])
        #expect(scope.hasEqualities)

        // A state and a pulled state read alike.
        var state = DocumentState()
        state.applyLocally(try .create(["owner": "ana", "shop": ["city": "Oslo"]], base: .zero), at: Version(3))
        #expect(scope.covers("carts", state: state))
        #expect(scope.covers("carts", pulled: PulledState(state)))
        state.applyLocally(.delete(base: Version(3)), at: Version(4))
        #expect(!scope.covers("carts", state: state))
        #expect(scope.covers("lists", state: state))
    }

    @Test func aScopeReadsWhatItWritesAndListsEachPartOnce() throws {
        let text = #"["lists",{"collection":"carts","where":{"owner":"ana","qty":2}},"lists"]"#
        let scope = try SyncScope(jsonText: text)
        #expect(scope.parts.count == 2)
        #expect(scope.canonicalJSON == #"["lists",{"collection":"carts","where":{"owner":"ana","qty":2}}]"#)
        #expect(try SyncScope(jsonText: scope.canonicalJSON) == scope)
        #expect(try SyncScope(collections: ["b", "a", "b"]).canonicalJSON == #"["a","b"]"#)
        #expect(!(try SyncScope(collections: ["a"]).hasEqualities))
    }

    @Test func widenedPartsAreThoseTheOldScopeDidNotCover() throws {
        let anas = Self.part("carts", ["owner": "ana"])
        let bens = Self.part("carts", ["owner": "ben"])
        let new = try SyncScope(parts: [anas, bens, Self.part("lists")])
        #expect(
            new.parts(beyond: try SyncScope(parts: [anas]))
                == [bens, Self.part("lists")].sorted { $0.json.canonicalJSON < $1.json.canonicalJSON })
        #expect(new.parts(beyond: try SyncScope(parts: [Self.part("carts")])) == [Self.part("lists")])
        #expect(new.parts(beyond: nil).isEmpty)
    }

    @Test(arguments: [
        ("", "not valid JSON"),
        ("{}", "a sync scope is a JSON list"),
        ("[]", "1 to 100 parts"),
        (#"[1]"#, "scope[0] must be"),
        (#"["a/b"]"#, "collection"),
        (#"[{"collection":"c"}]"#, "scope[0].where"),
        (#"[{"collection":"c","where":{}}]"#, "scope[0].where"),
        (#"[{"collection":"c","where":{"a":1},"order":"a"}]"#, "unknown key \"order\""),
        (#"[{"collection":1,"where":{"a":1}}]"#, "scope[0].collection"),
        (#"[{"collection":"c","where":{"a":[1]}}]"#, "a string, a number, a boolean or null"),
        (#"[{"collection":"c","where":{"a":{"b":1}}}]"#, "a string, a number, a boolean or null"),
        (#"[{"collection":"c","where":{"a..b":1}}]"#, "scope[0].where"),
        (#"[{"collection":"c","where":{"":1}}]"#, "names a field"),
        ("[" + String(repeating: #""c","#, count: 101) + #""c"]"#, "parts"),
    ])
    func aScopeThatCannotBeIsRefusedWithItsReason(text: String, reason: String) {
        do {
            _ = try SyncScope(jsonText: text)
            Issue.record("\(text) was read")
        } catch {
            #expect(error.reason == .invalid)
            #expect(error.message.contains(reason), "\(error.message)")
        }
    }

    @Test func aScopeHasAtMostItsLimitsOfEqualitiesAndBytes() {
        let many = (0...SyncScope.maximumEqualities).map { SyncScope.Equality(path: try! FieldPath("f\($0)"), value: .int(1)) }
        #expect(throws: Refusal.self) { try SyncScope(parts: [SyncScope.Part(collection: "c", equalities: many)]) }
        let twice = [SyncScope.Equality(path: try! FieldPath("a"), value: 1), SyncScope.Equality(path: try! FieldPath("a"), value: 2)]
        #expect(throws: Refusal.self) { try SyncScope(parts: [SyncScope.Part(collection: "c", equalities: twice)]) }
        let long = Value.string(String(repeating: "x", count: SyncScope.maximumEncodedBytes))
        #expect(throws: Refusal.self) { try SyncScope(parts: [Self.part("c", ["a": long])]) }
    }
}
