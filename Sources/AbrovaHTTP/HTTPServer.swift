import AbrovaLocking
import CMicroHTTPD

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// An HTTP/1.1 server on libmicrohttpd that calls one handler per request, with the whole body.
///
/// The handler is called on the server's own threads: libmicrohttpd's thread pool of
/// `threadCount` threads, never the main thread nor a Swift concurrency executor. Calls for
/// different requests run at the same time on different threads. A handler may block (on a
/// database, say), but holds its thread while it does, and the other connections that thread
/// serves wait with it: a handler whose answer waits returns `HTTPResponse.offloaded`, whose work
/// runs on one of `workerCount` threads of the server's own. A handler that waits for an event (a
/// long poll) returns `HTTPResponse.deferred` instead, and answers later without holding a thread
/// or a slot.
///
/// The server refuses, without calling the handler: heads that could be read more than one way
/// (400, then the connection is closed; see `HTTPHeadAmbiguity`), bodies over `maximumBodyBytes`
/// (413), requests beyond `maximumConcurrentRequests` (429 with `Retry-After: 1`), and requests
/// that arrive once `shutdown` has started (503). Those answers have a JSON body
/// `{"message":...,"statusCode":...}`.
///
///     let server = try HTTPServer(configuration: HTTPServerConfiguration(port: 8080)) { request in
///         .json(status: 200, Array(#"{"path":"\#(request.path)"}"#.utf8))
///     }
///     // ...
///     server.shutdown()
///
/// Neither `shutdown()` nor the last release of the server may happen inside its own handler:
/// both wait for the handlers running.
public final class HTTPServer: Sendable {
    /// The port the server listens on (the one picked when the configuration asked for 0).
    public let port: UInt16

    private let core: ServerCore
    /// The running daemon; nil once stopped. The lock also makes concurrent shutdowns wait for the
    /// first one.
    private let daemon: Protected<OpaquePointer?>

    /// Starts serving; `handler` is called on the server's threads, one call per request, with the
    /// whole body.
    ///
    /// - Throws: `HTTPServerError` when a limit in `configuration` is out of range, or when the
    ///   server cannot listen (the port is taken, say).
    public init(
        configuration: HTTPServerConfiguration,
        handler: @escaping @Sendable (HTTPRequest) -> HTTPResponse
    ) throws(HTTPServerError) {
        try configuration.validate()
        let core = ServerCore(configuration: configuration, handler: handler)
        var errorNumber: Int32 = 0
        // Unretained: `self` keeps the core alive, and stops the daemon before letting it go.
        let started = abrova_http_start(
            configuration.port,
            configuration.loopbackOnly ? 1 : 0,
            UInt32(configuration.threadCount),
            UInt32(configuration.connectionTimeoutSeconds),
            connectionMemoryLimit,
            UInt32(configuration.maximumConnectionsPerAddress),
            UInt32(configuration.maximumConnections),
            UInt32(configuration.minimumBytesPerSecond),
            UInt32(configuration.slowClientGraceSeconds),
            accessCallback,
            completedCallback,
            goneCallback,
            Unmanaged.passUnretained(core).toOpaque(),
            &errorNumber
        )
        guard let started else {
            let reason = errorNumber == 0 ? "libmicrohttpd refused to start" : String(cString: strerror(errorNumber))
            throw HTTPServerError(message: "cannot listen on port \(configuration.port): \(reason)")
        }
        self.core = core
        self.port = abrova_http_bound_port(started)
        self.daemon = Protected(started)
    }

    deinit {
        shutdown()
    }

    /// Requests being answered now, each holding a slot: from the end of their body until their
    /// answer is sent. A request waiting for its deferred answer holds none.
    public var requestsInFlight: Int {
        core.admittedRequests.value
    }

    /// Requests waiting for their deferred answer (`HTTPResponse.deferred`), each with its
    /// connection suspended.
    public var deferredRequests: Int {
        core.waiting.count
    }

    /// Connections closed so far for moving slower than `minimumBytesPerSecond`.
    public var slowConnectionsClosed: Int {
        daemon.withLock { daemon in daemon.map { Int(abrova_http_cut_connections($0)) } ?? 0 }
    }

    /// Per-request states alive now; tests check that every one is released.
    /// Whether `shutdown` has begun: every request from then on is answered 503.
    var isShuttingDown: Bool { core.isShuttingDown.value }

    var liveRequestStates: Int {
        core.liveRequestStates.value
    }

