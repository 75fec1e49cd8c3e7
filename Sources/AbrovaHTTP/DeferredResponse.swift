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

extension HTTPResponse {
    /// A response that `work` makes on one of the server's worker threads
    /// (`HTTPServerConfiguration.workerCount`) instead of the thread that read the request: for
    /// work that waits (on a database across a network, say), so that the other connections that
    /// thread serves do not wait with it.
    ///
    /// The connection is suspended meanwhile. Unlike a deferred request, the request keeps its
    /// slot of `maximumConcurrentRequests` and counts in `requestsInFlight` until `work` returns,
    /// even when its client hangs up meanwhile, and `shutdown()` waits for it as for a handler
    /// running. A client that ends its side of the connection once its request is sent still gets
    /// the answer. A deferred response made by `work` is answered 500.
    ///
    ///     return .offloaded { .json(status: 200, try database.save(request.body)) }
    public static func offloaded(_ work: @escaping @Sendable () -> HTTPResponse) -> HTTPResponse {
        var response = HTTPResponse(status: 500)
        response.offloadedWork = work
        return response
    }

    /// The answer itself, for a caller that answers without an `HTTPServer` (a fuzzer, a test): an
    /// offloaded response's work is run on the calling thread; any other response is returned
    /// as it is.
    public func answeredHere() -> HTTPResponse {
        offloadedWork?() ?? self
    }

    /// This response, calling `observe` with its answer once it is made: at once, or at the end
    /// of an offloaded response's work (on its worker thread). A deferred answer is not observed.
    ///
    ///     return handler.handle(request).observed { response in log(request, response) }
    public func observed(_ observe: @escaping @Sendable (HTTPResponse) -> Void) -> HTTPResponse {
        if let work = offloadedWork {
            return .offloaded {
                let response = work()
                observe(response)
                return response
            }
        }
        if deferredStart == nil { observe(self) }
        return self
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
        /// Answered by its work (`HTTPResponse.offloaded`), not by a responder: `close` spares it
        /// unless told otherwise.
        let isOffloaded: Bool
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
    func suspend(_ connection: OpaquePointer, isOffloaded: Bool = false) -> ID? {
        let connection = SuspendedConnection(pointer: connection)
        return state.withLock { state in
            guard !state.isClosed else { return nil }
            state.lastID += 1
            // The ID is the suspension's token: the pacer names a gone client by it.
            abrova_http_suspend(connection.pointer, state.lastID)
            state.suspended[state.lastID] = Waiting(connection: connection, isOffloaded: isOffloaded)
            return state.lastID
        }
    }

    /// Whether request `id` still waits for its answer: shutdown has not answered it, nor (for a
    /// deferred request) has its client hung up.
    func isWaiting(_ id: ID) -> Bool {
        state.withLock { $0.suspended[id] != nil }
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
    ///
    /// An offloaded request is left waiting for its work: the report comes as well when the
    /// client only ended its sending side, as a client may once its request is sent, and still
    /// reads the answer (a client truly gone costs the work, which its slot bounds).
    func clientGone(_ id: ID) {
        let handler = state.withLock { state -> GoneHandler? in
            guard let waiting = state.suspended[id], !waiting.isOffloaded else { return nil }
            state.suspended[id] = nil
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

    /// Answers every waiting request with `response` (but those whose work makes their answer,
    /// unless `includingOffloaded`), and refuses to suspend any more. No gone-handler is called
    /// from then on.
    func close(answering response: HTTPResponse, includingOffloaded: Bool = false) {
        let resumed = state.withLock { state -> [ID: Waiting] in
            state.isClosed = true
            let resumed = state.suspended.filter { includingOffloaded || !$0.value.isOffloaded }
            for (id, waiting) in resumed {
                state.answers[id] = response
                state.suspended[id] = nil
                resume(waiting)
            }
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
