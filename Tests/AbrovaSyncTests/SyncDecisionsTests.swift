import AbrovaWire
import Foundation
import Testing

@testable import AbrovaSync

/// The engine's decisions, event by event, without a network.
@Suite struct SyncDecisionsTests {
    @Test func aRunThatCannotReachTheServerGoesOfflineAndProbesUntilItIsBack() {
        var decisions = SyncDecisions(syncOnReconnect: true)
        #expect(decisions.handle(.runStarted) == [] && decisions.syncState == .syncing)
        #expect(decisions.handle(.runEnded(.unreachable)) == [.startProbing])
        #expect(decisions.syncState == .offline && decisions.connection == .disconnected && !decisions.isOnline)
        #expect(decisions.handle(.requestUnreachable) == [], "one probe at a time")
        #expect(decisions.handle(.probeFoundServer) == [.sync])
        #expect(decisions.isOnline && decisions.connection == .connected)
        #expect(decisions.handle(.runEnded(.completed)) == [.resetBackoff] && decisions.syncState == .idle)
    }

    @Test func withoutSyncOnReconnectTheServerComingBackSendsNothing() {
        var decisions = SyncDecisions(syncOnReconnect: false)
        _ = decisions.handle(.runEnded(.unreachable))
        #expect(decisions.handle(.probeFoundServer) == [])
        #expect(decisions.syncState == .idle && decisions.isOnline)
        _ = decisions.handle(.disconnect)
        #expect(decisions.handle(.reconnect) == [] && decisions.syncState == .idle)
    }

    @Test func disconnectStopsProbingAndRunsUntilReconnect() {
        var decisions = SyncDecisions(syncOnReconnect: true)
        _ = decisions.handle(.runEnded(.unreachable))
        #expect(decisions.handle(.disconnect) == [.stopProbing])
        #expect(!decisions.mayRun && decisions.syncState == .offline && decisions.connection == .disconnected)
        #expect(decisions.handle(.probeFoundServer) == [], "a late probe changes nothing while disconnected")
        #expect(decisions.handle(.runEnded(.unreachable)) == [] && decisions.syncState == .offline)
        #expect(decisions.handle(.tokenReplaced) == [])
        #expect(decisions.handle(.reconnect) == [.sync] && decisions.mayRun && decisions.connection == .connecting)
        #expect(decisions.handle(.reconnect) == [], "reconnecting twice does nothing more")
    }

    @Test func aFailedRunIsTriedAgainLaterUnlessTheAppDisconnected() {
        var decisions = SyncDecisions(syncOnReconnect: true)
        _ = decisions.handle(.runStarted)
        #expect(decisions.handle(.runEnded(.failed)) == [.retryLater] && decisions.syncState == .error)
        _ = decisions.handle(.disconnect)
        #expect(decisions.handle(.runEnded(.failed)) == [])
    }

    @Test func aRefusedTokenStopsSyncUntilANewOne() {
        var decisions = SyncDecisions(syncOnReconnect: true)
        _ = decisions.handle(.runStarted)
        #expect(decisions.handle(.runEnded(.unauthorized)) == [])
        #expect(decisions.syncState == .error && decisions.connection == .error)
        #expect(
            decisions.handle(.runReachedServer) == [] && decisions.connection == .error, "a reachable server does not clear a refused token"
        )
        #expect(decisions.handle(.tokenReplaced) == [.sync] && decisions.connection == .connecting)
        _ = decisions.handle(.runEnded(.completed))
        #expect(decisions.syncState == .idle && decisions.connection == .connected)
    }

    @Test func anOnlineReadTellsWhetherTheServerIsThere() {
        var decisions = SyncDecisions(syncOnReconnect: true)
        #expect(decisions.handle(.requestUnreachable) == [.startProbing] && !decisions.isOnline)
        #expect(decisions.handle(.requestGotThrough) == [.sync] && decisions.isOnline)
        #expect(decisions.handle(.requestGotThrough) == [], "nothing to resume when it was there all along")
    }

    @Test func theNetworkPathComingUpProbesAtOnceAndGoingAwayGoesOffline() {
        var decisions = SyncDecisions(syncOnReconnect: true)
        #expect(decisions.handle(.networkAvailable) == [], "nothing to do while the server answers")
        #expect(decisions.handle(.networkLost) == [.startProbing] && !decisions.isOnline && decisions.syncState == .offline)
        #expect(decisions.handle(.networkLost) == [])
        #expect(
            decisions.handle(.networkAvailable) == [.probeNow] && !decisions.isOnline, "the probe, not the path, says the server is back")
        #expect(decisions.handle(.probeFoundServer) == [.sync])
        _ = decisions.handle(.disconnect)
        #expect(decisions.handle(.networkLost) == [] && decisions.handle(.networkAvailable) == [], "the app's disconnect wins")
    }

    @Test func comingToTheForegroundSyncsAsAStartDoes() {
        var decisions = SyncDecisions(syncOnReconnect: false)
        #expect(decisions.handle(.foreground) == [.sync], "even without syncOnReconnect, as at start")
        _ = decisions.handle(.runEnded(.unreachable))
        #expect(decisions.handle(.foreground) == [.sync], "a run tries even while the probe waits")
        _ = decisions.handle(.disconnect)
        #expect(decisions.handle(.foreground) == [])
    }

    @Test func aRunReachingTheServerEndsTheProbe() {
        var decisions = SyncDecisions(syncOnReconnect: true)
        _ = decisions.handle(.runEnded(.unreachable))
        #expect(decisions.handle(.runReachedServer) == [.stopProbing] && decisions.isOnline)
    }

    @Test func closingStopsEverything() {
        var decisions = SyncDecisions(syncOnReconnect: true)
        #expect(decisions.handle(.close) == [.stopProbing] && !decisions.mayRun)
    }
}

