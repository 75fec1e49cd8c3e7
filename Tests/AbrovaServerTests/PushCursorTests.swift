import AbrovaCore
import AbrovaWire
import Foundation
import Testing

@_spi(Testing) @testable import AbrovaServer

extension ServerSuites {
    /// A push that names the device's pull cursor is answered with the cursor after the batch
    /// exactly when a pull from the device's cursor would bring nothing but the batch.
    @Suite struct PushCursorTests {
        let cart = DocumentKey(collection: "carts", id: "c1")
        let other = DocumentKey(collection: "carts", id: "c2")

        func push(
            _ fixture: ServiceFixture, _ changes: [(DocumentKey, DocumentDelta)], as user: String = "ana", client: String = "client-a",
            sequence: Int64, pullCursor: String?
        ) throws -> PushResponse {
            let request = makeRequest(changes, client: client, sequence: sequence)
            return try PushResponse(body: try fixture.service.push(request, caller: .user(user), pullCursor: pullCursor))
        }

        /// The cursor of a full pull, as the device holds it after pulling.
        func pulledCursor(_ fixture: ServiceFixture, as user: String = "ana") throws -> String {
            try fixture.service.pull(cursor: nil, limit: 1_000, caller: .user(user)).cursor
        }

        @Test(arguments: StoreKind.available)
        func aPushOnAnUnchangedServerCarriesTheCursorAfterItsBatch(kind: StoreKind) throws {
            let fixture = try ServiceFixture(kind)
            let first = try push(fixture, [(cart, try .create(["qty": 1], base: .zero))], sequence: 1, pullCursor: "")
            let cursor = try #require(first.cursor, "a device that never pulled, on an empty server")
            #expect(try fixture.service.pull(cursor: cursor, caller: .user("ana")).documents.isEmpty)
            let second = try push(
                fixture, [(cart, try .update(set: [path("qty"): 2], base: Version(1))), (other, try .create(["n": 1], base: .zero))],
                sequence: 2, pullCursor: cursor)
            let after = try #require(second.cursor)
            #expect(try fixture.service.pull(cursor: after, caller: .user("ana")).documents.isEmpty)
            // The cursor is the one a pull from the old one ends at.
            #expect(after == (try fixture.service.pull(cursor: cursor, caller: .user("ana")).cursor))
        }

        @Test(arguments: StoreKind.available)
        func aChangeTheDeviceHasNotPulledMeansNoCursor(kind: StoreKind) throws {
            let fixture = try ServiceFixture(
                kind, rules: RuleBook(collections: ["carts": PresetRules(read: .authenticated, write: .authenticated)]))
            let before = try pulledCursor(fixture)
            _ = try push(
                fixture, [(other, try .create(["n": 1], base: .zero))], as: "ben", client: "ben-phone", sequence: 1, pullCursor: nil)
            let answer = try push(fixture, [(cart, try .create(["qty": 1], base: .zero))], sequence: 1, pullCursor: before)
            #expect(answer.cursor == nil)
            // Nor for the device's own earlier batch, answered without a cursor, until it pulls.
            let again = try push(fixture, [(cart, try .update(set: [path("qty"): 2], base: .zero))], sequence: 2, pullCursor: before)
            #expect(again.cursor == nil)
            #expect(
                try push(
                    fixture, [(cart, try .update(set: [path("qty"): 3], base: .zero))], sequence: 3, pullCursor: try pulledCursor(fixture)
                ).cursor != nil)
        }

        @Test(arguments: StoreKind.available)
        func aRetryGetsTheStoredAnswerWithoutACursor(kind: StoreKind) throws {
            let fixture = try ServiceFixture(kind)
            let request = makeRequest([(cart, try .create(["qty": 1], base: .zero))], sequence: 1)
            let first = try fixture.service.push(request, caller: .user("ana"), pullCursor: "")
            #expect(try PushResponse(body: first).cursor != nil)
            let retry = try fixture.service.push(request, caller: .user("ana"), pullCursor: "")
            #expect(try PushResponse(body: retry) == PushResponse(results: try PushResponse(body: first).results))
            #expect(retry == (try fixture.service.push(request, caller: .user("ana"))), "the stored answer, byte for byte")
        }

        /// A cursor a pull would refuse never refuses a push: the batch is applied, without a cursor.
        @Test(arguments: StoreKind.available)
        func aCursorAPullWouldRefuseOnlyGoesWithout(kind: StoreKind) throws {
            let fixture = try ServiceFixture(kind)
            let bens = try pulledCursor(fixture, as: "ben")
            for (sequence, cursor) in zip(Int64(1)..., ["c1.nonsense", "garbage", bens]) {
                let answer = try push(
                    fixture, [(cart, try .create(["qty": .int(sequence)], base: .zero))], sequence: sequence, pullCursor: cursor)
                guard case .applied? = answer.results.first else {
                    Issue.record("not applied under cursor \(cursor): \(answer.results)")
                    continue
                }
                #expect(answer.cursor == nil, "cursor \(cursor)")
            }
        }

        /// A delete the device never saw, whose tombstone is gone: the pull would answer 410.
        @Test(arguments: StoreKind.available)
        func aRemovedTombstoneAfterTheCursorMeansNoCursor(kind: StoreKind) throws {
            let fixture = try ServiceFixture(
                kind, rules: RuleBook(collections: ["carts": PresetRules(read: .authenticated, write: .authenticated)]))
            _ = try push(
                fixture, [(other, try .create(["n": 1], base: .zero))], as: "ben", client: "ben-phone", sequence: 1, pullCursor: nil)
            let before = try pulledCursor(fixture)
            _ = try push(fixture, [(other, .delete(base: Version(1)))], as: "ben", client: "ben-phone", sequence: 2, pullCursor: nil)
            fixture.advance(by: 7_200)
            try fixture.service.purgeExpiredTombstones()
            #expect(try push(fixture, [(cart, try .create(["qty": 1], base: .zero))], sequence: 1, pullCursor: before).cursor == nil)
        }

        /// A document the caller may write but could not read is answered with less than a pull
        /// would bring once the caller can read it.
        @Test(arguments: StoreKind.available)
        func aChangeToADocumentTheCallerCouldNotReadMeansNoCursor(kind: StoreKind) throws {
            let fixture = try ServiceFixture(
                kind, rules: RuleBook(collections: ["carts": PresetRules(read: .owner, write: .authenticated)]))
            let created = try push(
                fixture, [(cart, try .create(["qty": 1], base: .zero))], as: "ben", client: "ben-phone", sequence: 1, pullCursor: "")
            #expect(created.cursor != nil)
            let anas = try pulledCursor(fixture)
            let answer = try push(fixture, [(cart, try .update(set: [path("note"): "hi"], base: .zero))], sequence: 1, pullCursor: anas)
            guard case .applied? = answer.results.first else {
                Issue.record("not applied: \(answer.results)")
                return
            }
            #expect(answer.cursor == nil)
        }
    }
}
