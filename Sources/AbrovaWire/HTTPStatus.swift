import AbrovaCore

/// The HTTP status of each reason for a refusal: the one place the protocol's statuses are
/// decided (Spec/protocol.md, "Errors"). The server's HTTP handler answers with it, the push
/// answer carries it for each refused change, and the SDK's transport reads it back.
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
        self = Self.byStatus[httpStatus] ?? ((400...499).contains(httpStatus) ? .invalid : .failed)
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
        guard let value = try? Value(json: body), let parts = value.mapValue,
            let status = parts["statusCode"]?.intValue, let message = parts["message"]?.stringValue,
            (100...599).contains(status)
        else { return nil }
        self.init(statusCode: Int(status), message: message)
    }
}
