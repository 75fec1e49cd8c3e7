import AbrovaCore
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

@_spi(Testing) @testable import AbrovaServer

/// `GET /v1/watch` below HTTP: a watch wakes for a change its caller may read, and for nothing
/// else, on both stores and across server processes on one PostgreSQL database.
@Suite struct WatchTests {
    static let rules = RuleBook(collections: ["board": PresetRules.anyAuthenticatedUser], fallback: PresetRules.ownerOnly)
    static let board = DocumentKey(collection: "board", id: "b1")
    static let diary = DocumentKey(collection: "diary", id: "ana:d1")

    static func service(on store: any ServerStore, idle: Duration = .seconds(20), maximumWatches: Int = 10_000) throws -> SyncService {
        var configuration = ServiceConfiguration()
        configuration.watchIdleTime = idle
        configuration.maximumWatches = maximumWatches
        return try SyncService(store: store, rules: rules, configuration: configuration)
    }

    /// What a watch answered and when, counted from its start.
    final class Outcome: Sendable {
        private let answer = Locked<(changed: Bool, after: Duration)?>(nil)
        let started = ContinuousClock.now
        func record(_ changed: Bool) { answer.update { $0 = $0 ?? (changed, ContinuousClock.now - started) } }
        var value: (changed: Bool, after: Duration)? { answer.value }

