import CMicroHTTPD
import Synchronization

extension HTTPResponse {
    /// A response the handler gives later, from any thread, through the responder `start` gets.
    ///
    /// The server suspends the connection, then calls `start` on its own thread (so `start` should
    /// only hand the responder on: register a watch, say). Until `send`, the request holds no
    /// thread and no slot of `maximumConcurrentRequests`, does not count in `requestsInFlight`,
    /// and neither the idle timeout nor the minimum rate closes its connection; it counts in
    /// `deferredRequests`. Once the answer is sent the connection is kept alive as after any other.
    ///
    ///     return .deferred { responder in
    ///         watches.add(cursor) { changed in responder.send(.json(status: 200, body(changed))) }
    ///     }
    ///
    /// `shutdown()` answers every request still waiting with 503. A client that closes its
    /// connection meanwhile goes unnoticed until the answer, which then goes nowhere.
    public static func deferred(_ start: @escaping @Sendable (HTTPResponder) -> Void) -> HTTPResponse {
        var response = HTTPResponse(status: 500)
        response.deferredStart = start
        return response
    }
}

/// Answers one deferred request (see `HTTPResponse.deferred`). Callable from any thread, also
/// from inside `start`; the first `send` counts and later ones do nothing, as does a `send` after
/// the server has shut down. A responder released without sending answers 500, so that a
/// forgotten request does not wait until shutdown.
public final class HTTPResponder: Sendable {
    private let requests: WaitingRequests
    private let id: WaitingRequests.ID

    init(requests: WaitingRequests, id: WaitingRequests.ID) {
        self.requests = requests
        self.id = id
    }

    deinit {
        requests.answer(id, with: .error(status: 500, message: "the request was deferred and never answered"))
    }

    /// Sends `response` as the request's answer, unless it has one already. A deferred response
    /// sent here is answered 500.
    public func send(_ response: HTTPResponse) {
        requests.answer(id, with: response)
    }
}

/// The requests whose connection is suspended until their deferred answer, and the answers given
/// and not yet queued. One lock orders each suspension, resume and shutdown, so that a connection
/// is resumed once and only while suspended, as libmicrohttpd requires: a request is suspended
/// before any responder for it exists, and removed from `suspended` as it is resumed.
final class WaitingRequests: Sendable {
    typealias ID = UInt64

    private struct State {
        var suspended: [ID: SuspendedConnection] = [:]
        var answers: [ID: HTTPResponse] = [:]
        var lastID: ID = 0
        /// Shutdown has answered every waiting request; none is suspended from then on.
        var isClosed = false
    }

    private let state = Mutex(State())
    /// Requests answered whose request is not yet completed: `shutdown` waits for these as for
    /// the requests being answered.
    let answeredRequests = Atomic<Int>(0)

    /// Requests waiting for their answer now.
    var count: Int { state.withLock { $0.suspended.count } }

    /// Suspends the connection of a request whose handler deferred its answer; nil, and the
    /// connection left as it is, once shutdown has closed the list. Only inside the access callback.
    func suspend(_ connection: OpaquePointer) -> ID? {
        let connection = SuspendedConnection(pointer: connection)
        return state.withLock { state in
            guard !state.isClosed else { return nil }
            abrova_http_suspend(connection.pointer)
            state.lastID += 1
            state.suspended[state.lastID] = connection
            return state.lastID
        }
    }

    /// Keeps `response` for request `id` and resumes its connection, unless it was answered
    /// already.
    func answer(_ id: ID, with response: HTTPResponse) {
        state.withLock { state in
            guard let connection = state.suspended.removeValue(forKey: id) else { return }
            state.answers[id] = response
            answeredRequests.add(1, ordering: .sequentiallyConsistent)
            // Under the lock: once `close` returns, every connection it did not resume has been.
            abrova_http_resume(connection.pointer)
        }
    }

    /// The answer kept for `id`, on libmicrohttpd's call after the resume.
    func takeAnswer(_ id: ID) -> HTTPResponse? {
        state.withLock { $0.answers.removeValue(forKey: id) }
    }

    /// Request `id` is over: answered, or its connection closed before the answer was queued.
    func complete(_ id: ID) {
        let unsent = state.withLock { state in
            // Never suspended still, since every connection is resumed before the daemon stops.
            if state.suspended.removeValue(forKey: id) == nil {
                answeredRequests.subtract(1, ordering: .sequentiallyConsistent)
            }
            return state.answers.removeValue(forKey: id)
        }
        // Released after the lock: what it holds (a responder, say) may call `answer`.
        _ = unsent
    }

    /// Answers every waiting request with `response`, and refuses to suspend any more.
    func close(answering response: HTTPResponse) {
        state.withLock { state in
            state.isClosed = true
            for (id, connection) in state.suspended {
                state.answers[id] = response
                answeredRequests.add(1, ordering: .sequentiallyConsistent)
                abrova_http_resume(connection.pointer)
            }
            state.suspended = [:]
        }
    }
}

/// A suspended connection. Sendable because nothing but `abrova_http_resume` is done with it
/// away from its daemon thread, which libmicrohttpd allows from any thread while it is suspended;
/// `WaitingRequests` resumes each once, and libmicrohttpd frees none that is suspended.
private struct SuspendedConnection: @unchecked Sendable {
    let pointer: OpaquePointer
}
