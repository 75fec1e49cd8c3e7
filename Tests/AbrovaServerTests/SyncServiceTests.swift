import AbrovaCore
import AbrovaLocking
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

@_spi(Testing) @testable import AbrovaServer

func path(_ dotted: String) -> FieldPath { try! FieldPath(dotted) }

/// A value shared between test tasks and the code under test.
final class Locked<Value: Sendable>: Sendable {
    private let storage: Protected<Value>
    init(_ value: Value) { storage = Protected(value) }
    var value: Value { storage.withLock { $0 } }
    func update<Result: Sendable>(_ body: @Sendable (inout Value) -> Result) -> Result { storage.withLock { body(&$0) } }
}

/// A service on a fresh store of one kind, with helpers to push and pull as a user.
final class ServiceFixture: Sendable {
    /// The store, and what keeps its database alive as long as the fixture.
    let test: TestStore
    let service: SyncService
    let now = Locked(Date(timeIntervalSince1970: 1_800_000_000))

    init(
        _ kind: StoreKind, rules: RuleBook = RuleBook(), limits: WireLimits = WireLimits(), retention: TimeInterval = 3_600,
        watchIdleTime: Duration = .seconds(25), maximumWatches: Int = 10_000,
        afterPushCommit: (@Sendable (PushRequest) throws -> Void)? = nil
    ) throws {
        test = try TestStore(kind)
        let clock = now
        var configuration = ServiceConfiguration(limits: limits, tombstoneRetention: retention, clock: { clock.value })
        configuration.afterPushCommit = afterPushCommit
        configuration.watchIdleTime = watchIdleTime
        configuration.maximumWatches = maximumWatches
        service = try SyncService(store: test.store, rules: rules, configuration: configuration)
    }

    func advance(by seconds: TimeInterval) { now.update { $0 += seconds } }

    @discardableResult
    func push(
        _ changes: [(DocumentKey, DocumentDelta)], as user: String, client: String = "client-a", sequence: Int64,
        strategy: ConflictStrategy = .merge
    ) throws(Refusal) -> [ChangeResult] {
        let request = makeRequest(changes, client: client, sequence: sequence, strategy: strategy)
        return try PushResponse(body: try service.push(request, caller: .user(user))).results
    }

    func pullAll(as caller: Caller, limit: Int = 1_000) throws(Refusal) -> [ServerDocument] {
        var cursor: String?
        var documents: [ServerDocument] = []
        while true {
            let page = try service.pull(cursor: cursor, limit: limit, caller: caller)
            documents += page.documents
            cursor = page.cursor
            if !page.hasMore { return documents }
        }
    }
}

func makeRequest(
    _ changes: [(DocumentKey, DocumentDelta)], client: String = "client-a", sequence: Int64,
    strategy: ConflictStrategy = .merge
) -> PushRequest {
    PushRequest(
        batch: Batch(clientID: client, sequence: sequence, changes: changes.map { BatchChange(key: $0.0, delta: $0.1, writes: 1) }),
        strategy: strategy)
}

/// The status of the `Refusal` that `body` throws; `nil` when it succeeds, -1 for another error.
func statusOf(_ body: () throws -> Void) -> Int? {
    do {
        try body()
        return nil
    } catch let error as Refusal {
        return error.statusCode
    } catch {
        return -1
    }
}

extension ServerSuites {
    @Suite struct PushTests {
        let cart = DocumentKey(collection: "carts", id: "c1")

        @Test(arguments: StoreKind.available)
        func aPushIsAppliedAtNewVersionsAndARetryGetsTheStoredAnswerByteForByte(kind: StoreKind) throws {
            let fixture = try ServiceFixture(kind)
            let other = DocumentKey(collection: "carts", id: "c2")
            let request = makeRequest(
                [(cart, try .create(["qty": 1], base: .zero)), (other, try .create(["qty": 2], base: .zero))], sequence: 1)
            let first = try fixture.service.push(request, caller: .user("ana"))
            let results = try PushResponse(body: first).results
            // New documents meet nothing: their states are left for the client to compute.
            guard case .applied(let v1, nil, [])? = results.first, case .applied(let v2, nil, [])? = results.last else {
                Issue.record("not applied: \(results)")
                return
            }
            #expect(v1 < v2)
            let retry = try fixture.service.push(request, caller: .user("ana"))
            #expect(retry == first)
            let documents = try fixture.pullAll(as: .user("ana"))
            #expect(documents.map(\.key) == [cart, other] && documents.map(\.version) == [v1, v2])
            #expect(documents.map(\.state.document) == [["qty": 1], ["qty": 2]])
        }

