import AbrovaCore
import AbrovaStore
import AbrovaWire
import Foundation

/// Why a call of the SDK failed. `reason` says why the server refused (`forbidden` when the rules
/// refused), or why it would refuse when the device refused first (`invalid` for a value that
/// cannot be stored, `notFound` for a missing document); `statusCode` is that reason's HTTP status.
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
    /// Why the server refused, or would refuse; `nil` when no refusal applies (unreachable,
    /// configuration, storage).
    public let reason: Refusal.Reason?
    /// A sentence for people.
    public let message: String

    /// An error of `kind`, for `reason` when the server refused or would refuse.
    public init(_ kind: Kind, reason: Refusal.Reason? = nil, message: String) {
        self.kind = kind
        self.reason = reason
        self.message = message
    }

    /// The HTTP status of the refusal (403 when the rules refused); `nil` when no refusal applies.
    public var statusCode: Int? { reason?.httpStatus }

    public var errorDescription: String? { message }

    public var description: String {
        statusCode.map { "\(kind) (\($0)): \(message)" } ?? "\(kind): \(message)"
    }

    /// The store's refusal as the server would have answered it.
    init(_ error: StoreError) {
        switch error.code {
        case .invalidValue, .documentNotFound, .invalidQuery:
            self.init(.refused, reason: error.reason, message: error.message)
        default:
            self.init(.storage, message: error.description)
        }
    }

    init(_ failure: TransportFailure) {
        switch failure {
        case .unreachable(let reason): self.init(.unreachable, message: "the server cannot be reached: \(reason)")
        case .unauthorized(let message): self.init(.unauthorized, reason: .unauthenticated, message: message)
        case .refused(let reason, let message): self.init(.refused, reason: reason, message: message)
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