/// How big batches are, and what a refusal of a whole push means for its changes, without a network.
@Suite struct BatchLimitsTests {
    @Test func batchesKeepToTheSettingTheAnnouncedLimitsAndASplit() {
        var limits = BatchLimits()
        #expect(limits.needsAnnouncement)
        #expect(limits.changes(500) == 500 && limits.bytes == BatchLimits.unannouncedBytes)
        limits.announce(ServerLimits(maximumChanges: 100, maximumPushBytes: 64 << 10, maximumPageSize: 1_000, maximumPageBytes: 1 << 20))
        #expect(!limits.needsAnnouncement && limits.changes(500) == 100 && limits.changes(20) == 20 && limits.bytes == 64 << 10)
        limits.split(changes: 100, bytes: 60_000)
        #expect(limits.changes(500) == 50 && limits.bytes == 30_000 && limits.needsAnnouncement)
        limits.split(changes: 1, bytes: 1)
        #expect(limits.changes(500) == 1 && limits.bytes == 1, "never below one change")
        limits.endSplit()
        #expect(limits.changes(500) == 100 && limits.bytes == 64 << 10)
    }

    @Test func onlyASizeOrUnreadableChangeRefusalSplitsAndOnlyAChangeAloneIsRejected() {
        #expect(BatchRefusal(.refused(reason: .tooLarge, message: "too large"), units: 9) == .split)
        #expect(BatchRefusal(.refused(reason: .invalid, message: "bad delta"), units: 2) == .split)
        #expect(
            BatchRefusal(.refused(reason: .tooLarge, message: "too large"), units: 1)
                == .rejectChange(reason: .tooLarge, message: "too large"))
        for reason in [Refusal.Reason.forbidden, .notFound, .methodNotAllowed, .staleBatch, .unsupportedEncoding, .reusedBatch] {
            #expect(BatchRefusal(.refused(reason: reason, message: "no"), units: 1) == .endRun, "\(reason)")
        }
        #expect(BatchRefusal(.unreachable("gone"), units: 5) == .endRun)
        #expect(BatchRefusal(.unauthorized("expired"), units: 5) == .endRun)
    }
}

/// The default store: per app and per user, in a place that is kept (not the temporary folder).
@Suite struct DefaultStorePathTests {
    @Test func eachUserOfEachAppHasAStoreOfTheirOwnInAPlaceThatIsKept() throws {
        let ana = try AbrovaSyncConfigBuilder.defaultStorePath(apiKey: "app-key", userId: "ana")
        let ben = try AbrovaSyncConfigBuilder.defaultStorePath(apiKey: "app-key", userId: "ben")
        let otherApp = try AbrovaSyncConfigBuilder.defaultStorePath(apiKey: "other-key", userId: "ana")
        #expect(Set([ana, ben, otherApp]).count == 3)
        #expect(ana == (try AbrovaSyncConfigBuilder.defaultStorePath(apiKey: "app-key", userId: "ana")))
        #expect(ana.contains("/AbrovaSync/app-key/") && ana.hasSuffix("/ana.sqlite"))
        #expect(!ana.hasPrefix(FileManager.default.temporaryDirectory.path))
        #expect(try AbrovaSyncConfigBuilder(apiKey: "app-key").userId("ben").build().storePath == ben)
    }

    @Test func namesThatAreNotSafeInAPathAreEscapedAndNeverShareAFile() {
        #expect(AbrovaSyncConfigBuilder.fileName("../etc/passwd") == "~2E~2E~2Fetc~2Fpasswd")
        #expect(AbrovaSyncConfigBuilder.fileName("a b") != AbrovaSyncConfigBuilder.fileName("a_b"))
        #expect(AbrovaSyncConfigBuilder.fileName("") == "~")
        let long = String(repeating: "x", count: 300)
        #expect(
            AbrovaSyncConfigBuilder.fileName(long).count < 200
                && AbrovaSyncConfigBuilder.fileName(long) != AbrovaSyncConfigBuilder.fileName(long + "y"))
    }
}