        @Test(arguments: StoreKind.available)
        func aRetryIsKnownByTheBytesOfItsBody(kind: StoreKind) throws {
            let fixture = try ServiceFixture(kind)
            let request = makeRequest([(cart, try .create(["qty": 1], base: .zero))], sequence: 1)
            let first = try fixture.service.push(body: request.body, caller: .user("ana"))
            #expect(try fixture.service.push(body: request.body, caller: .user("ana")) == first)
            // The same batch spaced out is other bytes: the dedupe record cannot tell it is the same.
            let spaced = Array(String(decoding: request.body, as: UTF8.self).replacingOccurrences(of: ",", with: ", ").utf8)
            #expect(try PushRequest(body: spaced) == request)
            #expect(statusOf { _ = try fixture.service.push(body: spaced, caller: .user("ana")) } == 422)
        }

        @Test(arguments: StoreKind.available)
        func anAnswerCarriesTheStateOnlyWhenTheChangeMetWritesItHadNotSeen(kind: StoreKind) throws {
            let fixture = try ServiceFixture(kind)
            try fixture.push([(cart, try .create(["qty": 1, "note": "x"], base: .zero))], as: "ana", sequence: 1)
            let created = try fixture.service.document(cart, caller: .user("ana"))
            // On the latest state: uncontested, no state in the answer.
            let seen = try fixture.push([(cart, try .update(set: [path("qty"): 2], base: created.version))], as: "ana", sequence: 2)
            guard case .applied(let version, nil, [])? = seen.first else { Issue.record("\(seen)"); return }
            // On the state before that change: the answer carries the server's whole state.
            let unseen = try fixture.push([(cart, try .update(set: [path("note"): "y"], base: created.version))], as: "ana", sequence: 3)
            guard case .applied(let later, let state?, [])? = unseen.first else { Issue.record("\(unseen)"); return }
            #expect(later > version && state.document == ["qty": 2, "note": "y"])
            #expect(try fixture.service.document(cart, caller: .user("ana")).state == state)
        }

        /// A batch holds a document twice when the app wrote it, then another, then it again: both
        /// changes are based on what the device had seen, older than the version the first one gets.
        /// The first is this client's own write, not a change on the server it did not see.
        @Test(arguments: StoreKind.available, [ConflictStrategy.merge, .serverWins])
        func aLaterChangeOfTheSameDocumentInOneBatchIsNotInConflictWithTheEarlierOne(kind: StoreKind, strategy: ConflictStrategy) throws {
            let fixture = try ServiceFixture(kind)
            let note = DocumentKey(collection: "notes", id: "n1")
            try fixture.push([(cart, try .create(["qty": 1, "items": "x"], base: .zero))], as: "ana", sequence: 1)
            let seen = try fixture.service.document(cart, caller: .user("ana")).version
            let results = try fixture.push(
                [
                    (cart, try .update(set: [path("qty"): 2], base: seen)),
                    (note, try .create(["n": 1], base: .zero)),
                    (cart, try .update(set: [path("qty"): 3], base: seen)),
                ],
                as: "ana", sequence: 2, strategy: strategy)
            #expect(try fixture.service.document(cart, caller: .user("ana")).state.document == ["qty": 3, "items": "x"])
            guard case .applied(_, let state, let conflicts)? = results.last else { Issue.record("\(results)"); return }
            #expect(conflicts.isEmpty)
            #expect(state == nil, "rebased past the batch's first change, the later one is uncontested: the client computes the state")

            // A write by someone else since the base still conflicts, in the later change too.
            let latest = try fixture.service.document(cart, caller: .user("ana")).version
            try fixture.push([(cart, try .update(set: [path("qty"): 7], base: latest))], as: "ana", client: "client-b", sequence: 1)
            let again = try fixture.push(
                [
                    (cart, try .update(set: [path("qty"): 4], base: latest)),
                    (note, try .update(set: [path("n"): 2], base: latest)),
                    (cart, try .update(set: [path("qty"): 5, path("items"): "y"], base: latest)),
                ],
                as: "ana", sequence: 3, strategy: strategy)
            #expect(try fixture.service.document(cart, caller: .user("ana")).state.document == ["qty": 7, "items": "y"])
            guard case .applied(_, let answered?, let later)? = again.last else { Issue.record("\(again)"); return }
            #expect(later.map(\.path) == [path("qty")])
            #expect(answered == (try fixture.service.document(cart, caller: .user("ana")).state), "contested: the answer carries the state")
        }

