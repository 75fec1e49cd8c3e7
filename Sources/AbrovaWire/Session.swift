import AbrovaCore

/// What `GET /v1/session` answers: whose credentials the request carried, `{"user": "ana"}`, or
/// `{"user": null}` for the anonymous caller. A client keeps one store per user and checks, before
/// it sends a queue under a token, that the token is its store's user's.
public struct SessionResponse: Hashable, Sendable {
    /// The caller's user id; `nil` for the anonymous caller.
    public var user: String?

    /// An answer naming `user`.
    public init(user: String?) {
        self.user = user
    }

    /// The canonical JSON body.
    public var body: [UInt8] {
        var bytes: [UInt8] = []
        Value.map(["user": user.map(Value.string) ?? .null]).writeCanonicalJSON(to: &bytes)
        return bytes
    }

    /// Reads an answer; `nil` when the body is not the sync server's.
    public init?(body: some Collection<UInt8>) {
        guard let value = try? Value(json: body), let parts = value.mapValue, let user = parts["user"] else { return nil }
        switch user {
        case .null: self.user = nil
        case .string(let id) where !id.isEmpty: self.user = id
        default: return nil
        }
    }
}
