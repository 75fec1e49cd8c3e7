import AbrovaStore
import Foundation

/// Why a call of the SDK failed. `statusCode` is the server's HTTP status when the server answered
/// (403 when the rules refused), or the status the same refusal would have on the server when the
/// device refused it first (400 for a value that cannot be stored, 404 for a missing document).
public struct AbrovaSyncError: Error, LocalizedError, Hashable, Sendable, CustomStringConvertible {
    /// What kind of failure it is.
    public enum Kind: String, Hashable, Sendable {
        /// The server (or the device, on its behalf) refused the request: rules, invalid data.
        case refused
        /// The API key or the token was refused (401).
        case unauthorized
        /// The server cannot be reached and the call needs it (offline persistence is off, or
        /// the read asked for the server).
        case unreachable
        /// The configuration cannot work (a manual strategy without a resolver, a bad URL).
        case configuration
        /// The device store failed (disk full, a damaged file).
        case storage
    }

    /// What kind of failure it is.
    public let kind: Kind
    /// The HTTP status of the refusal; `nil` when no server status applies (unreachable,
    /// configuration).
    public let statusCode: Int?
    /// A sentence for people.
    public let message: String

    /// An error of `kind`.
    public init(_ kind: Kind, statusCode: Int? = nil, message: String) {
        self.kind = kind
        self.statusCode = statusCode
        self.message = message
    }

    public var errorDescription: String? { message }

    public var description: String {
        statusCode.map { "\(kind) (\($0)): \(message)" } ?? "\(kind): \(message)"
    }

    /// The store's refusal as the server would have answered it.
    init(_ error: StoreError) {
        switch error.code {
        case .invalidValue, .documentNotFound, .invalidQuery:
            self.init(.refused, statusCode: error.statusCode, message: error.message)
        default:
            self.init(.storage, statusCode: nil, message: error.description)
        }
    }

    init(_ failure: TransportFailure) {
        switch failure {
        case .unreachable(let reason): self.init(.unreachable, message: "the server cannot be reached: \(reason)")
        case .unauthorized(let message): self.init(.unauthorized, statusCode: 401, message: message)
        case .refused(let statusCode, let message): self.init(.refused, statusCode: statusCode, message: message)
        }
    }

    /// Any error of the layers below, as the SDK reports it.
    static func wrapping(_ error: any Error) -> AbrovaSyncError {
        switch error {
        case let error as AbrovaSyncError: error
        case let error as StoreError: AbrovaSyncError(error)
        case let error as TransportFailure: AbrovaSyncError(error)
        default: AbrovaSyncError(.storage, message: "\(error)")
        }
    }
}
