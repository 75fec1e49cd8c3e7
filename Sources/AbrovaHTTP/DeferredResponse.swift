import AbrovaLocking
import CMicroHTTPD

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
    /// `shutdown()` answers every request still waiting with 503. A client that hangs up while its
    /// request waits (closes its connection, ends its side of it, or resets it) is noticed within
    /// a quarter of a second on Linux: the connection is closed with nothing sent, and the
    /// handler hears of it through `HTTPResponder.onClientGone`. Elsewhere it goes unnoticed until
    /// the answer, which then goes nowhere.
    public static func deferred(_ start: @escaping @Sendable (HTTPResponder) -> Void) -> HTTPResponse {
        var response = HTTPResponse(status: 500)
        response.deferredStart = start
        return response
    }
}

/// Answers one deferred request (see `HTTPResponse.deferred`). Callable from any thread, also
/// from inside `start`; the first `send` counts and later ones do nothing, as does a `send` after
/// the server has shut down or after the client has hung up. A responder released without
/// sending answers 500, so that a forgotten request does not wait until shutdown.
public final class HTTPResponder: Sendable {
    private let requests: WaitingRequests
    private let id: WaitingRequests.ID

    init(requests: WaitingRequests, id: WaitingRequests.ID) {
        self.requests = requests
        self.id = id
    }

    deinit {
        requests.release(id)
    }

    /// Sends `response` as the request's answer, unless it has one already. A deferred response
    /// sent here is answered 500.
    public func send(_ response: HTTPResponse) {
        requests.answer(id, with: response)
    }

    /// Calls `handler` if the client hangs up before the request is answered, so that whatever
    /// waits to answer it can stop: at most once, and never once `send` has answered or shutdown
    /// has. The server has closed the connection by then; a `send` later does nothing.
    ///
    /// `handler` runs on the server's own thread and must not block (nor shut the server down);
    /// when the client is gone already, it runs at once on the caller's. Giving another handler
    /// replaces this one. Linux only: elsewhere it is never called.
    ///
    ///     let watch = watches.add(cursor) { changed in responder.send(.json(status: 200, body(changed))) }
    ///     responder.onClientGone { watches.remove(watch) }
    public func onClientGone(_ handler: @escaping @Sendable () -> Void) {
        requests.onClientGone(id, handler)
    }
}

/// The requests whose connection is suspended until their deferred answer, and the answers given
/// and not yet queued. One lock orders each suspension, resume and shutdown, so that a connection
/// is resumed once and only while suspended, as libmicrohttpd requires: a request is suspended
/// before any responder for it exists, and removed from `suspended` as it is resumed (for its
/// answer, for shutdown, or because its client hung up).
///
/// What leaves the state is released after the lock: a gone-handler may hold a responder, whose
/// release calls back in.
final class WaitingRequests: Sendable {
    typealias ID = UInt64
    typealias GoneHandler = @Sendable () -> Void

    private struct Waiting {
        let connection: SuspendedConnection
        var onClientGone: GoneHandler?
    }

    private struct State {
        var suspended: [ID: Waiting] = [:]
        var answers: [ID: HTTPResponse] = [:]
        /// Requests whose client hung up before their responder gave a gone-handler, until it does
        /// or is released.
        var gone: Set<ID> = []
        var lastID: ID = 0
        /// Shutdown has answered every waiting request; none is suspended from then on.
        var isClosed = false
    }

    private let state = Protected(State())
    /// Requests resumed (answered, or their client gone) whose request is not yet completed:
    /// `shutdown` waits for these as for the requests being answered.
    let answeredRequests = Protected<Int>(0)

    /// Requests waiting for their answer now.
    var count: Int { state.withLock { $0.suspended.count } }

    /// Suspends the connection of a request whose handler deferred its answer; nil, and the
    /// connection left as it is, once shutdown has closed the list. Only inside the access callback.
    func suspend(_ connection: OpaquePointer) -> ID? {
        let connection = SuspendedConnection(pointer: connection)
        return state.withLock { state in
            guard !state.isClosed else { return nil }
            state.lastID += 1
            // The ID is the suspension's token: the pacer names a gone client by it.
            abrova_http_suspend(connection.pointer, state.lastID)
            state.suspended[state.lastID] = Waiting(connection: connection)
            return state.lastID
        }
    }

