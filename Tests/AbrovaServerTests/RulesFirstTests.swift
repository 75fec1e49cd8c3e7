import AbrovaCore
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

@testable import AbrovaServer

/// Rules come first: a push answer never carries a value, size, conflict or existence hint of a
/// document the caller may not read, under every strategy, on both stores.
@Suite struct RulesFirstTests {
    let inbox = DocumentKey(collection: "inbox", id: "a1")
    let cart = DocumentKey(collection: "carts", id: "c1")
    static let secret = "ana-secret-payload"

    /// A push's answer as the caller gets it, as text.
    func answer(
        _ fixture: ServiceFixture, _ changes: [(DocumentKey, DocumentDelta)], as user: String, sequence: Int64,
        strategy: ConflictStrategy
    ) throws -> String {
        let request = makeRequest(
            changes, client: "\(user.replacingOccurrences(of: ":", with: "_"))-phone", sequence: sequence, strategy: strategy)
        return String(decoding: try fixture.service.push(request, caller: .user(user)), as: UTF8.self)
    }

    @Test(arguments: StoreKind.available)
    func aWriteOnlyCallerLearnsNothingOfTheDocumentUnderAnyStrategy(kind: StoreKind) throws {
        let fixture = try ServiceFixture(kind, rules: RuleBook(collections: ["inbox": PresetRules(read: .owner, write: .authenticated)]))
        try fixture.push(
            [(inbox, try .create(["note": .string(Self.secret), "items": ["x"]], base: .zero))], as: "ana", client: "ana", sequence: 1)
        var sequence: Int64 = 0
        for strategy in ConflictStrategy.allCases {
            for delta in [
                DocumentDelta.delete(base: .zero),
                try .update(set: [path("note"): "ben's"], setRemove: [path("items"): ["x"]], base: .zero),
            ] {
                sequence += 1
                let text = try answer(fixture, [(inbox, delta)], as: "ben", sequence: sequence, strategy: strategy)
                #expect(
                    !text.contains(Self.secret) && !text.contains("\"x\""), "under \(strategy) ben's answer shows ana's document: \(text)")
                #expect(!text.contains("serverValue") && !text.contains("\"server\""), "under \(strategy): \(text)")
            }
        }
    }

    /// A push's results without their versions (each change takes a version of its own, whatever
    /// the document): what the caller learns of the document.
    func shape(_ answer: String) throws -> String {
        try PushResponse(body: Array(answer.utf8)).results.map { result in
            switch result {
            case .applied(_, let state, let conflicts): "applied \(String(describing: state)) \(conflicts)"
            case .unresolved(let state, let conflicts): "unresolved \(state) \(conflicts)"
            case .rejected(let reason, let message): "rejected \(reason.httpStatus) \(message)"
            }
        }.joined(separator: "; ")
    }

    @Test(arguments: StoreKind.available, [PresetRules.WriteAccess.owner, .nobody])
    func aRefusedChangeToAHiddenDocumentReadsAsAChangeToAMissingOne(kind: StoreKind, write: PresetRules.WriteAccess) throws {
        let fixture = try ServiceFixture(kind, rules: RuleBook(collections: ["carts": PresetRules(read: .owner, write: write)]))
        // Ana's document is there before the rules say nobody writes (an admin tool wrote it).
        try fixture.test.store.write { transaction in
            var state = DocumentState()
            let version = try transaction.nextVersion()
            _ = try ConflictStrategy.merge.apply(
                try .create(["items": ["milk"], "note": "short"], base: .zero), to: &state, version: version)
            try transaction.saveDocument(StoredDocument(key: cart, owner: "ana", version: version, state: state), at: Date())
        }
        let missing = DocumentKey(collection: "carts", id: "c2")
        // A pad near the limit and a set add: before, the size check ran before the rules, so
        // 413 against 403 told whether "milk" was in Ana's set and how long her fields were.
        let pad = String(repeating: "p", count: ValueLimits.maximumDocumentBytes - 200)
        var sequence: Int64 = 0
        for strategy in ConflictStrategy.allCases {
            for delta in [
                try DocumentDelta.update(set: [path("pad"): .string(pad)], setAdd: [path("items"): ["milk"]], base: .zero),
                try .update(set: [path("pad"): .string(pad)], setAdd: [path("items"): ["eggs"]], base: .zero),
                try .update(set: [path("note"): "ben's"], base: .zero),
                .delete(base: .zero),
            ] {
                sequence += 1
                let hidden = try shape(try answer(fixture, [(cart, delta)], as: "ben", sequence: sequence, strategy: strategy))
                sequence += 1
                let none = try shape(try answer(fixture, [(missing, delta)], as: "ben", sequence: sequence, strategy: strategy))
                    .replacingOccurrences(of: "carts/c2", with: "carts/c1")
                #expect(hidden == none, "under \(strategy), write \(write): \(hidden) against \(none)")
                #expect(!hidden.contains("413"), "under \(strategy): \(hidden)")
            }
        }
        #expect(try fixture.service.document(cart, caller: .user("ana")).state.document == ["items": ["milk"], "note": "short"])
    }

    /// Ids of owner-prefixed collections: each user creates in a namespace of their own, so
    /// nobody can take an id before its owner, and a write to another user's namespace is refused
    /// alike whether the document is there or not.
    @Test(arguments: StoreKind.available)
    func inAnOwnerPrefixedCollectionNobodyTakesAnotherUsersId(kind: StoreKind) throws {
        let rules = try RuleBook(
            json: Array(#"{"collections": {"lists": {"read": "owner", "write": "owner", "ids": "owner-prefixed"}}}"#.utf8))
        let fixture = try ServiceFixture(kind, rules: rules)
        let anas = DocumentKey(collection: "lists", id: "ana:groceries")
        #expect(
            try fixture.push([(anas, try .create(["n": 1], base: .zero))], as: "ana", client: "ana", sequence: 1)
                == [.applied(version: Version(1), state: nil, conflicts: [])])
        var sequence: Int64 = 0
        for id in ["ana:groceries", "ana:later"] {
            for delta in [
                try DocumentDelta.create(["n": 2], base: .zero), try .update(set: [path("n"): 3], base: .zero), .delete(base: .zero),
            ] {
                sequence += 1
                let text = try answer(
                    fixture, [(DocumentKey(collection: "lists", id: id), delta)], as: "ben", sequence: sequence,
                    strategy: .merge)
                #expect(
                    try shape(text) == "rejected 403 ids in lists begin with their owner's user id and \":\"; lists/\(id) is not in yours")
            }
        }
        // Ana's later id stays free for her, and Ben has his own namespace, but no id outside it.
        #expect(
            try fixture.push(
                [(DocumentKey(collection: "lists", id: "ana:later"), try .create(["n": 1], base: .zero))], as: "ana",
                client: "ana", sequence: 2
            ).count == 1)
        #expect(
            try fixture.push(
                [(DocumentKey(collection: "lists", id: "ben:x"), try .create(["n": 1], base: .zero))], as: "ben",
                client: "ben", sequence: 1
            ).first.map { if case .applied = $0 { true } else { false } } == true)
        for id in ["plain", "ben:", "ben", "bent:x", "Ben:x"] {
            sequence += 1
            let text = try answer(
                fixture, [(DocumentKey(collection: "lists", id: id), try .create(["n": 1], base: .zero))], as: "ben",
                sequence: sequence, strategy: .merge)
            #expect(try shape(text).hasPrefix("rejected 403 ids in lists begin with their owner's user id"), "\(id): \(text)")
        }
        #expect(try fixture.service.document(anas, caller: .user("ana")).state.document == ["n": 1])
        // A user id with a colon would overlap another's namespace ("ana" owns "ana:x:list"), so it has none.
        let overlapping = try answer(
            fixture, [(DocumentKey(collection: "lists", id: "ana:x:list"), try .create(["n": 1], base: .zero))],
            as: "ana:x", sequence: 1, strategy: .merge)
        #expect(try shape(overlapping).hasPrefix("rejected 403 ids in lists begin with their owner's user id and \":\"; a user id with"))
        let anasOwn = try answer(
            fixture, [(DocumentKey(collection: "lists", id: "ana:x:list"), try .create(["n": 1], base: .zero))],
            as: "ana", sequence: 1, strategy: .merge)
        #expect(try shape(anasOwn).hasPrefix("applied"), "\(anasOwn)")
    }

    /// Where any signed-in user writes, others change a user's documents, but create only in
    /// their own namespace.
    @Test(arguments: StoreKind.available)
    func inAnOwnerPrefixedSharedCollectionOthersChangeButDoNotCreate(kind: StoreKind) throws {
        let fixture = try ServiceFixture(
            kind,
            rules: RuleBook(collections: [
                "boards": PresetRules(read: .authenticated, write: .authenticated, ids: .ownerPrefixed)
            ]))
        let anas = DocumentKey(collection: "boards", id: "ana:team")
        try fixture.push([(anas, try .create(["n": 1], base: .zero))], as: "ana", client: "ana", sequence: 1)
        let changed = try fixture.push([(anas, try .update(set: [path("n"): 2], base: .zero))], as: "ben", client: "ben", sequence: 1)
        #expect(changed.first.map { if case .applied = $0 { true } else { false } } == true, "\(changed)")
        let taken = try fixture.push(
            [(DocumentKey(collection: "boards", id: "ana:other"), try .create(["n": 1], base: .zero))], as: "ben",
            client: "ben", sequence: 2)
        #expect(taken == [.rejected(reason: .forbidden, message: "the rules of boards refuse this write to boards/ana:other")])
    }

    @Test func rulesFilesNameTheIdsChoice() throws {
        let rules = try RuleBook(json: Array(#"{"default": {"read": "owner", "write": "owner", "ids": "owner-prefixed"}}"#.utf8))
        #expect((rules.fallback as? PresetRules)?.ids == .ownerPrefixed)
        #expect(
            (try RuleBook(json: Array(#"{"default": {"read": "owner", "write": "owner"}}"#.utf8)).fallback as? PresetRules)?.ids == .any)
        let error = #expect(throws: Refusal.self) {
            try RuleBook(json: Array(#"{"default": {"read": "owner", "write": "owner", "ids": "prefixed"}}"#.utf8))
        }
        #expect(error?.message.contains("\"ids\" (any, owner-prefixed)") == true)
    }

    @Test(arguments: StoreKind.available)
    func aWriteOnlyCallerRefusedForSizeLearnsNoSize(kind: StoreKind) throws {
        let fixture = try ServiceFixture(kind, rules: RuleBook(collections: ["inbox": PresetRules(read: .owner, write: .authenticated)]))
        try fixture.push(
            [(inbox, try .create(["note": .string(String(repeating: "s", count: 5_000))], base: .zero))],
            as: "ana", client: "ana", sequence: 1)
        let pad = String(repeating: "p", count: ValueLimits.maximumDocumentBytes - 1_000)
        let results = try fixture.push(
            [(inbox, try .update(set: [path("pad"): .string(pad)], base: .zero))], as: "ben", client: "ben",
            sequence: 1, strategy: .merge)
        guard case .rejected(.tooLarge, let message) = results[0] else { Issue.record("\(results)"); return }
        #expect(
            !message.contains(where: \.isNumber) || message == "inbox/a1: the write would make the document larger than the limit",
            "the refusal tells a size: \(message)")
    }
}