    /// Stops accepting connections, waits until requests in flight are answered (or `timeout`),
    /// then stops the daemon.
    ///
    /// Once this has started, no handler is called: a request that was still arriving, or that comes
    /// on a connection kept alive, is answered 503, and so is every request waiting for a deferred
    /// answer (a later `HTTPResponder.send` does nothing). New connections are refused. Calling it
    /// again waits for the first call, then does nothing.
    ///
    /// A handler still running after `timeout` is not interrupted: stopping the daemon waits for
    /// its thread to return, but its answer is not sent (the connection is closed).
    public func shutdown(timeout: Duration = .seconds(10)) {
        daemon.withLock { daemon in
            guard let running = daemon else { return }
            // Sequentially consistent, paired with `answer`: either a request sees the flag and
            // is refused, or this loop sees it counted in `answeringRequests` and waits for it.
            core.isShuttingDown.withLock { $0 = true }
            abrova_http_quiesce(running)
            // libmicrohttpd 0.9.75 aborts when stopped with a connection suspended. A request
            // suspended before this is answered here; a handler that defers after it is refused.
            core.waiting.close(answering: .shuttingDown)
            let deadline = ContinuousClock.now.advanced(by: timeout)
            while core.answeringRequests.value > 0
                || core.waiting.answeredRequests.value > 0,
                ContinuousClock.now < deadline
            {
                usleep(1_000)
            }
            // Work still running past the deadline is answered 503 (its own answer goes nowhere),
            // and the daemon given a moment to take the resumes.
            core.waiting.close(answering: .shuttingDown, includingOffloaded: true)
            let resumesTaken = ContinuousClock.now.advanced(by: .seconds(1))
            while core.waiting.answeredRequests.value > 0, ContinuousClock.now < resumesTaken { usleep(1_000) }
            core.workers.close()
            abrova_http_stop(running)
            daemon = nil
        }
    }
}

/// Memory libmicrohttpd gives each connection for its headers and its read buffer; larger buffers
/// mean fewer calls per megabyte of body. A head near this size is refused by libmicrohttpd
/// itself, with an HTML page; `HeadSizeRefusal`'s limits sit well below it.
private let connectionMemoryLimit = 64 * 1024

extension HTTPServerConfiguration {
    func validate() throws(HTTPServerError) {
        guard (1...1024).contains(threadCount) else {
            throw HTTPServerError(message: "threadCount must be between 1 and 1024, not \(threadCount)")
        }
        guard maximumBodyBytes >= 0 else {
            throw HTTPServerError(message: "maximumBodyBytes must not be negative, not \(maximumBodyBytes)")
        }
        guard (0...Int(UInt32.max)).contains(maximumConnectionsPerAddress) else {
            throw HTTPServerError(
                message: "maximumConnectionsPerAddress must be between 0 and \(UInt32.max), not \(maximumConnectionsPerAddress)")
        }
        guard (threadCount...Int(UInt32.max)).contains(maximumConnections) else {
            throw HTTPServerError(
                message: "maximumConnections must be between threadCount and \(UInt32.max), not \(maximumConnections)")
        }
        guard (1...1024).contains(workerCount) else {
            throw HTTPServerError(message: "workerCount must be between 1 and 1024, not \(workerCount)")
        }
        guard maximumConcurrentRequests >= 1 else {
            throw HTTPServerError(message: "maximumConcurrentRequests must be at least 1, not \(maximumConcurrentRequests)")
        }
        guard (0...Int(UInt32.max)).contains(minimumBytesPerSecond) else {
            throw HTTPServerError(message: "minimumBytesPerSecond must be between 0 and \(UInt32.max), not \(minimumBytesPerSecond)")
        }
        guard (0...86_400).contains(slowClientGraceSeconds) else {
            throw HTTPServerError(message: "slowClientGraceSeconds must be between 0 and 86400, not \(slowClientGraceSeconds)")
        }
        guard (0...Int(UInt32.max)).contains(connectionTimeoutSeconds) else {
            throw HTTPServerError(message: "connectionTimeoutSeconds must be between 0 and \(UInt32.max), not \(connectionTimeoutSeconds)")
        }
    }
}

// MARK: - The callbacks

// File-scope closures without captures, so that they convert to C function pointers and are not
// isolated to the main actor (a main-actor closure called on a libmicrohttpd thread traps).

private let accessCallback: abrova_http_access_callback = { context, connection, url, method, uploadData, uploadDataSize, requestContext in
    guard let context, let connection, let uploadDataSize, let requestContext else { return 0 }
    let core = Unmanaged<ServerCore>.fromOpaque(context).takeUnretainedValue()
    return core.access(
        connection: connection,
        url: url,
        method: method,
        uploadData: uploadData,
        uploadDataSize: uploadDataSize,
        requestContext: requestContext
    ) ? 1 : 0
}

