import AbrovaCore
import AbrovaWire
import Foundation
import Testing

/// Runs every case in Fixtures/wire/*.json as Spec/protocol.md ("Fixture format") says: a body
/// decodes and encodes back to exactly its `canonical` text; a bad push body is refused with its
/// status and a message holding `messageContains`.
@Suite struct WireFixtureTests {
    @Test func thereAreEnoughCasesOfEveryKind() throws {
        let cases = try WireFixture.loadAll()
        #expect(cases.count >= 70, "only \(cases.count) wire fixture cases")
        let floors = ["pushRequest": 10, "badPushRequest": 25, "pushResponse": 5, "pullResponse": 3, "document": 3]
        for (kind, floor) in floors.sorted(by: { $0.key < $1.key }) {
            let count = cases.count(where: { $0.kind == kind })
            #expect(count >= floor, "\(count) cases of kind \(kind), expected at least \(floor)")
        }
    }

    @Test(arguments: try WireFixture.loadAll())
    func fixtureCase(_ fixture: WireFixture) {
        switch fixture.kind {
        case "pushRequest", "pushResponse", "pullResponse", "pullStateResponse", "document":
            checkRoundTrip(fixture)
        case "badPushRequest":
            checkRefusal(fixture)
        default:
            Issue.record("\(fixture): unknown kind \"\(fixture.kind)\"")
        }
    }

    /// `body`, written out as JSON, decodes; its encoding is exactly `canonical`, and `canonical`
    /// itself decodes and encodes back to the same bytes.
    private func checkRoundTrip(_ fixture: WireFixture) {
        guard let body = fixture.fields["body"], let canonical = fixture.fields["canonical"]?.stringValue else {
            Issue.record("\(fixture): needs body and canonical")
            return
        }
        var bytes: [UInt8] = []
        body.writeCanonicalJSON(to: &bytes)
        for (input, source) in [(bytes, "body"), (Array(canonical.utf8), "canonical")] {
            do throws(Refusal) {
                let encoded = try Self.reencode(input, kind: fixture.kind)
                #expect(String(decoding: encoded, as: UTF8.self) == canonical, "\(fixture): \(source) re-encoded")
            } catch {
                Issue.record("\(fixture): \(source) refused: \(error)")
            }
        }
    }

    private static func reencode(_ bytes: [UInt8], kind: String) throws(Refusal) -> [UInt8] {
        switch kind {
        case "pushRequest": try PushRequest(body: bytes).body
        case "pushResponse": try PushResponse(body: bytes).body
        case "pullResponse": try PullResponse(body: bytes).body
        case "pullStateResponse": try PullResponse(body: bytes).body(form: .state)
        default: try ServerDocument(body: bytes).body
        }
    }

    /// `bodyText` is refused with `statusCode` and a message holding `messageContains`.
    private func checkRefusal(_ fixture: WireFixture) {
        guard let text = fixture.fields["bodyText"]?.stringValue, let status = fixture.fields["statusCode"]?.intValue,
            let part = fixture.fields["messageContains"]?.stringValue
        else {
            Issue.record("\(fixture): needs bodyText, statusCode and messageContains")
            return
        }
        do throws(Refusal) {
            let request = try PushRequest(body: Array(text.utf8))
            Issue.record("\(fixture): accepted, as \(String(decoding: request.body, as: UTF8.self))")
        } catch {
            #expect(error.statusCode == Int(status), "\(fixture): status of \(error)")
            #expect(error.message.contains(part), "\(fixture): message \"\(error.message)\" lacks \"\(part)\"")
        }
    }
}

/// One case of a wire fixture file, named by its file and its `name`.
struct WireFixture: Sendable, CustomTestStringConvertible, CustomStringConvertible {
    static let folder = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/wire")

    /// The file's name.
    let file: String
    /// The case's entries.
    let fields: [String: Value]

    var name: String { fields["name"]?.stringValue ?? "?" }
    var kind: String { fields["kind"]?.stringValue ?? "?" }
    var description: String { "\(file): \(name)" }
    var testDescription: String { description }

    /// Every case of every `.json` file in Fixtures/wire, files in name order.
    static func loadAll() throws -> [WireFixture] {
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".json") }.sorted()
        return try files.flatMap { file in
            let data = try Data(contentsOf: folder.appendingPathComponent(file))
            // Deeper than a document's limit: the fixtures wrap bodies that hold values nested to it.
            let root = try Value(json: data, maximumDepth: 64)
            guard let cases = root.mapValue?["cases"]?.arrayValue else { throw WireFixtureError("\(file) has no cases array") }
            return try cases.map { item in
                guard let fields = item.mapValue else { throw WireFixtureError("\(file) has a case that is not an object") }
                return WireFixture(file: file, fields: fields)
            }
        }
    }
}

struct WireFixtureError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
