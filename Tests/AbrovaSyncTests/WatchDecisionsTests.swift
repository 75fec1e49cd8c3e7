import Testing

@testable import AbrovaSync

/// The live-update watch's decisions, event by event, without a network.
@Suite struct WatchDecisionsTests {
    /// Decisions with one listener, watching (watch number 1 out).
    static func watching() -> WatchDecisions {
        var decisions = WatchDecisions(isEnabled: true)
        _ = decisions.handle(.listenersChanged(1))
        return decisions
    }

    @Test func aWatchIsHeldOnlyWhileAListenerIsThereInTheForegroundAndOnline() {
        var decisions = WatchDecisions(isEnabled: true)
        #expect(decisions.phase == .idle && !decisions.isLive)
        #expect(decisions.handle(.listenersChanged(1)) == [.watch(number: 1)] && decisions.isLive)
        #expect(decisions.handle(.listenersChanged(2)) == [], "one watch, however many listeners")
        #expect(decisions.handle(.background) == [.cancelWatch] && decisions.phase == .idle)
        #expect(decisions.handle(.foreground) == [.watch(number: 2)])
        #expect(decisions.handle(.serverAvailable(false)) == [.cancelWatch], "disconnected, unreachable or without a token")
        #expect(decisions.handle(.listenersChanged(0)) == [])
        #expect(decisions.handle(.serverAvailable(true)) == [], "no listener")
        #expect(decisions.handle(.listenersChanged(1)) == [.watch(number: 3)])
        #expect(decisions.handle(.listenersChanged(0)) == [.cancelWatch] && !decisions.isLive)

        var off = WatchDecisions(isEnabled: false)
        #expect(off.handle(.listenersChanged(3)) == [] && off.handle(.foreground) == [] && off.handle(.runEnded) == [])
    }

    @Test func newsIsPulledAndWatchedAgainFromTheCursorTheRunSaved() {
        var decisions = Self.watching()
        #expect(decisions.handle(.answered(number: 1, .changed)) == [.pull] && decisions.phase == .pulling)
        #expect(!decisions.isLive, "between the news and the next watch, nothing is held")
        #expect(decisions.handle(.runStarted) == [])
        #expect(decisions.handle(.runEnded) == [], "the pull's own run ends before the pull is told")
        #expect(decisions.handle(.pullEnded(advanced: true)) == [.watch(number: 2)])
        #expect(decisions.handle(.answered(number: 2, .unchanged)) == [.watch(number: 3)], "quiet: watch again at once")
    }

    @Test func aRunThatDidNotMoveTheCursorWaitsBeforeTheNextWatch() {
        var decisions = Self.watching()
        _ = decisions.handle(.answered(number: 1, .changed))
        #expect(decisions.handle(.pullEnded(advanced: false)) == [.backOff(attempt: 1)])
        #expect(decisions.handle(.backoffEnded(attempt: 1)) == [.watch(number: 2)])
    }

    @Test func aServerWithoutTheRouteIsNotAskedAgain() {
        var decisions = Self.watching()
        #expect(decisions.handle(.answered(number: 1, .failed(.refused(reason: .notFound, message: "no route")))) == [])
        #expect(decisions.phase == .noRoute)
        for event: WatchDecisions.Event in [
            .listenersChanged(0), .listenersChanged(1), .background, .foreground, .serverAvailable(false), .serverAvailable(true),
            .tokenReplaced, .runEnded,
        ] {
            #expect(decisions.handle(event) == [], "\(event)")
        }
    }

    @Test func aStaleCursorIsResyncedByARunAndARefusedTokenWaitsForANewOne() {
        for reason in [Refusal.Reason.invalid, .resyncRequired] {
            var decisions = Self.watching()
            #expect(decisions.handle(.answered(number: 1, .failed(.refused(reason: reason, message: "cursor")))) == [.pull])
            #expect(decisions.handle(.pullEnded(advanced: true)) == [.watch(number: 2)])
        }
        var decisions = Self.watching()
        #expect(decisions.handle(.answered(number: 1, .failed(.unauthorized("expired")))) == [] && decisions.phase == .unauthorized)
        #expect(decisions.handle(.listenersChanged(2)) == [] && decisions.handle(.foreground) == [])
        #expect(decisions.handle(.tokenReplaced) == [.watch(number: 2)])
    }