        func wait(upTo limit: Duration) async -> (changed: Bool, after: Duration)? {
            let deadline = ContinuousClock.now + limit
            while value == nil, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(5)) }
            return value
        }
    }

    static func watch(_ service: SyncService, as user: String, from cursor: String?) throws -> Outcome {
        let outcome = Outcome()
        try service.prepareWatch(cursor: cursor, caller: .user(user)).wait { outcome.record($0) }
        return outcome
    }

    static func push(_ service: SyncService, _ key: DocumentKey, as user: String, sequence: Int64) throws {
        _ = try service.push(
            makeRequest([(key, try .create(["n": .int(sequence)], base: .zero))], client: user, sequence: sequence),
            caller: .user(user))
    }

    @Test(arguments: StoreKind.available)
    func aWatchWakesForAChangeItsCallerMayReadAndNotBefore(kind: StoreKind) async throws {
        let test = try TestStore(kind)
        let service = try Self.service(on: test.store)
        let cursor = try service.pull(cursor: nil, caller: .user("ben")).cursor
        let outcome = try Self.watch(service, as: "ben", from: cursor)
        try await Task.sleep(for: .milliseconds(100))
        #expect(outcome.value == nil, "a watch with nothing new answered \(String(describing: outcome.value))")
        try Self.push(service, Self.board, as: "ana", sequence: 1)
        let answer = await outcome.wait(upTo: .seconds(5))
        #expect(answer?.changed == true)
        #expect(service.watchCount == 0)
    }

    @Test(arguments: StoreKind.available)
    func aChangeTheCallerMayNotReadNeitherWakesNorShortensAWatch(kind: StoreKind) async throws {
        let test = try TestStore(kind)
        let service = try Self.service(on: test.store, idle: .milliseconds(600))
        let cursor = try service.pull(cursor: nil, caller: .user("ben")).cursor
        let outcome = try Self.watch(service, as: "ben", from: cursor)
        for sequence in 1...5 {
            try Self.push(service, DocumentKey(collection: "diary", id: "ana:d\(sequence)"), as: "ana", sequence: Int64(sequence))
        }
        let answer = await outcome.wait(upTo: .seconds(5))
        #expect(answer?.changed == false)
        #expect((answer?.after ?? .zero) >= .milliseconds(600), "answered after \(String(describing: answer?.after))")
    }

    @Test(arguments: StoreKind.available)
    func aWatchBehindAReadableChangeIsAnsweredAtOnceAndOneOfAnotherCollectionIsNot(kind: StoreKind) async throws {
        let test = try TestStore(kind)
        let service = try Self.service(on: test.store, idle: .milliseconds(400))
        try Self.push(service, Self.board, as: "ana", sequence: 1)
        #expect(await (try Self.watch(service, as: "ben", from: nil)).wait(upTo: .seconds(5))?.changed == true)
        let other = Outcome()
        try service.prepareWatch(cursor: nil, collections: ["elsewhere"], caller: .user("ben")).wait { other.record($0) }
        #expect(await other.wait(upTo: .seconds(5))?.changed == false)
    }

    @Test func aBadCursorIsRefusedAndWatchesHaveTheirOwnLimit() throws {
        let test = try TestStore(.sqlite)
        let service = try Self.service(on: test.store, maximumWatches: 2)
        let forged = #expect(throws: Refusal.self) { try service.prepareWatch(cursor: "c1.forged", caller: .user("ben")) }
        #expect(forged?.reason == .invalid)
        _ = try Self.watch(service, as: "ben", from: nil)
        _ = try Self.watch(service, as: "cy", from: nil)
        let refusal = #expect(throws: Refusal.self) { try service.prepareWatch(cursor: nil, caller: .user("dee")) }
        #expect(refusal?.reason == .overloaded)
    }

    @Test func aCancelledWatchLeavesAtOnceFreesItsPlaceAndIsNeverAnswered() async throws {
        let test = try TestStore(.sqlite)
        let service = try Self.service(on: test.store, maximumWatches: 1)
        let cursor = try service.pull(cursor: nil, caller: .user("ben")).cursor
        let cancelled = Outcome()
        let waiting = try service.prepareWatch(cursor: cursor, caller: .user("ben")).wait { cancelled.record($0) }
        #expect(service.watchCount == 1)
        waiting.cancel()
        #expect(service.watchCount == 0)
        // Its place is free, and a readable change answers only the watch that took it.
        let next = try Self.watch(service, as: "ben", from: cursor)
        try Self.push(service, Self.board, as: "ana", sequence: 1)
        #expect(await next.wait(upTo: .seconds(5))?.changed == true)
        waiting.cancel() // again, and after the hub moved on: nothing
        service.stopWatching()
        try await Task.sleep(for: .milliseconds(100))
        #expect(cancelled.value == nil, "a cancelled watch was answered \(String(describing: cancelled.value))")
    }

    @Test func aServiceThatStopsWatchingAnswersEveryWatchNothingNew() async throws {
        let test = try TestStore(.sqlite)
        let service = try Self.service(on: test.store)
        let outcomes = try (0..<20).map { _ in try Self.watch(service, as: "ben", from: nil) }
        service.stopWatching()
        for outcome in outcomes { #expect(await outcome.wait(upTo: .seconds(2))?.changed == false) }
        let late = try Self.watch(service, as: "ben", from: nil)
        #expect(late.value?.changed == false, "a watch after the stop waited")
    }

    /// Many watches arriving at once are checked in a few passes, and the hub then rests: no
    /// pass per watch once they have all arrived (each pass looks at every watch; a few passes may
    /// race the last arrivals, where one per watch made 2,000).
    @Test func theHubRestsOnceManyWatchesHaveArrived() async throws {
        let test = try TestStore(.sqlite)
        let hub = WatchHub(store: test.store, rules: Self.rules, idleTime: .seconds(60), maximumWatches: 10_000, pageBytes: 1 << 20) { _ in
        }
        defer { hub.close() }
        let added = (0..<2_000).filter { index in
            hub.add(WatchPosition(caller: .user("user-\(index)"), after: .zero, collections: nil)) { _ in } != nil
        }
        #expect(added.count == 2_000)
        let afterArrivals = hub.passes
        var seen = -1
        let deadline = ContinuousClock.now + .seconds(30)
        while hub.passes != seen, ContinuousClock.now < deadline {
            seen = hub.passes
            try await Task.sleep(for: .milliseconds(200))
        }
        #expect(hub.passes - afterArrivals <= 10, "\(hub.passes - afterArrivals) passes after the last watch arrived")
        #expect(hub.count == 2_000)
    }

    @Test func aCommitOnOneProcessWakesTheWatchesOfAnotherThroughPostgreSQL() async throws {
        guard PostgresTestDatabase.isAvailable else { return }
        let test = try TestStore(.postgres)
        let other = try PostgresServerStore(url: try #require(test.postgresURL), maximumConnections: 2)
        let watching = try Self.service(on: other)
        let writing = try Self.service(on: test.store)
        // The first watch starts the process's listener; once it is answered the listener is up
        // (it answers only through the listener: its own start-up check, or the notification).
        let first = try Self.watch(watching, as: "ben", from: try watching.pull(cursor: nil, caller: .user("ben")).cursor)
        try Self.push(writing, Self.board, as: "ana", sequence: 1)
        #expect(await first.wait(upTo: .seconds(60))?.changed == true)
        // This one only the other process's notification can wake before its idle time (20 s).
        let second = try Self.watch(watching, as: "ben", from: try watching.pull(cursor: nil, caller: .user("ben")).cursor)
        try Self.push(writing, DocumentKey(collection: "board", id: "b2"), as: "ana", sequence: 2)
        let answer = await second.wait(upTo: .seconds(15))
        #expect(answer?.changed == true, "not woken by the other process's commit: \(String(describing: answer))")
    }

}
