import AbrovaCore
import AbrovaTestSupport
import Foundation
import Testing

/// Timestamps and bytes: their JSON forms (`{"$timestamp": RFC 3339}`, `{"$bytes": base64}`), the
/// reserved `$` names that keep those forms apart from maps, and the limits of each.
@Suite struct TimestampAndBytesTests {
    /// The error writing the JSON `text` as a field's value gives (a text that is not exactly a
    /// timestamp's or bytes' form reads as a map, which a write refuses).
    static func writeError(_ text: String) -> ValueError? {
        do {
            _ = try DocumentDelta.create(["v": try Value(json: text)], base: .zero)
            return nil
        } catch {
            return error
        }
    }

    @Test(
        arguments: [
            (0, "1970-01-01T00:00:00.000000Z"),
            (-1, "1969-12-31T23:59:59.999999Z"),
            (1_709_164_800_123_456, "2024-02-29T00:00:00.123456Z"),
            (951_782_400_000_000, "2000-02-29T00:00:00.000000Z"),
            (-62_167_219_200_000_000, "0000-01-01T00:00:00.000000Z"),
            (253_402_300_799_999_999, "9999-12-31T23:59:59.999999Z"),
            (-2_208_988_800_000_000, "1900-01-01T00:00:00.000000Z"),
        ] as [(Int64, String)])
    func timestampsReadAndWriteRFC3339(microseconds: Int64, text: String) throws {
        let value = Value.timestamp(Timestamp(microsecondsSince1970: microseconds))
        #expect(value.canonicalJSON == #"{"$timestamp":"\#(text)"}"#)
        #expect(try Value(json: value.canonicalJSON) == value)
        #expect(value.canonicalByteCount == value.canonicalJSON.utf8.count)
    }

    /// Every storable timestamp's text reads back as itself, has 27 characters, and text order is
    /// time order (which range queries on the device rely on).
    @Test func textOrderIsTimeOrder() async {
        let span = Timestamp.latestStorable.microsecondsSince1970 - Timestamp.earliestStorable.microsecondsSince1970
        let failure = await Property.check(
            "timestamps as text",
            generate: { choices in
                (0..<2).map { _ in
                    Timestamp(
                        microsecondsSince1970: Timestamp.earliestStorable.microsecondsSince1970 + Int64(choices.next() % UInt64(span + 1)))
                }
            },
            property: { (pair: [Timestamp]) in
                let texts = pair.map(\.description)
                for (timestamp, text) in zip(pair, texts) {
                    guard text.utf8.count == 27, Timestamp(rfc3339: text.utf8) == timestamp else { return "\(text) does not read back" }
                }
                return (texts[0] < texts[1]) == (pair[0] < pair[1]) ? nil : "\(texts) order differs from the times'"
            })
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
    }

    @Test(arguments: [
        "2023-02-29T00:00:00.000000Z", "2026-13-01T00:00:00.000000Z", "2026-04-31T00:00:00.000000Z", "2026-01-01T24:00:00.000000Z",
        "2026-01-01T00:60:00.000000Z", "2026-01-01T00:00:60.000000Z", "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:00.000000z",
        "2026-01-01 00:00:00.000000Z", "2026-01-01T00:00:00.000000+00:00", "+2026-01-01T00:00:00.00000Z", "2026-00-10T00:00:00.000000Z",
    ])
    func malformedTimestampsAreRefused(text: String) {
        #expect(Timestamp(rfc3339: text.utf8) == nil)
        let error = Self.writeError(#"{"$timestamp":"\#(text)"}"#)
        #expect(error?.field == "v.$timestamp" && error?.detail.contains("RFC 3339") == true, "\(String(describing: error))")
    }

    @Test func timestampsOutsideTheYearsZeroToNineThousandNineHundredNinetyNineAreRefused() throws {
        for outside in [
            Timestamp.earliestStorable.microsecondsSince1970 - 1, Timestamp.latestStorable.microsecondsSince1970 + 1, .max, .min,
        ] {
            let error = #expect(throws: ValueError.self) {
                _ = try DocumentDelta.create(["when": .timestamp(Timestamp(microsecondsSince1970: outside))], base: .zero)
            }
            #expect(error?.code == .notRepresentable && error?.field == "when")
        }
        #expect(Timestamp(secondsSince1970: .nan) == Timestamp(microsecondsSince1970: 0))
        #expect(Timestamp(secondsSince1970: .infinity) == Timestamp(microsecondsSince1970: .max))
        #expect(Timestamp(secondsSince1970: -1e300) == Timestamp(microsecondsSince1970: .min))
        #expect(Timestamp(secondsSince1970: 1.000_000_4).microsecondsSince1970 == 1_000_000)
        #expect(Timestamp(secondsSince1970: -0.000_000_6).microsecondsSince1970 == -1)
        #expect(Timestamp(microsecondsSince1970: -1_500_000).secondsSince1970 == -1.5)
    }

