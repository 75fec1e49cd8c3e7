import AbrovaCore
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

@testable import AbrovaServer

extension ServerSuites {
    /// A pull of a scope with equalities over HTTP, on each store: from the beginning it brings
    /// the documents its parts cover; after a cursor it also names those that changed and that it
    /// no longer covers (`left`); rules apply on top; a scope that cannot be is a 400.
    @Suite struct ScopedPullTests {
        static let scope = #"[{"collection":"carts","where":{"owner":"ana"}},"lists"]"#

        static func key(_ collection: String, _ id: String) -> DocumentKey { DocumentKey(collection: collection, id: id) }

        static func encoded(_ text: String) -> String {
            text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? text
        }

        func page(_ live: LiveServer, _ query: String, as user: String = "ana") throws -> PullResponse {
            let response = try live.send("GET", "/v1/pull?form=state&" + query, as: user)
            #expect(response.status == 200, "\(response.message)")
            return try PullResponse(body: response.body)
        }

        @Test(arguments: StoreKind.available)
        func aScopedPullBringsWhatItCoversAndNamesWhatLeft(kind: StoreKind) throws {
            let live = try LiveServer(kind)
            let (c1, c2, c3, l1, o1) = (
                Self.key("carts", "c1"), Self.key("carts", "c2"), Self.key("carts", "c3"), Self.key("lists", "l1"), Self.key("orders", "o1")
            )
            let created = makeRequest(
                [
                    (c1, try .create(["owner": "ana"], base: .zero)), (c2, try .create(["owner": "ben"], base: .zero)),
                    (c3, try .create(["owner": "ana"], base: .zero)), (l1, try .create(["n": 1], base: .zero)),
                    (o1, try .create(["owner": "ana"], base: .zero)),
                ], sequence: 1)
            #expect(try live.push(created).status == 200)
            let first = try page(live, "scope=" + Self.encoded(Self.scope))
            #expect(first.documents.map(\.key) == [c1, c3, l1])
            #expect(first.left.isEmpty)
            #expect(
                !String(decoding: try live.send("GET", "/v1/pull?scope=" + Self.encoded(Self.scope)).body, as: UTF8.self).contains("left"))

            let changed = makeRequest(
                [
                    (c1, try .update(set: [try FieldPath("owner"): "ben"], base: Version(1))),
                    (c2, try .update(set: [try FieldPath("owner"): "ana"], base: Version(2))),
                    (c3, .delete(base: Version(3))), (o1, try .update(set: [try FieldPath("n"): 1], base: Version(5))),
                ], sequence: 2)
            #expect(try live.push(changed).status == 200)
            let next = try page(live, "cursor=\(first.cursor)&scope=" + Self.encoded(Self.scope))
            #expect(next.documents.map(\.key) == [c2])
            #expect(next.left == [c1, c3])
            #expect(!next.hasMore)

            // A page counts what left in its limit, and the cursor goes past it.
            var keys: [DocumentKey] = []
            var cursor = first.cursor
            for _ in 0..<4 {
                let one = try page(live, "limit=1&cursor=\(cursor)&scope=" + Self.encoded(Self.scope))
                #expect(one.documents.count + one.left.count <= 1)
                keys += one.documents.map(\.key) + one.left
                cursor = one.cursor
                if !one.hasMore { break }
            }
            #expect(keys == [c1, c2, c3])

            // Rules apply on top: another user's pull of the same scope sees none of it.
            let bens = try page(live, "scope=" + Self.encoded(Self.scope), as: "ben")
            #expect(bens.documents.isEmpty && bens.left.isEmpty)
            let bensNext = try page(live, "cursor=\(bens.cursor)&scope=" + Self.encoded(Self.scope), as: "ben")
            #expect(bensNext.documents.isEmpty && bensNext.left.isEmpty)
        }

