import AbrovaCore
import AbrovaWire

/// Why a request to the sync server did not succeed, sorted by what the SDK does next.
package enum TransportFailure: Error, Hashable, Sendable, CustomStringConvertible {
    /// The server could not be reached or did not answer usefully: no network, a timeout, a reset
    /// connection, a 5xx or 429 status, an answer that cannot be read. A push may have been
    /// applied all the same, so it is retried with the same body; reads fall back to the cache.
    case unreachable(String)
    /// 401: the API key or the token is missing, unknown or expired. Not the write's fault: the
    /// queue is kept until the token is replaced.
    case unauthorized(String)
    /// The sync server answered and refused (another 4xx, with the protocol's JSON error body),
    /// for this reason and with its message. A 4xx without that body came from something else on
    /// the way (a proxy, a captive portal) and is `.unreachable`: the sync server never saw it.
    case refused(reason: Refusal.Reason, message: String)

    package var description: String {
        switch self {
        case .unreachable(let reason): "the server cannot be reached: \(reason)"
        case .unauthorized(let message): "unauthenticated: \(message)"
        case .refused(let reason, let message): "\(reason): \(message)"
        }
    }
}

/// The routes of Spec/protocol.md as the SDK calls them. `HTTPTransport` is the real one; tests
/// may put a fault-injecting one in its place.
package protocol SyncTransport: Sendable {
    /// `POST /v1/push` with a push body (`PushRequest.body`, sent as is: a retry must repeat the
    /// bytes) and the device's pull cursor (`nil`: it never pulled); the server's answer.
    func push(body: [UInt8], pullCursor: String?) async throws(TransportFailure) -> PushResponse
    /// `GET /v1/pull`: a page of the documents changed after `cursor` (`nil`: from the beginning),
    /// of `scope` only when given.
    func pull(cursor: String?, limit: Int, scope: SyncScope?) async throws(TransportFailure) -> PullResponse
    /// `GET /v1/docs/{collection}/{id}`: the document, or `nil` when it does not exist (404).
    func document(_ key: DocumentKey) async throws(TransportFailure) -> ServerDocument?
    /// `GET /v1/health`: whether the sync server answers at all.
    func isReachable() async -> Bool
    /// `GET /v1/health`: the limits the server announces, `nil` when it announces none.
    func serverLimits() async throws(TransportFailure) -> ServerLimits?
    /// `GET /v1/session`: the user the current token names (`.some(nil)`: the anonymous caller),
    /// `nil` when the server cannot say.
    func sessionUser() async throws(TransportFailure) -> String??
    /// `GET /v1/watch`: waits until something the caller may read changed after `cursor` (`true`)
    /// in the collections of `scope` (`nil`: any), or the server's idle time passed with nothing new (`false`).
    /// Cancelling the calling task closes the request.
    ///
    /// - Throws: `TransportFailure`; `.refused(.notFound, _)` from a server without the route.
    func watch(cursor: String?, scope: SyncScope?) async throws(TransportFailure) -> Bool
}

extension SyncTransport {
    /// A transport that cannot ask announces no limits: batches are cut by the SDK's defaults.
    package func serverLimits() async throws(TransportFailure) -> ServerLimits? { nil }
    /// A transport that cannot ask names nobody: the store's user is taken on trust.
    package func sessionUser() async throws(TransportFailure) -> String?? { nil }
    /// A transport that cannot watch answers as a server without the route does: the SDK then
    /// never asks it again.
    package func watch(cursor: String?, scope: SyncScope?) async throws(TransportFailure) -> Bool {
        throw .refused(reason: .notFound, message: "this transport has no watch route")
    }

    /// `watch(cursor:scope:)` of every collection.
    package func watch(cursor: String?) async throws(TransportFailure) -> Bool {
        try await watch(cursor: cursor, scope: nil)
    }
}

extension SyncTransport {
    /// `pull(cursor:limit:scope:)` of every collection.
    package func pull(cursor: String?, limit: Int) async throws(TransportFailure) -> PullResponse {
        try await pull(cursor: cursor, limit: limit, scope: nil)
    }
}
