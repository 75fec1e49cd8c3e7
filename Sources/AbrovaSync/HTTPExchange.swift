import Foundation

/// Sends one HTTP request and collects its whole answer: the one job `HTTPTransport` needs from
/// an HTTP client. `URLSessionExchange` is the one on Apple platforms, `CurlExchange` (libcurl)
/// the one on Linux, where URLSession traps on some cut answers (`CutAnswerTests`).
///
/// Every implementation behaves the same: `request.timeout` covers the whole exchange, from the
/// connection to the last byte; redirects are not followed (the 3xx is the answer); content
/// encodings are left as they came (the transport decodes zstd); no cookies are kept or sent; a
/// body past the exchange's answer limit is abandoned as it arrives and reported with
/// `exceedsLimit`; cancelling the calling task ends the exchange at once and closes its connection
/// (the server sees a long poll given up: `WatchTransportTests`); an answer cut short at any point
/// is a failure, never an answer.
protocol HTTPExchange: Sendable {
    /// Sends `request` and waits for its answer, whatever its status.
    ///
    /// - Throws: `HTTPExchangeFailure` when no whole answer came.
    func send(_ request: HTTPExchangeRequest) async throws(HTTPExchangeFailure) -> HTTPAnswer
}

/// One request as an `HTTPExchange` sends it.
struct HTTPExchangeRequest: Sendable {
    /// `GET`, `POST`...
    var method: String
    /// The whole URL, query included.
    var url: URL
    /// The headers to send, by name; they replace the client's own of the same name.
    var headers: [String: String]
    /// The body, sent as is; `nil` for none.
    var body: Data?
    /// How long the exchange may take in all, from the connection to the answer's last byte.
    var timeout: Duration
    /// Sent on a connection of its own, not kept afterwards: a long poll, which waits on the
    /// server at a seventh of the memory on a fresh connection as on one that served before.
    var isOnFreshConnection = false
}

/// A request that got no whole answer, with a sentence that says why ("no answer within 1.0
/// seconds", "the connection was refused (...)", "the connection was lost (...)").
struct HTTPExchangeFailure: Error, Hashable, Sendable {
    /// Why, for the `.unreachable` failure the transport reports.
    var reason: String
}

/// Which HTTP client an `HTTPTransport` sends its requests with.
package enum HTTPExchangeKind: Sendable, Hashable, CustomStringConvertible {
    /// URLSession: Apple's URL loading system, or swift-corelibs-foundation's on Linux.
    case urlSession
    #if canImport(CCurl)
        /// libcurl's easy interface, handles kept for reuse so connections stay open.
        case curl
    #endif

    /// URLSession on Apple platforms, libcurl where it is built (Linux).
    package static var platformDefault: HTTPExchangeKind {
        #if canImport(CCurl)
            .curl
        #else
            .urlSession
        #endif
    }

    /// Every kind built on this platform.
    package static var available: [HTTPExchangeKind] {
        #if canImport(CCurl)
            [.urlSession, .curl]
        #else
            [.urlSession]
        #endif
    }

    package var description: String {
        switch self {
        case .urlSession: "URLSession"
        #if canImport(CCurl)
            case .curl: "libcurl"
        #endif
        }
    }

    /// An exchange of this kind that abandons answers past `maximumAnswerBytes`. `timeout` is the
    /// longest a request of the transport may take (URLSession's session needs one).
    func makeExchange(timeout: Duration, maximumAnswerBytes: Int) -> any HTTPExchange {
        switch self {
        case .urlSession: URLSessionExchange(timeout: timeout, maximumAnswerBytes: maximumAnswerBytes)
        #if canImport(CCurl)
            case .curl: CurlExchange(maximumAnswerBytes: maximumAnswerBytes)
        #endif
        }
    }
}
