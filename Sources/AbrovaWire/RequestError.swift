import AbrovaCore

/// A refused request or change: the HTTP status and a sentence for people, which is what crosses
/// the wire as `{"message": ..., "statusCode": ...}`.
public struct RequestError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The HTTP status (400 invalid, 401 unauthenticated, 403 forbidden, 404 not found, 409 stale,
    /// 410 resync required, 413 too large, 422 reused batch number, 429 overloaded, 500 failure).
    public let statusCode: Int
    /// What was wrong, naming the field or the limit concerned.
    public let message: String

    /// An error with a status and a message.
    public init(statusCode: Int, message: String) {
        self.statusCode = statusCode
        self.message = message
    }

    /// A 400 with `message`.
    public static func invalid(_ message: String) -> RequestError { RequestError(statusCode: 400, message: message) }

    /// The error a refused value or path maps to, naming its field under `context`.
    public init(_ error: ValueError, context: String = "") {
        let field = error.field.isEmpty ? "" : " at field \"\(error.field)\""
        self.init(statusCode: error.statusCode, message: "\(context)\(context.isEmpty ? "" : ": ")\(error.detail)\(field)")
    }

    public var description: String { "\(statusCode): \(message)" }

    /// The compact form: `{"message": text, "statusCode": status}`.
    public var encoded: Value { ["message": .string(message), "statusCode": .int(Int64(statusCode))] }

    /// The JSON body of an error answer.
    public var body: [UInt8] {
        var bytes: [UInt8] = []
        encoded.writeCanonicalJSON(to: &bytes)
        return bytes
    }

    /// Reads an error answer's body; `nil` when it is not one.
    public init?(body: some Collection<UInt8>) {
        guard let value = try? Value(json: body), let parts = value.mapValue,
              let status = parts["statusCode"]?.intValue, let message = parts["message"]?.stringValue,
              (100...599).contains(status) else { return nil }
        self.init(statusCode: Int(status), message: message)
    }
}
