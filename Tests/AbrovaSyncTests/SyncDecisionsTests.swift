@testable import AbrovaSync
import Testing

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

    @Test func aRefusedTokenStopsSyncUntilANewOne() {
        var decisions = SyncDecisions(syncOnReconnect: true)
        _ = decisions.handle(.runStarted)
        #expect(decisions.handle(.runEnded(.unauthorized)) == [])
        #expect(decisions.syncState == .error && decisions.connection == .error)
        #expect(decisions.handle(.runReachedServer) == [] && decisions.connection == .error, "a reachable server does not clear a refused token")
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
        #expect(decisions.handle(.networkAvailable) == [.probeNow] && !decisions.isOnline, "the probe, not the path, says the server is back")
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