    /// Keeps `response` for request `id` and resumes its connection, unless it was answered
    /// already.
    func answer(_ id: ID, with response: HTTPResponse) {
        let resumed = state.withLock { state -> Waiting? in
            guard let waiting = state.suspended.removeValue(forKey: id) else { return nil }
            state.answers[id] = response
            resume(waiting)
            return waiting
        }
        _ = resumed
    }

    /// The responder of request `id` is released: answers 500 if it never sent.
    func release(_ id: ID) {
        let resumed = state.withLock { state -> Waiting? in
            state.gone.remove(id)
            guard let waiting = state.suspended.removeValue(forKey: id) else { return nil }
            state.answers[id] = .error(status: 500, message: "the request was deferred and never answered")
            resume(waiting)
            return waiting
        }
        _ = resumed
    }

    /// The client of request `id` hung up (the pacer's report): its connection is resumed with no
    /// answer kept, so libmicrohttpd closes it, and its gone-handler is called. Nothing, when the
    /// request was resumed already (the report names an older suspension).
    func clientGone(_ id: ID) {
        let handler = state.withLock { state -> GoneHandler? in
            guard let waiting = state.suspended.removeValue(forKey: id) else { return nil }
            resume(waiting)
            if waiting.onClientGone == nil { state.gone.insert(id) }
            return waiting.onClientGone
        }
        handler?()
    }

    /// Keeps `handler` for when the client of request `id` hangs up; calls it now if it has.
    func onClientGone(_ id: ID, _ handler: @escaping GoneHandler) {
        let (isGone, replaced) = state.withLock { state -> (Bool, GoneHandler?) in
            guard var waiting = state.suspended[id] else { return (state.gone.remove(id) != nil, nil) }
            let replaced = waiting.onClientGone
            waiting.onClientGone = handler
            state.suspended[id] = waiting
            return (false, replaced)
        }
        _ = replaced
        if isGone { handler() }
    }

    /// Under the lock: once `close` returns, every connection it did not resume has been.
    private func resume(_ waiting: Waiting) {
        answeredRequests.withLock { $0 += 1 }
        abrova_http_resume(waiting.connection.pointer)
    }

    /// The answer kept for `id`, on libmicrohttpd's call after the resume; none when the client
    /// is gone.
    func takeAnswer(_ id: ID) -> HTTPResponse? {
        state.withLock { $0.answers.removeValue(forKey: id) }
    }

    /// Request `id` is over: answered, or its connection closed before the answer was queued.
    func complete(_ id: ID) {
        let (unsent, waiting) = state.withLock { state in
            // Never suspended still, since every connection is resumed before the daemon stops.
            let waiting = state.suspended.removeValue(forKey: id)
            if waiting == nil {
                answeredRequests.withLock { $0 -= 1 }
            }
            return (state.answers.removeValue(forKey: id), waiting)
        }
        // Released after the lock: what it holds (a responder, say) may call `answer`.
        _ = (unsent, waiting)
    }

    /// Answers every waiting request with `response`, and refuses to suspend any more. No
    /// gone-handler is called from then on.
    func close(answering response: HTTPResponse) {
        let resumed = state.withLock { state -> [ID: Waiting] in
            state.isClosed = true
            for (id, waiting) in state.suspended {
                state.answers[id] = response
                resume(waiting)
            }
            let resumed = state.suspended
            state.suspended = [:]
            return resumed
        }
        _ = resumed
    }
}

/// A suspended connection. Sendable because nothing but `abrova_http_resume` is done with it
/// away from its daemon thread, which libmicrohttpd allows from any thread while it is suspended;
/// `WaitingRequests` resumes each once, and libmicrohttpd frees none that is suspended.
private struct SuspendedConnection: @unchecked Sendable {
    let pointer: OpaquePointer
}
