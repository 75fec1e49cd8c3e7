/// A refused request or change, in the domain's words: why, and a sentence for people.
///
/// How each reason crosses the wire (its HTTP status) is decided once, by the protocol's codec
/// (`Refusal.Reason.httpStatus` in AbrovaWire); below that edge nothing speaks in statuses.
public struct Refusal: Error, Hashable, Sendable, CustomStringConvertible {
    /// Why it was refused.
    public enum Reason: String, Hashable, Sendable, CaseIterable {
        /// The request or the change is not valid: malformed, a bad value, a bad cursor.
        case invalid
        /// No API key, or a token that is unknown or has expired.
        case unauthenticated
        /// The rules refuse the caller this read or write.
        case forbidden
        /// The document (or the route) does not exist, or the caller may not know it does.
        case notFound
        /// The route exists but not for this method.
        case methodNotAllowed
        /// A batch numbered below the last one this client sent.
        case staleBatch
        /// The cursor is too old to continue from: pull again from the beginning.
        case resyncRequired
        /// A body, a batch or a document over a limit.
        case tooLarge
        /// A request target (path and query) too long to read.
        case targetTooLong
        /// A body in an encoding the server does not read.
        case unsupportedEncoding
        /// The number of the last batch this client sent, with another body.
        case reusedBatch
        /// Too many requests at once: try again later.
        case overloaded
        /// Request headers too large to read.
        case headersTooLarge
        /// A change of an atomic group not applied because another change of its group was not.
        case groupFailed
        /// The server failed; nothing was applied.
        case failed
        /// The server's database cannot be reached: try again later.
        case unavailable
    }

    /// Why it was refused.
    public let reason: Reason
    /// What was wrong, naming the field or the limit concerned.
    public let message: String

    /// A refusal for `reason`.
    public init(_ reason: Reason, _ message: String) {
        self.reason = reason
        self.message = message
    }

    /// An invalid request or change.
    public static func invalid(_ message: String) -> Refusal { Refusal(.invalid, message) }

    /// The refusal of a value, a path or a document, naming its field under `context`.
    public init(_ error: ValueError, context: String = "") {
        let field = error.field.isEmpty ? "" : " at field \"\(error.field)\""
        self.init(error.reason, "\(context)\(context.isEmpty ? "" : ": ")\(error.detail)\(field)")
    }

    public var description: String { "\(reason): \(message)" }
}