        /// The same, when another client wrote next to the path before the batch came: the cart was
        /// made with an empty map `qty`, and another client's `qty.a` removed its register. The
        /// client's first change of `qty.b` is joined after that write; its later ones follow it.
        @Test(arguments: StoreKind.available)
        func aPathWrittenAgainInOneBatchEndsAtTheLastValueAfterAnotherClientWroteNextToIt(kind: StoreKind) throws {
            let fixture = try ServiceFixture(kind)
            let note = DocumentKey(collection: "notes", id: "n1")
            try fixture.push([(cart, try .create(["name": "c", "qty": .map([:])], base: .zero))], as: "ana", client: "maker", sequence: 1)
            let created = try fixture.service.document(cart, caller: .user("ana")).version
            try fixture.push([(cart, try .update(set: [path("qty.a"): 0], base: created))], as: "ana", client: "client-b", sequence: 1)
            let results = try fixture.push(
                [
                    (cart, try .update(set: [path("qty.b"): 0], base: created)),
                    (note, try .create(["n": 1], base: .zero)),
                    (cart, try .update(set: [path("qty.b"): 4], base: created)),
                    (note, try .update(set: [path("n"): 2], base: created)),
                    (cart, try .update(set: [path("qty.b"): 8], base: created)),
                ],
                as: "ana", sequence: 1)
            #expect(try fixture.service.document(cart, caller: .user("ana")).state.document == ["name": "c", "qty": ["a": 0, "b": 8]])
            for result in results {
                guard case .applied(_, _, let conflicts) = result else { Issue.record("\(result)"); continue }
                #expect(conflicts.isEmpty)
            }
        }