private let completedCallback: abrova_http_completed_callback = { context, requestContext, _ in
    guard let context, let requestContext, let state = requestContext.pointee else { return }
    requestContext.pointee = nil
    let core = Unmanaged<ServerCore>.fromOpaque(context).takeUnretainedValue()
    // Balances the passRetained of the request's first call: called once per request, whether it
    // was answered, aborted by the client, timed out, or cut off by the daemon stopping.
    core.complete(Unmanaged<RequestState>.fromOpaque(state).takeRetainedValue())
}

private let goneCallback: abrova_http_gone_callback = { context, suspension in
    guard let context else { return }
    // On the pacer's thread, which stopping the daemon joins before the server lets the core go.
    Unmanaged<ServerCore>.fromOpaque(context).takeUnretainedValue().waiting.clientGone(suspension)
}

private let headerVisitor: abrova_http_value_visitor = { context, key, value in
    guard let context, let key else { return }
    let state = Unmanaged<RequestState>.fromOpaque(context).takeUnretainedValue()
    let name = String(cString: key).lowercased()
    if state.headers[name] != nil { state.repeatedHeaders.insert(name) }
    let text = value.map { String(cString: $0) } ?? ""
    state.headerBytes += name.utf8.count + text.utf8.count + 4 // ": " and CRLF
    state.headers[name] = text
}

private let queryVisitor: abrova_http_value_visitor = { context, key, value in
    guard let context, let key else { return }
    let state = Unmanaged<RequestState>.fromOpaque(context).takeUnretainedValue()
    state.query[percentDecoded(String(cString: key))] = value.map { percentDecoded(String(cString: $0)) } ?? ""
}

// MARK: - Requests

/// One request between libmicrohttpd's calls. Only the thread that serves its connection touches
/// it, and it is reached only through the raw pointer libmicrohttpd keeps for the request.
private final class RequestState {
    let core: ServerCore
    let method: String
    let path: String
    var headers: [String: String] = [:]
    /// Lowercased names sent more than once.
    var repeatedHeaders: Set<String> = []
    /// The size of every header line as sent, repeats included.
    var headerBytes = 0
    var query: [String: String] = [:]
    var body: [UInt8] = []
    /// Body bytes received, kept or not.
    var receivedBytes = 0
    var isTooLarge = false
    /// Counted in `admittedRequests`.
    var isAdmitted = false
    /// Counted in `answeringRequests`.
    var isAnswering = false
    /// Set once the handler deferred its answer: the request's place in `ServerCore.waiting`.
    var waitingID: WaitingRequests.ID?
    var hasResponse = false

    init(core: ServerCore, method: String, path: String) {
        self.core = core
        self.method = method
        self.path = path
        core.liveRequestStates.withLock { $0 += 1 }
    }

    deinit {
        core.liveRequestStates.withLock { $0 -= 1 }
    }
}

/// What the callbacks share: the handler, the limits and the counters.
private final class ServerCore: Sendable {
    let handler: @Sendable (HTTPRequest) -> HTTPResponse
    let maximumBodyBytes: Int
    let maximumConcurrentRequests: Int
    let unthrottledPaths: Set<String>
    /// Requests past the admission checks and not yet completed (`maximumConcurrentRequests`).
    let admittedRequests = Protected<Int>(0)
    /// Requests whose body is in and whose answer is not yet sent: `shutdown` waits for these.
    let answeringRequests = Protected<Int>(0)
    let isShuttingDown = Protected<Bool>(false)
    /// `RequestState`s allocated and not yet freed.
    let liveRequestStates = Protected<Int>(0)
    /// Requests whose handler deferred the answer, or offloaded it.
    let waiting = WaitingRequests()
    /// The threads that run offloaded work (`HTTPResponse.offloaded`).
    let workers: WorkerThreads

    init(configuration: HTTPServerConfiguration, handler: @escaping @Sendable (HTTPRequest) -> HTTPResponse) {
        self.handler = handler
        workers = WorkerThreads(count: configuration.workerCount)
        self.maximumBodyBytes = configuration.maximumBodyBytes
        self.maximumConcurrentRequests = configuration.maximumConcurrentRequests
        unthrottledPaths = configuration.unthrottledPaths
    }