        /// A pull from the beginning names in `left` only what changed since it started: a
        /// document it has not reached, or one it sent and that changed since.
        @Test(arguments: StoreKind.available)
        func aPullFromTheBeginningNamesOnlyWhatChangedSinceItStarted(kind: StoreKind) throws {
            let live = try LiveServer(kind)
            let carts = (1...6).map { Self.key("carts", "c\($0)") }
            let created = makeRequest(
                carts.enumerated().map { ($1, try! .create(["owner": $0 % 2 == 0 ? "ana" : "ben"], base: .zero)) }, sequence: 1)
            #expect(try live.push(created).status == 200)
            let scope = "scope=" + Self.encoded(#"[{"collection":"carts","where":{"owner":"ana"}}]"#)
            let first = try page(live, "limit=1&" + scope)
            #expect(first.documents.map(\.key) == [carts[0]] && first.hasMore)
            // c1, already sent, leaves the scope; c3, not reached yet, too.
            let changed = makeRequest(
                [
                    (carts[0], try .update(set: [try FieldPath("owner"): "ben"], base: Version(1))),
                    (carts[2], try .update(set: [try FieldPath("owner"): "ben"], base: Version(3))),
                ], sequence: 2)
            #expect(try live.push(changed).status == 200)
            var documents: [DocumentKey] = []
            var left: [DocumentKey] = []
            var cursor = first.cursor
            while true {
                let next = try page(live, "limit=2&cursor=\(cursor)&" + scope)
                documents += next.documents.map(\.key)
                left += next.left
                cursor = next.cursor
                if !next.hasMore { break }
            }
            #expect(documents == [carts[4]])
            #expect(left == [carts[0], carts[2]])
            // Past the versions it started with, the cursor is the plain one again.
            #expect(cursor.count == first.cursor.count - 11)
        }

        /// A pull that found nothing keeps, in its cursor at version 0, the version it started with.
        @Test(arguments: StoreKind.available)
        func aCursorAtTheBeginningKeepsTheVersionItsPullStartedWith(kind: StoreKind) throws {
            let live = try LiveServer(kind)
            #expect(try live.push(makeRequest([(Self.key("orders", "o1"), try .create(["n": 1], base: .zero))], sequence: 1)).status == 200)
            let scope = "scope=" + Self.encoded(#"[{"collection":"carts","where":{"owner":"ana"}}]"#)
            let empty = try page(live, scope)
            #expect(empty.documents.isEmpty && !empty.hasMore)
            let cart = Self.key("carts", "c1")
            #expect(try live.push(makeRequest([(cart, try .create(["owner": "ana"], base: .zero))], sequence: 2)).status == 200)
            #expect(
                try live.push(makeRequest([(cart, try .update(set: [try FieldPath("owner"): "ben"], base: Version(2)))], sequence: 3))
                    .status
                    == 200)
            // The device may hold c1 (it wrote it): the page names it.
            #expect(try page(live, "cursor=\(empty.cursor)&" + scope).left == [cart])
        }

        @Test(arguments: StoreKind.available)
        func aScopeThatCannotBeIsA400NamingWhy(kind: StoreKind) throws {
            let live = try LiveServer(kind)
            let cases: [(String, String)] = [
                ("scope=" + Self.encoded("[carts"), "scope is not valid JSON"),
                ("scope=" + Self.encoded(#"[{"collection":"carts","where":{"tags":["a"]}}]"#), "a string, a number, a boolean or null"),
                ("scope=" + Self.encoded(#"[{"collection":"carts","where":{"a":1},"limit":1}]"#), "unknown key \"limit\""),
                ("scope=" + Self.encoded(#"["a/b"]"#), "collection"),
                ("scope=" + Self.encoded("[]"), "1 to 100 parts"),
                ("collections=carts&scope=" + Self.encoded(Self.scope), "collections or a scope, not both"),
            ]
            for route in ["/v1/pull", "/v1/watch"] {
                for (query, reason) in cases {
                    let response = try live.send("GET", "\(route)?\(query)")
                    #expect(response.status == 400, "\(route)?\(query): \(response.status)")
                    #expect(response.message.contains(reason), "\(route)?\(query): \(response.message)")
                }
            }
        }

        @Test(arguments: StoreKind.available)
        func aScopedWatchWakesForAChangeInItsCollections(kind: StoreKind) async throws {
            let live = try LiveServer(kind)
            let start = try page(live, "scope=" + Self.encoded(Self.scope))
            #expect(
                try live.push(makeRequest([(Self.key("carts", "c9"), try .create(["owner": "ben"], base: .zero))], sequence: 1)).status
                    == 200)
            // Not covered, but in a collection of the scope: a device may hold it from before.
            let response = try live.send("GET", "/v1/watch?cursor=\(start.cursor)&scope=" + Self.encoded(Self.scope))
            #expect(response.status == 200)
            #expect(String(decoding: response.body, as: UTF8.self) == #"{"changed":true}"#)
        }
    }
}