        @Test(arguments: StoreKind.available)
        func aReusedNumberWithAnotherBodyIsRefused422AndAnOlderNumber409(kind: StoreKind) throws {
            let fixture = try ServiceFixture(kind)
            try fixture.push([(cart, try .create(["qty": 1], base: .zero))], as: "ana", sequence: 5)
            #expect(
                statusOf { try fixture.push([(cart, try! .update(set: [path("qty"): 9], base: .zero))], as: "ana", sequence: 5) } == 422)
            #expect(
                statusOf { try fixture.push([(cart, try! .update(set: [path("qty"): 9], base: .zero))], as: "ana", sequence: 4) } == 409)
            #expect(try fixture.service.document(cart, caller: .user("ana")).state.document == ["qty": 1])
        }

        @Test(arguments: StoreKind.available)
        func aClientIdIsOneUsersOwnAndAnotherUsersClientOfTheSameIdIsAnotherClient(kind: StoreKind) throws {
            let fixture = try ServiceFixture(kind)
            let request = makeRequest([(cart, try .create(["qty": 1], base: .zero))], client: "ana-phone", sequence: 1)
            let anasAnswer = try fixture.service.push(request, caller: .user("ana"))
            // Ben's replay of Ana's batch is his own client's first batch: not her stored answer,
            // and her document stays hers.
            let bensReplay = try fixture.service.push(request, caller: .user("ben"))
            #expect(bensReplay != anasAnswer)
            guard case .rejected(.notFound, "no document carts/c1")? = try PushResponse(body: bensReplay).results.first else {
                Issue.record("Ben's replay: \(String(decoding: bensReplay, as: UTF8.self))")
                return
            }
            // Numbers are counted per user: Ben's batch 5 does not make Ana's next batch 2 old.
            try fixture.push(
                [(DocumentKey(collection: "carts", id: "b1"), try .create(["x": 1], base: .zero))], as: "ben",
                client: "ana-phone", sequence: 5)
            try fixture.push(
                [(DocumentKey(collection: "carts", id: "a2"), try .create(["x": 2], base: .zero))], as: "ana",
                client: "ana-phone", sequence: 2)
            #expect(statusOf { _ = try fixture.service.push(request, caller: .user("ana")) } == 409, "batch 1 is no longer Ana's last")
            #expect(statusOf { _ = try fixture.service.push(request, caller: .anonymous) } == 401)
            #expect(try fixture.pullAll(as: .user("ana")).map(\.key.id).sorted() == ["a2", "c1"])
            #expect(try fixture.pullAll(as: .user("ben")).map(\.key.id) == ["b1"])
        }

        @Test(arguments: StoreKind.available)
        func aChangeThatCannotBeAppliedIsRefusedOnItsOwnAndTheOthersApply(kind: StoreKind) throws {
            let fixture = try ServiceFixture(
                kind,
                rules: RuleBook(collections: [
                    "orders": PresetRules(read: .owner, write: .owner, requiredFields: [path("total")])
                ]))
            let missing = DocumentKey(collection: "carts", id: "never-created")
            let order = DocumentKey(collection: "orders", id: "o1")
            let results = try fixture.push(
                [
                    (missing, try .update(set: [path("qty"): 1], base: .zero)),
                    (order, try .create(["items": 3], base: .zero)),
                    (cart, try .create(["qty": 1], base: .zero)),
                ], as: "ana", sequence: 1)
            guard case .rejected(.notFound, _) = results[0], case .rejected(.invalid, let message) = results[1], case .applied = results[2]
            else {
                Issue.record("unexpected results: \(results)")
                return
            }
            #expect(message.contains("total"))
            #expect(try fixture.pullAll(as: .user("ana")).map(\.key) == [cart])
        }

        @Test(arguments: StoreKind.available)
        func underManualAConflictingChangeIsNotAppliedAndTheServersDocumentIsReturned(kind: StoreKind) throws {
            let fixture = try ServiceFixture(kind)
            let created = try fixture.push([(cart, try .create(["qty": 1], base: .zero))], as: "ana", sequence: 1)
            guard case .applied(let base, _, _) = created[0] else { return }
            try fixture.push([(cart, try .update(set: [path("qty"): 2], base: base))], as: "ana", client: "ana-laptop", sequence: 1)
            let results = try fixture.push(
                [(cart, try .update(set: [path("qty"): 3], base: base))], as: "ana", sequence: 2, strategy: .manual)
            guard case .unresolved(let server, let conflicts) = results[0] else {
                Issue.record("not unresolved: \(results)")
                return
            }
            #expect(server.document == ["qty": 2] && conflicts.map(\.outcome) == [.unresolved])
            #expect(try fixture.service.document(cart, caller: .user("ana")).state.document == ["qty": 2])
        }

        @Test(arguments: StoreKind.available)
        func aFailureAfterTheCommitIsA500AndTheRetryGetsTheStoredAnswer(kind: StoreKind) throws {
            let failNext = Locked(true)
            let fixture = try ServiceFixture(
                kind,
                afterPushCommit: { _ in
                    if failNext.update({ flag in
                        defer { flag = false }; return flag
                    }) {
                        throw CancellationError()
                    }
                })
            let request = makeRequest([(cart, try .create(["qty": 1], base: .zero))], sequence: 1)
            #expect(statusOf { _ = try fixture.service.push(request, caller: .user("ana")) } == 500)
            let answer = try PushResponse(body: try fixture.service.push(request, caller: .user("ana"))).results
            guard case .applied(let version, _, _) = answer[0] else { return }
            let documents = try fixture.pullAll(as: .user("ana"))
            #expect(documents.count == 1 && documents[0].version == version)
        }

        @Test(arguments: StoreKind.available)
        func versionsAreUniqueAndIncreasingAcrossConcurrentPushers(kind: StoreKind) async throws {
            let fixture = try ServiceFixture(kind)
            let versions = Locked<[Version]>([])
            await withTaskGroup(of: Void.self) { group in
                for client in 0..<4 {
                    group.addTask {
                        for sequence in 1...25 {
                            let key = DocumentKey(collection: "carts", id: "c\(client)-\(sequence)")
                            let results = try? fixture.push(
                                [(key, try! .create(["n": .int(Int64(sequence))], base: .zero))],
                                as: "ana", client: "client-\(client)", sequence: Int64(sequence))
                            if case .applied(let version, _, _)? = results?.first { versions.update { $0.append(version) } }
                        }
                    }
                }
            }
            let assigned = versions.value
            #expect(assigned.count == 100 && Set(assigned).count == 100)
            #expect(try fixture.pullAll(as: .user("ana"), limit: 7).map(\.version) == assigned.sorted())
        }
    }
}

