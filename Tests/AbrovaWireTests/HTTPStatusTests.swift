import AbrovaCore
import AbrovaWire
import Testing

/// The one table from the domain's reasons for a refusal to the protocol's HTTP statuses.
struct HTTPStatusTests {
    @Test func eachReasonHasItsOwnStatusAndReadsBackFromIt() {
        let statuses = Refusal.Reason.allCases.map(\.httpStatus)
        #expect(Set(statuses).count == statuses.count, "\(statuses)")
        for reason in Refusal.Reason.allCases {
            #expect(Refusal.Reason(httpStatus: reason.httpStatus) == reason, "\(reason)")
            #expect((400...599).contains(reason.httpStatus), "\(reason)")
        }
    }

    @Test func theStatusesSpecProtocolNames() {
        #expect(Refusal.Reason.forbidden.httpStatus == 403 && Refusal.Reason.notFound.httpStatus == 404)
        #expect(Refusal.Reason.staleBatch.httpStatus == 409 && Refusal.Reason.resyncRequired.httpStatus == 410)
        #expect(Refusal.Reason.tooLarge.httpStatus == 413 && Refusal.Reason.reusedBatch.httpStatus == 422)
    }

    @Test func aStatusTheProtocolDoesNotUseReadsAsItsClass() {
        #expect(Refusal.Reason(httpStatus: 418) == .invalid)
        #expect(Refusal.Reason(httpStatus: 502) == .failed)
        #expect(Refusal.Reason(httpStatus: 200) == .failed)
    }

    @Test func anErrorBodyCarriesTheReasonsStatus() throws {
        let refusal = Refusal(.forbidden, "the rules refuse")
        #expect(String(decoding: refusal.body, as: UTF8.self) == #"{"message":"the rules refuse","statusCode":403}"#)
        #expect(Refusal(body: refusal.body) == refusal)
    }
}