    @Test(
        arguments: [
            ([], ""), ([0], "AA=="), ([0xFF], "/w=="), ([1, 2], "AQI="), ([1, 2, 3], "AQID"), ([0xFB, 0xFF, 0xBF], "+/+/"),
            (Array("hello world".utf8), "aGVsbG8gd29ybGQ="),
        ] as [([UInt8], String)])
    func bytesAreBase64(bytes: [UInt8], text: String) throws {
        let value = Value.bytes(bytes)
        #expect(value.canonicalJSON == #"{"$bytes":"\#(text)"}"#)
        #expect(try Value(json: value.canonicalJSON) == value)
        #expect(value.canonicalByteCount == value.canonicalJSON.utf8.count)
    }

    /// Each bytes value has one text form: no other text is taken for it.
    @Test(arguments: ["AB==", "AAB=", "AA=", "A===", "AA==AA==", "AA ==", "=AAA", "AA-_", "AAA"])
    func nonCanonicalBase64IsRefused(text: String) {
        let error = Self.writeError(#"{"$bytes":"\#(text)"}"#)
        #expect(error?.field == "v.$bytes" && error?.detail.contains("base64") == true, "\(String(describing: error))")
    }

    @Test func bytesOfEveryLengthRoundTrip() async {
        let failure = await Property.check(
            "bytes round-trip",
            generate: { choices in (0..<choices.below(40)).map { _ in UInt8(truncatingIfNeeded: choices.next()) } },
            property: { (bytes: [UInt8]) in
                let value = Value.bytes(bytes)
                return (try? Value(json: value.canonicalJSON)) == value ? nil : "\(value.canonicalJSON) does not read back"
            })
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
    }

    /// A map of the user's can never read as a timestamp or bytes: names that begin with `$` are
    /// refused, as paths, as keys and in JSON, whatever else the map holds.
    @Test func namesThatBeginWithADollarAreRefused() throws {
        for path in ["$timestamp", "$bytes", "$x", "a.$bytes"] {
            #expect(throws: ValueError.self, "\(path)") { try FieldPath(path) }
        }
        let nested = #expect(throws: ValueError.self) { _ = try DocumentDelta.create(["when": ["$price": "2026"]], base: .zero) }
        #expect(nested?.code == .invalidFieldName && nested?.field == "when.$price")
        for (text, field) in [
            (#"{"$timestamp":"2026-01-01T00:00:00.000000Z","a":1}"#, "v.$timestamp"), (#"{"$x":1}"#, "v.$x"),
            (#"{"$bytes":1}"#, "v.$bytes"),
            (#"{"a":{"$price":2}}"#, "v.a.$price"),
        ] {
            #expect(Self.writeError(text)?.field == field, "\(text)")
        }
        #expect(try Value(json: #"{"a":{"$bytes":"AQI="}}"#) == ["a": .bytes([1, 2])])
    }

    @Test func codableWritesTheJSONForms() throws {
        let value: Value = ["when": .timestamp(Timestamp(microsecondsSince1970: 1_500_000)), "blob": .bytes([1, 2])]
        let data = try JSONEncoder().encode(value)
        #expect(try Value(json: data) == value)
        #expect(try JSONDecoder().decode(Value.self, from: data) == value)
        #expect(try JSONDecoder().decode(Value.self, from: Data(#"{"$x":1}"#.utf8)) == .map(["$x": 1]), "refused when written")
    }
}
