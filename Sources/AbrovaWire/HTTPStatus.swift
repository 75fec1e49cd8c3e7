import AbrovaCore

/// The HTTP status of each reason for a refusal: the one place the sync protocol's statuses are
/// decided (Spec/protocol.md, "Errors"). The server's HTTP handler answers with it, the push
/// answer carries it for each refused change, and the SDK's transport reads it back. Below the
/// protocol, the HTTP layer (AbrovaHTTP, which knows nothing of sync) refuses on its own what it
/// refuses before any handler runs (a malformed or oversized head, a body over its limit, too many
/// requests at once, a shutdown), with statuses that match this table's.
extension Refusal.Reason {
    /// The status this reason is answered with.
    public var httpStatus: Int {
        switch self {
        case .invalid: 400
        case .unauthenticated: 401
        case .forbidden: 403
        case .notFound: 404
        case .methodNotAllowed: 405
        case .staleBatch: 409
        case .resyncRequired: 410
        case .tooLarge: 413
        case .targetTooLong: 414
        case .unsupportedEncoding: 415
        case .reusedBatch: 422
        case .groupFailed: 424
        case .overloaded: 429
        case .headersTooLarge: 431
        case .failed: 500
        case .unavailable: 503
        }
    }

    private static let byStatus = Dictionary(uniqueKeysWithValues: allCases.map { ($0.httpStatus, $0) })

    /// The reason a status stands for. A status the protocol does not use reads as the general
    /// reason of its class: `invalid` for a 4xx, `failed` for anything else.
    public init(httpStatus: Int) {
        self = Self(exactly: httpStatus) ?? ((400...499).contains(httpStatus) ? .invalid : .failed)
    }

    /// The reason a status stands for; `nil` for a status the protocol does not use.
    public init?(exactly httpStatus: Int) {
        guard let reason = Self.byStatus[httpStatus] else { return nil }
        self = reason
    }
}

/// An error answer's body as sent, `{"message": text, "statusCode": status}`, with the status as
/// written: an edge compares it with the answer's own status before trusting it.
public struct ErrorBody: Hashable, Sendable {
    /// The status the body names.
    public let statusCode: Int
    /// The message.
    public let message: String

    /// Reads a body; `nil` when it is not an error body.
    public init?(_ body: some Collection<UInt8>) {
        guard let value = try? Value(json: body), let parts = value.mapValue,
            let status = parts["statusCode"]?.intValue, let message = parts["message"]?.stringValue,
            (100...599).contains(status)
        else { return nil }
        statusCode = Int(status)
        self.message = message
    }
}

extension Refusal {
    /// The refusal a status and a message stand for, as an answer or a push result carries them.
    public init(statusCode: Int, message: String) {
        self.init(Reason(httpStatus: statusCode), message)
    }

    /// The HTTP status this refusal is answered with.
    public var statusCode: Int { reason.httpStatus }

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
        guard let error = ErrorBody(body) else { return nil }
        self.init(statusCode: error.statusCode, message: error.message)
    }
}
