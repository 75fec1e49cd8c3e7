import AbrovaCore
import AbrovaWire
import Foundation

/// Who makes a request: a signed-in user, or an anonymous caller who presented only the API key.
public struct Caller: Hashable, Sendable, CustomStringConvertible {
    /// The user's id, `nil` for an anonymous caller.
    public let userID: String?

    /// A signed-in user.
    public static func user(_ id: String) -> Caller { Caller(userID: id) }
    /// A caller with the API key and no user.
    public static let anonymous = Caller(userID: nil)

    public var description: String { userID ?? "anonymous" }
}

/// Maps a request's API key and bearer token to the caller.
public protocol Authenticator: Sendable {
    /// The caller the credentials name.
    ///
    /// - Throws: `Refusal` `.unauthenticated` when the API key is missing or unknown, or a token is given
    ///   that names nobody.
    func authenticate(apiKey: String?, bearerToken: String?) throws(Refusal) -> Caller
}

/// Credentials read from a configuration file:
///
///     {"apiKeys": ["app-key-1"],
///      "tokens": {"token-of-ana": "ana",
///                 "token-of-ben": {"user": "ben", "expires": "2027-01-31T00:00:00Z"}}}
///
/// A request needs one of the API keys; a bearer token makes it a user's, no token an anonymous
/// caller's (who may read only collections whose rules say `public`). A token with `expires`
/// (ISO 8601, with a time zone) names its user until then and is refused after.
public struct ConfiguredAuthenticator: Authenticator {
    /// A bearer token's user, and when the token stops working (`nil`: never).
    public struct Grant: Hashable, Sendable {
        public var user: String
        public var expires: Date?

        public init(user: String, expires: Date? = nil) {
            self.user = user
            self.expires = expires
        }
    }

    /// The API keys the apps use.
    public let apiKeys: Set<String>
    /// Bearer tokens and what they grant.
    public let grants: [String: Grant]
    /// The time tokens are checked against.
    private let clock: @Sendable () -> Date

    /// An authenticator over the given keys and tokens that never expire.
    public init(apiKeys: Set<String>, tokens: [String: String]) {
        self.init(apiKeys: apiKeys, grants: tokens.mapValues { Grant(user: $0) })
    }

    /// An authenticator over the given keys and grants, checking expiry against `clock`.
    public init(apiKeys: Set<String>, grants: [String: Grant], clock: @escaping @Sendable () -> Date = Date.init) {
        self.apiKeys = apiKeys
        self.grants = grants
        self.clock = clock
    }

    /// Reads the configuration file's JSON.
    ///
    /// - Throws: `Refusal` `.invalid` naming what is malformed.
    public init(json: some Collection<UInt8>, clock: @escaping @Sendable () -> Date = Date.init) throws(Refusal) {
        let value: Value
        do { value = try Value(json: json) } catch { throw Refusal(error, context: "the auth configuration is not JSON") }
        let shape =
            "the auth configuration needs \"apiKeys\": [text] and \"tokens\": {token: user id or {\"user\": user id, \"expires\": ISO 8601 time}}"
        guard let parts = value.mapValue, Set(parts.keys).isSubset(of: ["apiKeys", "tokens"]), let keys = parts["apiKeys"]?.arrayValue,
            keys.allSatisfy({ $0.stringValue?.isEmpty == false }), let tokens = parts["tokens"]?.mapValue
        else {
            throw Refusal.invalid(shape)
        }
        var grants: [String: Grant] = [:]
        for (token, entry) in tokens {
            guard !token.isEmpty, let grant = Self.grant(entry) else {
                throw Refusal.invalid("\(shape); the entry of a token (\(Self.hint(token))) is not one")
            }
            grants[token] = grant
        }
        self.init(apiKeys: Set(keys.compactMap(\.stringValue)), grants: grants, clock: clock)
    }

    private static func grant(_ entry: Value) -> Grant? {
        if let user = entry.stringValue { return user.isEmpty ? nil : Grant(user: user) }
        guard let fields = entry.mapValue, Set(fields.keys).isSubset(of: ["user", "expires"]),
            let user = fields["user"]?.stringValue, !user.isEmpty
        else { return nil }
        guard let expires = fields["expires"] else { return Grant(user: user) }
        guard let text = expires.stringValue, let time = try? Date(text, strategy: .iso8601) else { return nil }
        return Grant(user: user, expires: time)
    }

    /// A token as an error message may show it: enough to find it in the file, not enough to use it.
    private static func hint(_ token: String) -> String {
        token.count <= 8 ? "\(token.count) characters" : "starting \(token.prefix(4))…"
    }

    public func authenticate(apiKey: String?, bearerToken: String?) throws(Refusal) -> Caller {
        guard let apiKey, apiKeys.contains(apiKey) else {
            throw Refusal(.unauthenticated, "a known API key is required (header X-API-Key)")
        }
        guard let bearerToken else { return .anonymous }
        guard let grant = grants[bearerToken] else {
            throw Refusal(.unauthenticated, "the bearer token is not known")
        }
        if let expires = grant.expires, clock() >= expires {
            throw Refusal(.unauthenticated, "the bearer token has expired")
        }
        return .user(grant.user)
    }
}

/// For development only: any API key is accepted and a bearer token is its user's id. The server
/// says so when it starts with this authenticator.
public struct DevelopmentAuthenticator: Authenticator {
    /// An authenticator that trusts every caller.
    public init() {}

    public func authenticate(apiKey: String?, bearerToken: String?) throws(Refusal) -> Caller {
        guard apiKey?.isEmpty == false else {
            throw Refusal(.unauthenticated, "an API key is required (header X-API-Key)")
        }
        guard let bearerToken, !bearerToken.isEmpty else { return .anonymous }
        return .user(bearerToken)
    }
}