extension ServerSuites {
    @Suite struct PullAndReadTests {
        /// Rules that decide reads as the owner-only preset does, but only on the document read:
        /// a pull must then read every state.
        struct ReadingOwnerOnly: SecurityRules {
            func allowsRead(_ document: StoredDocument, by caller: Caller) -> Bool { caller.userID == document.owner }
            func allowsWrite(before: StoredDocument?, after: StoredDocument, by caller: Caller) -> Bool {
                PresetRules.ownerOnly.allowsWrite(before: before, after: after, by: caller)
            }
            func validate(_ document: StoredDocument) throws(Refusal) {}
            var readRevision: String { PresetRules.ownerOnly.readRevision }
        }

        /// A state as stored goes into a page as the state read would: for random states, existing
        /// or deleted, in both forms of page; and the front of the stored form says whether the
        /// document exists.
        @Test func aStateAsStoredIsWrittenAsTheStateRead() async {
            let failure = await Property.check(
                "stored states copied into pages", cases: 500,
                generate: { choices in
                    var state = DocumentState()
                    for step in 0..<choices.int(in: 1...4) {
                        let version = Version(UInt64(step + 1))
                        switch choices.below(4) {
                        case 0: state.applyLocally(DocumentDelta.delete(base: state.version), at: version)
                        case 1:
                            let elements: [Value] = (0..<choices.below(3)).map { .string("e\($0)") }
                            let change = try? DocumentDelta.update(setAdd: [path("tags"): elements], base: state.version)
                            state.applyLocally(change ?? DocumentDelta(), at: version)
                        default:
                            var data: [String: Value] = [:]
                            for _ in 0..<choices.below(4) {
                                data[choices.element(of: ["a", "b", "note"])] = choices.element(of: [1, "x\"é", 2.5, true, .null, ["k": 1]])
                            }
                            state.applyLocally((try? DocumentDelta.create(data, base: state.version)) ?? DocumentDelta(), at: version)
                        }
                    }
                    return state
                },
                property: { state in
                    let key = DocumentKey(collection: "carts", id: "c1")
                    let stored = EncodedDocument(key: key, owner: "ana", version: Version(9), encodedState: state.encodedBytes)
                    guard stored.exists == state.exists else { return "exists read as \(String(describing: stored.exists))" }
                    guard (try? stored.decoded().state) == state else { return "the stored form reads back otherwise" }
                    for form in [PullForm.state, .full] {
                        var copied = PullResponse.Writer(form: form)
                        var written = PullResponse.Writer(form: form)
                        let isCopied = try? copied.append(key, version: Version(9), exists: state.exists, encodedState: stored.encodedState)
                        guard isCopied == true
                        else { return "not copied into a \(form) page" }
                        written.append(ServerDocument(key: key, version: Version(9), state: state))
                        let copiedBody = copied.finish(cursor: "c", hasMore: false)
                        let writtenBody = written.finish(cursor: "c", hasMore: false)
                        if copiedBody != writtenBody {
                            let copiedText = String(decoding: copiedBody, as: UTF8.self)
                            return "\(form): \(copiedText) vs \(String(decoding: writtenBody, as: UTF8.self))"
                        }
                    }
                    return nil
                })
            if let failure { Issue.record(Comment(rawValue: failure.description)) }
            for front in ["", "{}", #"{"e":[2,1],"f":{}}"#, #"{"e":[1"#, #" {"e":[1,1],"f":{}}"#] {
                #expect(EncodedDocument(key: cart, owner: "ana", version: Version(1), encodedState: Array(front.utf8)).exists == nil)
            }
        }

