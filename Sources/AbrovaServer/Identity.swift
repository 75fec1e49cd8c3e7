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
    /// - Throws: `RequestError` 401 when the API key is missing or unknown, or a token is given
    ///   that names nobody.
    func authenticate(apiKey: String?, bearerToken: String?) throws(RequestError) -> Caller
}

/// Credentials read from a configuration file:
///
///     {"apiKeys": ["app-key-1"], "tokens": {"token-of-ana": "ana", "token-of-ben": "ben"}}
///
/// A request needs one of the API keys; a bearer token makes it a user's, no token an anonymous
/// caller's (who may read only collections whose rules say `public`).
public struct ConfiguredAuthenticator: Authenticator {
    /// The API keys the apps use.
    public let apiKeys: Set<String>
    /// Bearer tokens and the users they stand for.
    public let tokens: [String: String]

    /// An authenticator over the given keys and tokens.
    public init(apiKeys: Set<String>, tokens: [String: String]) {
        self.apiKeys = apiKeys
        self.tokens = tokens
    }

    /// Reads the configuration file's JSON.
    ///
    /// - Throws: `RequestError` 400 naming what is malformed.
    public init(json: some Collection<UInt8>) throws(RequestError) {
        let value: Value
        do { value = try Value(json: json) } catch { throw RequestError(error, context: "the auth configuration is not JSON") }
        guard let parts = value.mapValue, let keys = parts["apiKeys"]?.arrayValue,
              keys.allSatisfy({ $0.stringValue?.isEmpty == false }), let tokens = parts["tokens"]?.mapValue,
              tokens.allSatisfy({ !$0.key.isEmpty && $0.value.stringValue?.isEmpty == false }) else {
            throw RequestError.invalid("the auth configuration needs \"apiKeys\": [text] and \"tokens\": {token: user id}")
        }
        self.init(apiKeys: Set(keys.compactMap(\.stringValue)), tokens: tokens.compactMapValues(\.stringValue))
    }

    public func authenticate(apiKey: String?, bearerToken: String?) throws(RequestError) -> Caller {
        guard let apiKey, apiKeys.contains(apiKey) else {
            throw RequestError(statusCode: 401, message: "a known API key is required (header X-API-Key)")
        }
        guard let bearerToken else { return .anonymous }
        guard let user = tokens[bearerToken] else {
            throw RequestError(statusCode: 401, message: "the bearer token is not known")
        }
        return .user(user)
    }
}

/// For development only: any API key is accepted and a bearer token is its user's id. The server
/// says so when it starts with this authenticator.
public struct DevelopmentAuthenticator: Authenticator {
    /// An authenticator that trusts every caller.
    public init() {}

    public func authenticate(apiKey: String?, bearerToken: String?) throws(RequestError) -> Caller {
        guard apiKey?.isEmpty == false else {
            throw RequestError(statusCode: 401, message: "an API key is required (header X-API-Key)")
        }
        guard let bearerToken, !bearerToken.isEmpty else { return .anonymous }
        return .user(bearerToken)
    }
}
