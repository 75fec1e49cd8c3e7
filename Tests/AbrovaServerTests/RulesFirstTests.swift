import AbrovaCore
@testable import AbrovaServer
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

/// Rules come first: a push answer never carries a value, size, conflict or existence hint of a
/// document the caller may not read, under every strategy, on both stores.
@Suite struct RulesFirstTests {
    let inbox = DocumentKey(collection: "inbox", id: "a1")
    let cart = DocumentKey(collection: "carts", id: "c1")
    static let secret = "ana-secret-payload"

    /// A push's answer as the caller gets it, as text.
    func answer(_ fixture: ServiceFixture, _ changes: [(DocumentKey, DocumentDelta)], as user: String, sequence: Int64,
                strategy: ConflictStrategy) throws -> String {
        let request = makeRequest(changes, client: "\(user)-phone", sequence: sequence, strategy: strategy)
        return String(decoding: try fixture.service.push(request, caller: .user(user)), as: UTF8.self)
    }

    @Test(arguments: StoreKind.available)
    func aWriteOnlyCallerLearnsNothingOfTheDocumentUnderAnyStrategy(kind: StoreKind) throws {
        let fixture = try ServiceFixture(kind, rules: RuleBook(collections: ["inbox": PresetRules(read: .owner, write: .authenticated)]))
        try fixture.push([(inbox, try .create(["note": .string(Self.secret), "items": ["x"]], base: .zero))], as: "ana", client: "ana", sequence: 1)
        var sequence: Int64 = 0
        for strategy in ConflictStrategy.allCases {
            for delta in [DocumentDelta.delete(base: .zero),
                          try .update(set: [path("note"): "ben's"], setRemove: [path("items"): ["x"]], base: .zero)] {
                sequence += 1
                let text = try answer(fixture, [(inbox, delta)], as: "ben", sequence: sequence, strategy: strategy)
                #expect(!text.contains(Self.secret) && !text.contains("\"x\""), "under \(strategy) ben's answer shows ana's document: \(text)")
                #expect(!text.contains("serverValue") && !text.contains("\"server\""), "under \(strategy): \(text)")
            }
        }
    }

    @Test(arguments: StoreKind.available)
    func aRefusedChangeToAHiddenDocumentReadsAsAChangeToAMissingOne(kind: StoreKind) throws {
        let fixture = try ServiceFixture(kind)  // owner-only everywhere
        try fixture.push([(cart, try .create(["items": ["milk"], "note": "short"], base: .zero))], as: "ana", client: "ana", sequence: 1)
        let missing = DocumentKey(collection: "carts", id: "c2")
        // A pad near the limit and a set add: before, the size check ran before the rules, so
        // 413 against 403 told whether "milk" was in Ana's set and how long her fields were.
        let pad = String(repeating: "p", count: ValueLimits.maximumDocumentBytes - 200)
        var sequence: Int64 = 0
        for strategy in ConflictStrategy.allCases {
            for delta in [try DocumentDelta.update(set: [path("pad"): .string(pad)], setAdd: [path("items"): ["milk"]], base: .zero),
                          try .update(set: [path("pad"): .string(pad)], setAdd: [path("items"): ["eggs"]], base: .zero),
                          try .update(set: [path("note"): "ben's"], base: .zero),
                          .delete(base: .zero)] {
                sequence += 1
                let hidden = try answer(fixture, [(cart, delta)], as: "ben", sequence: sequence, strategy: strategy)
                sequence += 1
                let none = try answer(fixture, [(missing, delta)], as: "ben", sequence: sequence, strategy: strategy)
                    .replacingOccurrences(of: "carts/c2", with: "carts/c1")
                if delta.delete == nil {
                    #expect(hidden == none, "under \(strategy): \(hidden) against \(none)")
                } else {
                    // Deleting what is not there is done already, whatever the version it took.
                    let results = try [hidden, none].map { try PushResponse(body: Array($0.utf8)).results }
                    for result in results {
                        guard case .applied(_, nil, []) = result[0] else { Issue.record("under \(strategy): \(result)"); continue }
                    }
                }
                #expect(!hidden.contains("413") && !hidden.contains("403"), "under \(strategy): \(hidden)")
            }
        }
        #expect(try fixture.service.document(cart, caller: .user("ana")).state.document == ["items": ["milk"], "note": "short"])
    }

    @Test(arguments: StoreKind.available)
    func aWriteOnlyCallerRefusedForSizeLearnsNoSize(kind: StoreKind) throws {
        let fixture = try ServiceFixture(kind, rules: RuleBook(collections: ["inbox": PresetRules(read: .owner, write: .authenticated)]))
        try fixture.push([(inbox, try .create(["note": .string(String(repeating: "s", count: 5_000))], base: .zero))],
                         as: "ana", client: "ana", sequence: 1)
        let pad = String(repeating: "p", count: ValueLimits.maximumDocumentBytes - 1_000)
        let results = try fixture.push([(inbox, try .update(set: [path("pad"): .string(pad)], base: .zero))], as: "ben", client: "ben",
                                       sequence: 1, strategy: .merge)
        guard case .rejected(413, let message) = results[0] else { Issue.record("\(results)"); return }
        #expect(!message.contains(where: \.isNumber) || message == "inbox/a1: the write would make the document larger than the limit",
                "the refusal tells a size: \(message)")
    }
}
