import AbrovaLocking
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `HTTPExchange` over URLSession, the one on Apple platforms.
///
/// Sessions are ephemeral: no cache, no cookies, no stored credentials. On Linux
/// (swift-corelibs-foundation in Swift 6.3) it traps on an answer cut right after a header line
/// (`CutAnswerTests`), which is why Linux uses `CurlExchange`; it is still built there, for tests.
final class URLSessionExchange: HTTPExchange {
    /// URLSession takes the whole-request timeout per session (`timeoutIntervalForResource`), so
    /// a request allowed longer than the transport's timeout (a watch) has a session of its own.
    private let sessions: Protected<[Duration: Session]>
    private let timeout: Duration
    private let maximumAnswerBytes: Int

    /// An exchange whose requests take at most `timeout` (rounded up to whole seconds: URLSession
    /// on Linux truncates it), or their own longer one, abandoning answers past
    /// `maximumAnswerBytes`.
    init(timeout: Duration, maximumAnswerBytes: Int) {
        self.timeout = timeout
        self.maximumAnswerBytes = maximumAnswerBytes
        sessions = Protected([timeout: Session(timeout: timeout, maximumAnswerBytes: maximumAnswerBytes)])
    }

    func send(_ request: HTTPExchangeRequest) async throws(HTTPExchangeFailure) -> HTTPAnswer {
        var urlRequest = URLRequest(
            url: request.url, cachePolicy: .reloadIgnoringLocalCacheData,
            timeoutInterval: Self.seconds(request.timeout))
        urlRequest.httpMethod = request.method
        urlRequest.httpShouldHandleCookies = false
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        urlRequest.httpBody = request.body
        let session = session(for: request.timeout)
        let task = session.session.dataTask(with: urlRequest)
        switch await session.transfers.run(task) {
        case .answered(let answer):
            return answer
        case .failed(let error):
            throw HTTPExchangeFailure(reason: Self.reason(for: error, timeout: request.timeout))
        }
    }

    /// The session for a request that may take `requestTimeout`: the transport's, unless it is
    /// allowed longer.
    private func session(for requestTimeout: Duration) -> Session {
        let key = max(requestTimeout, timeout)
        return sessions.withLock { sessions in
            if let session = sessions[key] { return session }
            let session = Session(timeout: key, maximumAnswerBytes: maximumAnswerBytes)
            sessions[key] = session
            return session
        }
    }

    /// One URLSession and the delegate that collects its answers (task identifiers are the
    /// session's own, so each session has its delegate). The session is ephemeral: no cache, no
    /// cookies, no stored credentials.
    private final class Session: Sendable {
        let session: URLSession
        let transfers: TransferDelegate

        init(timeout: Duration, maximumAnswerBytes: Int) {
            let configuration = URLSessionConfiguration.ephemeral
            configuration.urlCache = nil
            configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
            configuration.httpCookieStorage = nil
            configuration.httpShouldSetCookies = false
            configuration.httpCookieAcceptPolicy = .never
            configuration.urlCredentialStorage = nil
            configuration.timeoutIntervalForRequest = URLSessionExchange.seconds(timeout)
            configuration.timeoutIntervalForResource = URLSessionExchange.seconds(timeout)
            transfers = TransferDelegate(maximumBytes: maximumAnswerBytes)
            // The session keeps its delegate until it is invalidated, in deinit.
            session = URLSession(configuration: configuration, delegate: transfers, delegateQueue: nil)
        }

        deinit {
            session.finishTasksAndInvalidate()
        }
    }

    private static func seconds(_ duration: Duration) -> TimeInterval {
        let (seconds, attoseconds) = duration.components
        // URLSession on Linux truncates the timeout to whole seconds: 0.5 s would become 0.
        return max(1, (Double(seconds) + Double(attoseconds) / 1e18).rounded(.up))
    }