    /// libmicrohttpd calls this once when the headers are in, once per part of the body, and once
    /// when the body is complete. Returns false to close the connection.
    func access(
        connection: OpaquePointer,
        url: UnsafePointer<CChar>?,
        method: UnsafePointer<CChar>?,
        uploadData: UnsafePointer<CChar>?,
        uploadDataSize: UnsafeMutablePointer<Int>,
        requestContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    ) -> Bool {
        guard let pointer = requestContext.pointee else {
            let state = RequestState(
                core: self,
                method: method.map { String(cString: $0) } ?? "",
                path: url.map { String(cString: $0) } ?? "/"
            )
            requestContext.pointee = Unmanaged.passRetained(state).toOpaque()
            return begin(state, on: connection)
        }
        let state = Unmanaged<RequestState>.fromOpaque(pointer).takeUnretainedValue()
        if state.hasResponse { return true }
        let size = uploadDataSize.pointee
        if size > 0 {
            uploadDataSize.pointee = 0
            return receive(UnsafeRawBufferPointer(start: uploadData, count: size), into: state)
        }
        return answer(state, on: connection)
    }

    /// The headers are in: refuse now what can be refused before reading the body.
    private func begin(_ state: RequestState, on connection: OpaquePointer) -> Bool {
        abrova_http_visit_headers(connection, headerVisitor, Unmanaged.passUnretained(state).toOpaque())
        abrova_http_visit_query(connection, queryVisitor, Unmanaged.passUnretained(state).toOpaque())
        // Below libmicrohttpd's own limit (the connection's memory), whose answers are HTML.
        if let oversize = HeadSizeRefusal(path: state.path, query: state.query, headerBytes: state.headerBytes) {
            return respond(oversize.response, to: state, on: connection)
        }
        // First, before the body is read: a body framed two ways may hide a second request.
        if let ambiguity = HTTPHeadAmbiguity(headers: state.headers, repeatedHeaders: state.repeatedHeaders) {
            return respond(.ambiguous(ambiguity), to: state, on: connection)
        }
        if isShuttingDown.value {
            return respond(.shuttingDown, to: state, on: connection)
        }
        if let declared = state.headers["content-length"], exceeds(declared, maximumBodyBytes) {
            return respond(.tooLarge(maximumBodyBytes), to: state, on: connection)
        }
        // Room for a declared body, up to a mebibyte: a client that declares much and sends
        // little must not make the server hold what it never sent.
        if let declared = state.headers["content-length"].flatMap({ Int($0) }) {
            state.body.reserveCapacity(Swift.min(declared, 1 << 20))
        }
        return true
    }

    /// A part of the body. A body that grows past the limit (chunked, so its length was not
    /// declared) cannot be answered before it ends: libmicrohttpd queues no response while upload
    /// data is being delivered. So the rest is read and dropped, and the 413 goes out at its end.
    private func receive(_ bytes: UnsafeRawBufferPointer, into state: RequestState) -> Bool {
        state.receivedBytes += bytes.count
        if state.receivedBytes > maximumBodyBytes {
            if !state.isTooLarge {
                state.isTooLarge = true
                state.body = []
            }
            // Reading on forever is not a service: a body running far past the limit gets its
            // connection closed instead of an answer.
            return state.receivedBytes - maximumBodyBytes <= Swift.max(maximumBodyBytes, 1 << 20)
        }
        state.body.append(contentsOf: bytes)
        return true
    }

    /// The body is complete: call the handler and send its response.
    private func answer(_ state: RequestState, on connection: OpaquePointer) -> Bool {
        if let id = state.waitingID {
            // Called again after the resume, which comes once the answer is kept, or with none
            // kept when the client hung up: the connection is then closed with nothing sent.
            guard let response = waiting.takeAnswer(id) else { return false }
            return respond(response, to: state, on: connection)
        }
        if state.isTooLarge {
            return respond(.tooLarge(maximumBodyBytes), to: state, on: connection)
        }
        // The slot is taken once the request is whole: a client that stalls in its headers or
        // its body holds a connection, never a slot.
        if !unthrottledPaths.contains(state.path) {
            let hasSlot = admittedRequests.withLock { admitted in
                guard admitted < maximumConcurrentRequests else { return false }
                admitted += 1
                return true
            }
            guard hasSlot else { return respond(.tooManyRequests(maximumConcurrentRequests), to: state, on: connection) }
            state.isAdmitted = true
        }
        answeringRequests.withLock { $0 += 1 }
        state.isAnswering = true
        if isShuttingDown.value {
            return respond(.shuttingDown, to: state, on: connection)
        }
        let request = HTTPRequest(
            method: state.method,
            path: state.path,
            query: state.query,
            headers: state.headers,
            body: state.body
        )
        state.body = [] // the request owns the only copy now
        let response = handler(request)
        if let work = response.offloadedWork { return offload(work, state, on: connection) }
        guard let start = response.deferredStart else {
            return respond(response, to: state, on: connection)
        }
        return deferAnswer(start, state, on: connection)
    }