        /// Under rules that decide reads by the owner, a page of states alone carries each state as
        /// stored, unread: the same pages as rules that read every document to decide (tombstones,
        /// other users' documents skipped, pages cut by bytes).
        @Test(arguments: StoreKind.available)
        func statesCopiedAsStoredMakeTheSamePagesAsStatesRead(kind: StoreKind) throws {
            let fixture = try ServiceFixture(kind, limits: WireLimits(maximumPageBytes: 250))
            let reading = try SyncService(
                store: fixture.test.store, rules: RuleBook(fallback: ReadingOwnerOnly()),
                configuration: ServiceConfiguration(limits: WireLimits(maximumPageBytes: 250), clock: { fixture.now.value }))
            for (index, user) in ["ana", "bo", "ana", "ana", "bo", "ana"].enumerated() {
                let key = DocumentKey(collection: "carts", id: "\(user)-\(index)")
                try fixture.push(
                    [
                        (
                            key,
                            try .create(
                                ["items": ["milk", .string("x\(index)")], "qty": .int(Int64(index)), "note": "é\"\n"], base: .zero)
                        )
                    ],
                    as: user, sequence: Int64(index + 1))
            }
            try fixture.push([(DocumentKey(collection: "carts", id: "ana-2"), .delete(base: Version(3)))], as: "ana", sequence: 10)
            var pages = 0
            var cursor: String?
            var copiedDocuments = 0
            while pages < 20 {
                let copied = try fixture.service.pullBody(cursor: cursor, limit: 3, form: .state, caller: .user("ana"))
                let read = try reading.pullBody(cursor: cursor, limit: 3, form: .state, caller: .user("ana"))
                #expect(String(decoding: copied, as: UTF8.self) == String(decoding: read, as: UTF8.self))
                let page = try PullResponse(body: copied)
                copiedDocuments += page.documents.count
                pages += 1
                cursor = page.cursor
                if !page.hasMore { break }
            }
            #expect(copiedDocuments == 4 && pages > 2)
        }

        let cart = DocumentKey(collection: "carts", id: "c1")

        @Test(arguments: StoreKind.available)
        func pagesFollowVersionOrderAndIncludeTombstones(kind: StoreKind) throws {
            let fixture = try ServiceFixture(kind)
            for index in 0..<10 {
                try fixture.push(
                    [(DocumentKey(collection: "carts", id: "c\(index)"), try .create(["n": .int(Int64(index))], base: .zero))],
                    as: "ana", sequence: Int64(index + 1))
            }
            let created = try fixture.pullAll(as: .user("ana"))
            try fixture.push(
                [(DocumentKey(collection: "carts", id: "c0"), DocumentDelta.delete(base: created[0].version))], as: "ana", sequence: 11)
            let page = try fixture.service.pull(cursor: nil, limit: 4, caller: .user("ana"))
            #expect(page.documents.map(\.key.id) == ["c1", "c2", "c3", "c4"] && page.hasMore)
            let all = try fixture.pullAll(as: .user("ana"), limit: 3)
            #expect(all.map(\.key.id) == (1..<10).map { "c\($0)" } + ["c0"])
            #expect(all.last?.state.exists == false)
            #expect(all.map(\.version) == all.map(\.version).sorted())
        }