    /// A sentence for a request that got no answer.
    static func reason(for error: TransferDelegate.Failure, timeout: Duration) -> String {
        switch error {
        case .url(let error):
            let what =
                switch error.code {
                case .timedOut: "no answer within \(timeout)"
                case .cancelled: "the request was cancelled"
                case .cannotConnectToHost: "the connection was refused"
                case .networkConnectionLost: "the connection was lost"
                case .notConnectedToInternet: "there is no network"
                case .cannotFindHost, .dnsLookupFailed: "the server's host name cannot be resolved"
                case .secureConnectionFailed, .serverCertificateUntrusted, .serverCertificateHasBadDate,
                    .serverCertificateNotYetValid, .serverCertificateHasUnknownRoot, .clientCertificateRejected:
                    "the secure connection failed"
                default: "URL error \(error.code.rawValue)"
                }
            guard error.code != .cancelled, error.code != .timedOut else { return what }
            // Linux's URLSession puts libcurl's sentence here; it names the host and the cause.
            let detail = (error.userInfo[NSLocalizedDescriptionKey] as? String).map { " (\($0))" } ?? ""
            return what + detail
        case .other(let description):
            return description
        }
    }
}

/// Collects each task's answer, refusing bodies past the limit as they arrive, and hands it to
/// the caller waiting for it.
///
/// URLSession calls it on the session's delegate queue; `run` is called from any task. The
/// transfers in flight sit behind a mutex, keyed by task identifier.
final class TransferDelegate: NSObject, URLSessionDataDelegate, Sendable {
    /// A request that got no answer.
    enum Failure: Error, Sendable {
        case url(URLError)
        case other(String)
    }

    /// How one transfer ended.
    enum Outcome: Sendable {
        case answered(HTTPAnswer)
        case failed(Failure)
    }

    private struct Transfer {
        var body = Data()
        var exceedsLimit = false
        /// The caller waiting, once it waits.
        var continuation: CheckedContinuation<Outcome, Never>?
        /// The outcome, when the transfer ended before the caller waited (cancelled at once).
        var outcome: Outcome?
    }

    private let maximumBytes: Int
    private let transfers = Protected<[Int: Transfer]>([:])

    init(maximumBytes: Int) {
        self.maximumBytes = maximumBytes
    }

    /// Starts `task` and waits for its outcome; cancelling the calling task cancels it.
    func run(_ task: URLSessionDataTask) async -> Outcome {
        let identifier = task.taskIdentifier
        transfers.withLock { $0[identifier] = Transfer() }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Outcome, Never>) in
                // A task cancelled before it started may already have ended.
                let ended: Outcome? = transfers.withLock { transfers in
                    if let outcome = transfers[identifier]?.outcome {
                        transfers[identifier] = nil
                        return outcome
                    }
                    transfers[identifier]?.continuation = continuation
                    return nil
                }
                if let ended {
                    continuation.resume(returning: ended)
                } else {
                    task.resume()
                }
            }
        } onCancel: {
            task.cancel()
        }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        let identifier = dataTask.taskIdentifier
        let isTooLarge = transfers.withLock { transfers in
            // Changed in place through the subscript: a copy of the transfer would share its
            // body, and every append would then copy the whole body.
            guard let received = transfers[identifier]?.body.count, transfers[identifier]?.exceedsLimit == false else { return false }
            guard data.count <= maximumBytes - received else {
                transfers[identifier]?.exceedsLimit = true
                transfers[identifier]?.body = Data()
                return true
            }
            transfers[identifier]?.body.append(data)
            return false
        }
        // The rest is not worth receiving (libcurl may be inflating a zstd bomb).
        if isTooLarge { dataTask.cancel() }
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        // Not followed: the redirect itself becomes the answer.
        completionHandler(nil)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let response = task.response as? HTTPURLResponse
        let waiting: (CheckedContinuation<Outcome, Never>, Outcome)? = transfers.withLock { transfers in
            guard var transfer = transfers[task.taskIdentifier] else { return nil }
            let outcome: Outcome
            if let response, error == nil || transfer.exceedsLimit {
                var headers: [String: String] = [:]
                for case (let name as String, let value as String) in response.allHeaderFields {
                    headers[name.lowercased()] = value
                }
                outcome = .answered(
                    HTTPAnswer(
                        statusCode: response.statusCode, headers: headers, body: Array(transfer.body),
                        exceedsLimit: transfer.exceedsLimit))
            } else if let error = error as? URLError {
                outcome = .failed(.url(error))
            } else if let error {
                outcome = .failed(.other("the request failed: \(error)"))
            } else {
                outcome = .failed(.other("the answer was not an HTTP answer"))
            }
            guard let continuation = transfer.continuation else {
                transfer.outcome = outcome
                transfers[task.taskIdentifier] = transfer
                return nil
            }
            transfers[task.taskIdentifier] = nil
            return (continuation, outcome)
        }
        if let (continuation, outcome) = waiting { continuation.resume(returning: outcome) }
    }
}