    /// The answer is made on a worker thread: the connection is suspended, and the request keeps
    /// its slot and its place in `answeringRequests` until the work has returned, whether or not
    /// its client is still there (so clients that send and leave cannot pile up work).
    private func offload(_ work: @escaping @Sendable () -> HTTPResponse, _ state: RequestState, on connection: OpaquePointer) -> Bool {
        guard let id = waiting.suspend(connection, isOffloaded: true) else {
            return respond(.shuttingDown, to: state, on: connection)
        }
        state.waitingID = id
        // Counted by the work from now on, not by the request's completion.
        let isAdmitted = state.isAdmitted
        state.isAdmitted = false
        state.isAnswering = false
        let run: @Sendable () -> Void = { [self] in
            // Not started once shutdown has answered it.
            if waiting.isWaiting(id) {
                var response = work()
                if response.deferredStart != nil || response.offloadedWork != nil {
                    response = .error(status: 500, message: "offloaded work made a response that is not an answer")
                }
                // The slot before the answer: the client's next request may come at once. Still
                // answering until the answer is kept, so that shutdown waits for it.
                if isAdmitted { admittedRequests.withLock { $0 -= 1 } }
                waiting.answer(id, with: response)
            } else if isAdmitted {
                admittedRequests.withLock { $0 -= 1 }
            }
            answeringRequests.withLock { $0 -= 1 }
        }
        // With no worker to run it (none could be started), this thread does.
        if !workers.submit(run) { run() }
        return true
    }

    /// The handler answers later: the connection is suspended, and the request gives back its
    /// slot and leaves `answeringRequests` before `start` gets the responder.
    private func deferAnswer(_ start: @Sendable (HTTPResponder) -> Void, _ state: RequestState, on connection: OpaquePointer) -> Bool {
        guard let id = waiting.suspend(connection) else {
            return respond(.shuttingDown, to: state, on: connection)
        }
        state.waitingID = id
        if state.isAdmitted {
            state.isAdmitted = false
            admittedRequests.withLock { $0 -= 1 }
        }
        // After the suspension: from then on `shutdown` answers the request, and waits for that.
        state.isAnswering = false
        answeringRequests.withLock { $0 -= 1 }
        start(HTTPResponder(requests: waiting, id: id))
        return true
    }

    private func respond(_ response: HTTPResponse, to state: RequestState, on connection: OpaquePointer) -> Bool {
        state.hasResponse = true
        // libmicrohttpd refuses statuses outside 100...999, and a 1xx cannot be a final answer.
        let status = (200...999).contains(response.status) ? UInt32(response.status) : 500
        let made = response.body.withUnsafeBytes { abrova_http_make_response($0.baseAddress, $0.count) }
        guard let made else { return false }
        for header in response.headers {
            // A header libmicrohttpd refuses (Content-Length, or one with a line break) is left out.
            _ = abrova_http_add_header(made, header.name, header.value)
        }
        return abrova_http_queue_response(connection, status, made) != 0
    }

    func complete(_ state: RequestState) {
        if state.isAdmitted { admittedRequests.withLock { $0 -= 1 } }
        if state.isAnswering { answeringRequests.withLock { $0 -= 1 } }
        if let id = state.waitingID { waiting.complete(id) }
    }
}

/// Whether a Content-Length value is over `limit`. Digits too many for an `Int` are over any limit;
/// anything else malformed is left to libmicrohttpd, which refuses it.
private func exceeds(_ declared: String, _ limit: Int) -> Bool {
    if let length = Int(declared) { return length > limit }
    return !declared.isEmpty && declared.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
}

extension HTTPResponse {
    /// Queued before the body is read, so libmicrohttpd reads nothing more on the connection and
    /// closes it after this answer.
    static func ambiguous(_ ambiguity: HTTPHeadAmbiguity) -> HTTPResponse {
        .error(status: 400, message: ambiguity.message, headers: [("Connection", "close")])
    }

    static let shuttingDown = HTTPResponse.error(
        status: 503,
        message: "the server is shutting down",
        headers: [("Connection", "close")]
    )

    static func tooLarge(_ limit: Int) -> HTTPResponse {
        .error(status: 413, message: "the body holds more than \(limit) bytes (limit maximumBodyBytes)")
    }

    static func tooManyRequests(_ limit: Int) -> HTTPResponse {
        .error(
            status: 429,
            message: "too many requests at once: more than \(limit) (limit maximumConcurrentRequests)",
            headers: [("Retry-After", "1")]
        )
    }
}
