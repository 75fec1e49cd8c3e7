import AbrovaCore
import Testing

@testable import AbrovaServer

/// What one scan tells each watch, without a store.
@Suite struct WatchDecisionsTests {
    static let rules = RuleBook(collections: ["board": PresetRules.anyAuthenticatedUser], fallback: PresetRules.ownerOnly)

    static func row(_ collection: String, _ id: String, owner: String, version: UInt64) -> StoredDocument {
        StoredDocument(key: DocumentKey(collection: collection, id: id), owner: owner, version: Version(version), state: DocumentState())
    }

    @Test func aWatchWakesOnlyForAReadableChangeAfterItsPositionInItsCollections() {
        let rows = [Self.row("diary", "a", owner: "ana", version: 5), Self.row("board", "b", owner: "ana", version: 7)]
        let watches = [
            WatchPosition(caller: .user("ben"), after: Version(4), collections: nil), // the board change is his to read
            WatchPosition(caller: .user("ben"), after: Version(7), collections: nil), // he has pulled past it
            WatchPosition(caller: .user("ben"), after: Version(4), collections: ["diary"]), // only ana's diary: not his
            WatchPosition(caller: .user("ana"), after: Version(4), collections: ["diary"]), // her own diary
            WatchPosition(caller: .anonymous, after: Version(4), collections: nil), // the board needs a user
        ]
        let decisions = WatchDecisions(watches, rows: rows, scannedTo: Version(7), rules: Self.rules)
        #expect(decisions.outcomes.map(\.wakes) == [true, false, false, true, false])
        // The ones left waiting move past what was scanned, never back.
        #expect(decisions.outcomes[1].after == Version(7) && decisions.outcomes[2].after == Version(7))
        let ahead = WatchDecisions(
            [WatchPosition(caller: .user("ben"), after: Version(9), collections: nil)], rows: rows,
            scannedTo: Version(7), rules: Self.rules)
        #expect(ahead.outcomes.map(\.after) == [Version(9)])
    }
}