    @Test func failuresBackOffUntilAWatchIsAnswered() {
        var decisions = Self.watching()
        let unreachable = WatchDecisions.Outcome.failed(.unreachable("503: Service Unavailable"))
        #expect(decisions.handle(.answered(number: 1, unreachable)) == [.backOff(attempt: 1)] && !decisions.isLive)
        #expect(decisions.handle(.backoffEnded(attempt: 1)) == [.watch(number: 2)])
        #expect(decisions.handle(.answered(number: 2, unreachable)) == [.backOff(attempt: 2)])
        #expect(decisions.handle(.backoffEnded(attempt: 1)) == [], "a stale wake-up")
        #expect(decisions.handle(.backoffEnded(attempt: 2)) == [.watch(number: 3)])
        #expect(decisions.handle(.answered(number: 3, .failed(.refused(reason: .forbidden, message: "no")))) == [.backOff(attempt: 3)])
        _ = decisions.handle(.backoffEnded(attempt: 3))
        #expect(decisions.handle(.answered(number: 4, .unchanged)) == [.watch(number: 5)])
        #expect(decisions.handle(.answered(number: 5, unreachable)) == [.backOff(attempt: 1)], "an answer starts the backoff again")
        // The server coming back (the probe found it, a run got through) cuts the wait short.
        _ = decisions.handle(.serverAvailable(false))
        #expect(decisions.phase == .idle)
        var waiting = Self.watching()
        _ = waiting.handle(.answered(number: 1, unreachable))
        #expect(waiting.handle(.serverAvailable(false)) == [.cancelBackoff])
        #expect(waiting.handle(.serverAvailable(true)) == [.watch(number: 2)])
        var backingOff = Self.watching()
        _ = backingOff.handle(.answered(number: 1, unreachable))
        #expect(backingOff.handle(.listenersChanged(0)) == [.cancelBackoff] && backingOff.phase == .idle)
    }

    @Test func anAnswerToACancelledWatchIsIgnored() {
        var decisions = Self.watching()
        _ = decisions.handle(.background)
        _ = decisions.handle(.foreground)
        #expect(decisions.handle(.answered(number: 1, .failed(.unreachable("the request was cancelled")))) == [])
        #expect(decisions.handle(.answered(number: 1, .changed)) == [] && decisions.phase == .watching(number: 2))
        // A new token replaces the watch out (it carries the old one).
        #expect(decisions.handle(.tokenReplaced) == [.cancelWatch, .watch(number: 3)])
        #expect(decisions.handle(.answered(number: 2, .failed(.unauthorized("old token")))) == [])
    }

    @Test func aWatchStartsBetweenRunsAndOneOutStaysThroughARun() {
        var decisions = WatchDecisions(isEnabled: true)
        _ = decisions.handle(.runStarted)
        #expect(decisions.handle(.listenersChanged(1)) == [], "the run will move the cursor")
        #expect(decisions.handle(.runEnded) == [.watch(number: 1)])
        #expect(decisions.handle(.runStarted) == [] && decisions.isLive)
        // News while a run is going: one pull (it joins or follows the run), one watch after.
        #expect(decisions.handle(.answered(number: 1, .changed)) == [.pull])
        #expect(decisions.handle(.runEnded) == [])
        _ = decisions.handle(.runStarted)
        #expect(decisions.handle(.pullEnded(advanced: true)) == [], "the follow-up run is going")
        #expect(decisions.handle(.runEnded) == [.watch(number: 2)])
    }

    @Test func closingStopsForGood() {
        var decisions = Self.watching()
        #expect(decisions.handle(.close) == [.cancelWatch] && decisions.phase == .closed)
        #expect(
            decisions.handle(.listenersChanged(2)) == [] && decisions.handle(.tokenReplaced) == [] && decisions.handle(.foreground) == [])
    }

    @Test func theConnectionStateIsLiveWhileConnectedWithAWatchOut() {
        var decisions = WatchDecisions(isEnabled: true)
        #expect(decisions.shown(.connected) == .connected)
        _ = decisions.handle(.listenersChanged(1))
        #expect(decisions.shown(.connected) == .live)
        #expect(decisions.shown(.connecting) == .connecting, "live only once the server has answered")
        _ = decisions.handle(.answered(number: 1, .failed(.unreachable("reset"))))
        #expect(decisions.shown(.connected) == .connected)
    }
}
