import AbrovaCore
import AbrovaServer
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

/// The auth configuration: API keys, tokens and their expiry, and the file read again when it changes.
@Suite struct AuthenticationTests {
    static let json = """
        {"apiKeys": ["k"], "tokens": {"plain": "ana", "until": {"user": "ben", "expires": "2026-12-02T10:00:00Z"},
                                       "open": {"user": "cy"}}}
        """
    static let expiry = try! Date("2026-12-02T10:00:00Z", strategy: .iso8601)

    static func status(_ body: () throws -> Caller) -> Either {
        do { return .caller(try body()) } catch let error as Refusal {
            return .refused(error.statusCode, error.message)
        } catch {
            return .refused(0, "\(error)")
        }
    }

    enum Either: Equatable {
        case caller(Caller)
        case refused(Int, String)
    }

    @Test func aTokenNamesItsUserUntilItExpires() throws {
        let now = Locked(Self.expiry.addingTimeInterval(-1))
        let authenticator = try ConfiguredAuthenticator(json: Array(Self.json.utf8), clock: { now.value })
        #expect(Self.status { try authenticator.authenticate(apiKey: "k", bearerToken: "until") } == .caller(.user("ben")))
        #expect(Self.status { try authenticator.authenticate(apiKey: "k", bearerToken: "open") } == .caller(.user("cy")))
        now.update { $0 = Self.expiry }
        #expect(
            Self.status { try authenticator.authenticate(apiKey: "k", bearerToken: "until") }
                == .refused(401, "the bearer token has expired"))
        #expect(Self.status { try authenticator.authenticate(apiKey: "k", bearerToken: "plain") } == .caller(.user("ana")))
        #expect(
            Self.status { try authenticator.authenticate(apiKey: "other", bearerToken: "plain") }
                == .refused(401, "a known API key is required (header X-API-Key)"))
        #expect(Self.status { try authenticator.authenticate(apiKey: "k", bearerToken: nil) } == .caller(.anonymous))
    }

    @Test(arguments: [
        #"{"apiKeys": ["k"], "tokens": {"t": {"user": "ana", "expires": "tomorrow"}}}"#,
        #"{"apiKeys": ["k"], "tokens": {"t": {"user": "ana", "expires": 1767225600}}}"#,
        #"{"apiKeys": ["k"], "tokens": {"t": {"user": ""}}}"#,
        #"{"apiKeys": ["k"], "tokens": {"t": {"name": "ana"}}}"#,
        #"{"apiKeys": ["k"], "tokens": {"t": {"user": "ana", "role": "admin"}}}"#,
        #"{"apiKeys": ["k"], "tokens": {"t": 7}}"#,
        #"{"apiKeys": ["k"], "tokens": {"": "ana"}}"#,
        #"{"apiKeys": [""], "tokens": {}}"#,
        #"{"apiKeys": ["k"], "tokens": {}, "admins": ["ana"]}"#,
        #"{"apiKeys": ["k"]}"#,
    ])
    func aMalformedConfigurationIsRefusedInWordsThatDoNotShowTheToken(json: String) {
        let error = #expect(throws: Refusal.self) {
            try ConfiguredAuthenticator(
                json: Array(
                    json.replacingOccurrences(
                        of: "\"t\"", with: "\"secret-token-1234\""
                    ).utf8))
        }
        #expect(error?.statusCode == 400)
        #expect(error?.message.hasPrefix("the auth configuration needs") == true, "\(String(describing: error))")
        #expect(error?.message.contains("secret-token-1234") == false)
    }

    @Test func theFileIsReadAgainWhenItChangesAndABadSaveKeepsTheCredentialsInForce() throws {
        let folder = TemporaryFolder()
        let path = folder.path("auth.json")
        func save(_ json: String) throws { try Data(json.utf8).write(to: URL(fileURLWithPath: path), options: .atomic) }
        try save(#"{"apiKeys": ["k"], "tokens": {"a": "ana", "b": "ben"}}"#)
        let now = Locked(Date(timeIntervalSince1970: 1_000))
        let lines = Locked<[String]>([])
        let file = try AuthFile(path: path, checkInterval: 1, clock: { now.value }, log: { line in lines.update { $0.append(line) } })
        #expect(Self.status { try file.authenticate(apiKey: "k", bearerToken: "b") } == .caller(.user("ben")))
        try save(#"{"apiKeys": ["k"], "tokens": {"a": "ana"}}"#)
        // Within the interval the file is not looked at; after it, the change is found.
        #expect(Self.status { try file.authenticate(apiKey: "k", bearerToken: "b") } == .caller(.user("ben")))
        now.update { $0 += 1 }
        #expect(Self.status { try file.authenticate(apiKey: "k", bearerToken: "b") } == .refused(401, "the bearer token is not known"))
        try save(#"{"apiKeys": ["k"], "tokens": {"a": "#)
        now.update { $0 += 1 }
        #expect(Self.status { try file.authenticate(apiKey: "k", bearerToken: "a") } == .caller(.user("ana")))
        #expect(lines.value.last?.contains("the credentials before stay in force") == true, "\(lines.value)")
        // Tried again at each check while it is bad (a permission fixed changes no content), said once.
        now.update { $0 += 1 }
        #expect(Self.status { try file.authenticate(apiKey: "k", bearerToken: "a") } == .caller(.user("ana")))
        #expect(lines.value.filter { $0.contains("stay in force") }.count == 1, "\(lines.value)")
        try FileManager.default.removeItem(atPath: path)
        now.update { $0 += 1 }
        #expect(Self.status { try file.authenticate(apiKey: "k", bearerToken: "a") } == .caller(.user("ana")))
        try save(#"{"apiKeys": ["k"], "tokens": {"c": "cy"}}"#)
        #expect(file.reload())
        #expect(Self.status { try file.authenticate(apiKey: "k", bearerToken: "c") } == .caller(.user("cy")))
        #expect(Self.status { try file.authenticate(apiKey: "k", bearerToken: "a") } == .refused(401, "the bearer token is not known"))
    }

    @Test func aFileThatCannotBeReadAtStartIsRefused() {
        let error = #expect(throws: Refusal.self) { try AuthFile(path: TemporaryFolder().path("missing.json")) }
        #expect(error?.message.hasPrefix("cannot read") == true)
    }
}
