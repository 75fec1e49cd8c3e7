import AbrovaCore
import AbrovaTestSupport
import Testing

/// `FieldValue.serverTimestamp()` as deltas: an assignment of the device's estimate, marked for
/// the server to write its own time over.
@Suite struct ServerTimestampDeltaTests {
    let seenAt = try! FieldPath("seenAt")
    let estimate = Timestamp(microsecondsSince1970: 1_000_000)
    let serverTime = Timestamp(microsecondsSince1970: 9_000_000)

    @Test func theServerWritesItsTimeOverTheEstimate() throws {
        let change = try DocumentDelta.update(set: [try FieldPath("text"): "hi"], serverTimestamps: [seenAt: estimate], base: .zero)
        #expect(change.hasServerTimestamps)
        #expect(change.assignments[seenAt] == DocumentDelta.Assignment(value: .timestamp(estimate), base: .zero, isServerTimestamp: true))

        let message = try ConflictStrategy.serverWins.apply(
            try DocumentDelta.create(["text": "draft"], base: .zero), to: DocumentState(), version: Version(1)
        ).state
        let device = message.applyingLocally(change, at: Version(2))
        #expect(device.document?[seenAt] == .timestamp(estimate))

        let stamped = change.stampingServerTimestamps(with: serverTime)
        #expect(stamped.assignments[seenAt]?.value == .timestamp(serverTime))
        #expect(stamped.assignments[try FieldPath("text")]?.value == "hi")
        let server = try ConflictStrategy.serverWins.apply(stamped, to: message, version: Version(2)).state
        #expect(server.document?[seenAt] == .timestamp(serverTime))
    }

    @Test func aLaterWriteOfThePathDecidesWhetherTheServersTimeIsWritten() throws {
        var valueLast = try DocumentDelta.update(serverTimestamps: [seenAt: estimate], base: .zero)
        valueLast.compose(with: try DocumentDelta.update(set: [seenAt: 5], base: .zero))
        #expect(!valueLast.hasServerTimestamps && valueLast.assignments[seenAt]?.value == 5)

        var stampLast = try DocumentDelta.update(set: [seenAt: 5], base: Version(2))
        stampLast.compose(with: try DocumentDelta.update(serverTimestamps: [seenAt: estimate], base: Version(4)))
        #expect(
            stampLast.assignments[seenAt]
                == DocumentDelta.Assignment(value: .timestamp(estimate), base: Version(2), isServerTimestamp: true))
    }

    @Test func onlyTimestampsAreMarked() throws {
        var change = try DocumentDelta.update(set: [seenAt: 5], base: .zero)
        change.markServerTimestamps([seenAt, try FieldPath("missing")])
        #expect(!change.hasServerTimestamps)
    }

    @Test func theMarkRoundTripsThroughBothEncodings() throws {
        let change = try DocumentDelta.update(
            set: [try FieldPath("text"): "hi"], serverTimestamps: [seenAt: estimate, try FieldPath("m.at"): estimate], base: Version(3))
        var bytes: [UInt8] = []
        change.writeEncoded(to: &bytes)
        let text = String(decoding: bytes, as: UTF8.self)
        #expect(text == change.encoded.canonicalJSON)
        #expect(text.contains(#""serverTimestamps":{"m.at":"#))
        #expect(try DocumentDelta(encoded: Value(json: text)) == change)
        var reader = JSONReader(bytes: bytes)
        guard case .delta(let read) = try DocumentDelta.read(from: &reader) else {
            Issue.record("the one-pass reader refused \(text)")
            return
        }
        #expect(read == change)
    }
}