        @Test(arguments: StoreKind.available)
        func aPullShowsOnlyWhatTheCallerMayReadNotEvenIds(kind: StoreKind) throws {
            let fixture = try ServiceFixture(kind, rules: RuleBook(collections: ["catalog": PresetRules.publicRead]))
            try fixture.push([(cart, try .create(["secret": "ana's"], base: .zero))], as: "ana", client: "ana", sequence: 1)
            try fixture.push(
                [(DocumentKey(collection: "catalog", id: "p1"), try .create(["name": "milk"], base: .zero))], as: "ana",
                client: "ana", sequence: 2)
            try fixture.push(
                [(DocumentKey(collection: "carts", id: "b1"), try .create(["mine": true], base: .zero))], as: "ben",
                client: "ben", sequence: 1)
            #expect(try fixture.pullAll(as: .user("ben"), limit: 1).map(\.key.id) == ["p1", "b1"])
            #expect(try fixture.pullAll(as: .anonymous).map(\.key.id) == ["p1"])
            #expect(statusOf { _ = try fixture.service.document(cart, caller: .user("ben")) } == 404)
            #expect(
                statusOf { _ = try fixture.service.document(DocumentKey(collection: "carts", id: "none"), caller: .user("ben")) } == 404)
            #expect(try fixture.service.document(cart, caller: .user("ana")).state.document == ["secret": "ana's"])
            // Ben may not overwrite Ana's cart either; the refusal changes nothing.
            let results = try fixture.push(
                [(cart, try .update(set: [path("secret"): "ben's"], base: .zero))], as: "ben", client: "ben", sequence: 2,
                strategy: .clientWins)
            guard case .rejected(.notFound, "no document carts/c1") = results[0] else { Issue.record("\(results)"); return }
            #expect(try fixture.service.document(cart, caller: .user("ana")).state.document == ["secret": "ana's"])
        }

        @Test(arguments: StoreKind.available)
        func aTamperedCursorIsRefusedAndACursorPastExpiredTombstonesMustResync(kind: StoreKind) throws {
            let fixture = try ServiceFixture(kind, retention: 3_600)
            try fixture.push([(cart, try .create(["qty": 1], base: .zero))], as: "ana", sequence: 1)
            let page = try fixture.service.pull(cursor: nil, caller: .user("ana"))
            var tampered = Array(page.cursor)
            tampered[5] = tampered[5] == "A" ? "B" : "A"
            #expect(statusOf { _ = try fixture.service.pull(cursor: String(tampered), caller: .user("ana")) } == 400)
            #expect(statusOf { _ = try fixture.service.pull(cursor: "c1.garbage", caller: .user("ana")) } == 400)
            #expect(statusOf { _ = try fixture.service.pull(cursor: nil, limit: 0, caller: .user("ana")) } == 400)
            #expect(statusOf { _ = try fixture.service.pull(cursor: nil, limit: -5, caller: .user("ana")) } == 400)
            #expect(statusOf { _ = try fixture.service.pull(cursor: nil, limit: 1_000_000, caller: .user("ana")) } == 400)

            let other = DocumentKey(collection: "carts", id: "c2")
            try fixture.push([(other, try .create(["qty": 1], base: .zero))], as: "ana", sequence: 2)
            try fixture.push([(cart, DocumentDelta.delete(base: page.documents[0].version))], as: "ana", sequence: 3)
            fixture.advance(by: 1_800)
            try fixture.service.purgeExpiredTombstones()
            #expect(try fixture.service.pull(cursor: page.cursor, caller: .user("ana")).documents.count == 2) // still kept
            fixture.advance(by: 3_600)
            try fixture.service.purgeExpiredTombstones()
            #expect(statusOf { _ = try fixture.service.pull(cursor: page.cursor, caller: .user("ana")) } == 410)
            // From the beginning there is nothing to miss.
            #expect(try fixture.pullAll(as: .user("ana")).map(\.key) == [other])
        }

        @Test(arguments: StoreKind.available)
        func cursorsAndDocumentsOutliveTheServer(kind: StoreKind) throws {
            let test = try TestStore(kind)
            let cursor: String
            do {
                let service = try SyncService(store: try test.reopened())
                _ = try service.push(makeRequest([(cart, try .create(["qty": 1], base: .zero))], sequence: 1), caller: .user("ana"))
                cursor = try service.pull(cursor: nil, caller: .user("ana")).cursor
                _ = try service.push(
                    makeRequest([(cart, try .update(set: [path("qty"): 2], base: Version(1)))], sequence: 2), caller: .user("ana"))
            }
            // Another server on the same database: a new store, opened after the first server is gone.
            let service = try SyncService(store: try test.reopened())
            #expect(try service.pull(cursor: cursor, caller: .user("ana")).documents.map { $0.state.document } == [["qty": 2]])
        }
    }
}
