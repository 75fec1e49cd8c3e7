import AbrovaCore
import Testing

@testable import AbrovaWire

/// The watch's answer, read strictly, and the watch's idle time in the health answer.
@Suite struct WatchAndHealthTests {
    @Test func aWatchAnswerReadsBackAndNothingElseIsOne() throws {
        for changed in [true, false] {
            let answer = WatchResponse(changed: changed)
            #expect(try WatchResponse(body: answer.body) == answer)
        }
        #expect(String(decoding: WatchResponse(changed: true).body, as: UTF8.self) == #"{"changed":true}"#)
        for body in [#"{}"#, #"{"changed":1}"#, #"{"changed":"true"}"#, #"{"changed":true,"cursor":"c"}"#, #"[true]"#, "<html>", ""] {
            #expect(throws: Refusal.self, "\(body)") { try WatchResponse(body: Array(body.utf8)) }
        }
    }

    @Test func theWatchIdleTimeIsAnnouncedWithTheLimitsAndOptional() throws {
        let limits = ServerLimits(
            maximumChanges: 1_000, maximumPushBytes: 16 << 20, maximumPageSize: 1_000, maximumPageBytes: 8 << 20, watchIdleSeconds: 25)
        let body = HealthResponse(limits: limits).body
        #expect(String(decoding: body, as: UTF8.self).contains(#""watchIdleSeconds":25"#))
        #expect(HealthResponse(body: body)?.limits == limits)
        // An older server announces the limits without it; a newer one may put it beside them.
        var older = limits
        older.watchIdleSeconds = nil
        #expect(HealthResponse(body: HealthResponse(limits: older).body)?.limits?.watchIdleSeconds == nil)
        let beside = Array(
            #"{"limits":{"maximumChanges":1,"maximumPageBytes":1,"maximumPageSize":1,"maximumPushBytes":1},"status":"ok","watchIdleSeconds":40}"#
                .utf8)
        #expect(HealthResponse(body: beside)?.limits?.watchIdleSeconds == 40)
        let negative = Array(
            #"{"limits":{"maximumChanges":1,"maximumPageBytes":1,"maximumPageSize":1,"maximumPushBytes":1,"watchIdleSeconds":0},"status":"ok"}"#
                .utf8)
        #expect(HealthResponse(body: negative)?.limits?.watchIdleSeconds == nil, "a time that is not positive is not announced")
    }
}
