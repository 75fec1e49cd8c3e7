import AbrovaCore

/// What `GET /v1/watch` answers: `{"changed": true}` as soon as a document the caller may read
/// has a version after the cursor, `{"changed": false}` after the server's idle time with nothing
/// new. Either way the client watches again (after pulling, when something changed).
public struct WatchResponse: Hashable, Sendable {
    /// Whether something the caller may read changed after the cursor.
    public var changed: Bool

    /// An answer saying whether something changed.
    public init(changed: Bool) {
        self.changed = changed
    }

    /// The canonical JSON body.
    public var body: [UInt8] { Array((changed ? #"{"changed":true}"# : #"{"changed":false}"#).utf8) }

    /// Reads an answer, strictly: one key, `changed`, a boolean.
    ///
    /// - Throws: `Refusal` `.invalid` when the body is not one.
    public init(body: some Collection<UInt8>) throws(Refusal) {
        let parts = try fields(of: try parse(body), allowed: ["changed"], in: "the watch answer")
        guard case .bool(let changed)? = parts["changed"] else { throw Refusal.invalid("the watch answer needs changed, a boolean") }
        self.changed = changed
    }
}
