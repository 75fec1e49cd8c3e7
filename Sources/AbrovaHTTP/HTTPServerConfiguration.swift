/// How an `HTTPServer` listens, and the limits it puts on requests.
public struct HTTPServerConfiguration: Sendable {
    /// The TCP port; 0 binds any free port (read it back from `HTTPServer.port`).
    public var port: UInt16
    /// How many threads serve connections (libmicrohttpd's thread pool). A handler runs on one of
    /// them and holds it while it runs, so this bounds how many handlers run at once.
    public var threadCount: Int
    /// How many threads run the work of offloaded answers (`HTTPResponse.offloaded`): work that
    /// waits, on a database say, without holding a thread that serves connections.
    public var workerCount: Int
    /// The largest request body accepted; a larger one is answered with 413.
    public var maximumBodyBytes: Int
    /// The most requests being answered at once, each counted from the end of its body (a client
    /// still sending holds no slot) until its answer is sent; one more is answered with 429 and
    /// `Retry-After: 1`. Requests for `unthrottledPaths` are not counted, nor requests waiting for
    /// a deferred answer (`HTTPResponse.deferred`); requests whose answer is offloaded
    /// (`HTTPResponse.offloaded`) are, until their work returns.
    public var maximumConcurrentRequests: Int
    /// Paths answered whatever the load (cheap probes: a load balancer's health check must not
    /// read an overloaded server as down).
    public var unthrottledPaths: Set<String>
    /// The most connections one client address may hold open (0: no limit); one more is closed
    /// at once.
    public var maximumConnectionsPerAddress: Int
    /// The most connections open at once, from all clients, shared evenly by the `threadCount`
    /// threads; one more is closed at once. The default is libmicrohttpd's own. Each costs a file
    /// descriptor (see `ulimit -n`), and a request waiting for a deferred answer holds its
    /// connection, so long polls need this well above the polls expected at once.
    public var maximumConnections: Int
    /// How long an idle connection stays open, in seconds (0: no limit). A connection whose request
    /// waits for a deferred answer is not idle: its clock starts again once the answer is given.
    public var connectionTimeoutSeconds: Int
    /// The slowest a request may arrive, or its answer be taken, on average from its first byte
    /// once `slowClientGraceSeconds` have passed (0: no minimum; Linux only, where the TCP
    /// counters say how fast a connection moves). A slower connection is closed: a client that
    /// trickles a byte before each idle timeout holds it no longer than the grace and a little.
    /// While the handler runs, or its deferred answer is awaited, the connection is not paced.
    public var minimumBytesPerSecond: Int
    /// How long a request or an answer may move at any pace before `minimumBytesPerSecond` applies.
    public var slowClientGraceSeconds: Int
    /// Binds 127.0.0.1 only, when true; otherwise every IPv4 address.
    public var loopbackOnly: Bool

    /// A configuration; each default suits a server behind a proxy on one machine.
    public init(
        port: UInt16 = 0,
        threadCount: Int = 4,
        workerCount: Int = 8,
        maximumBodyBytes: Int = 16 * 1024 * 1024,
        maximumConcurrentRequests: Int = 64,
        connectionTimeoutSeconds: Int = 30,
        loopbackOnly: Bool = false,
        unthrottledPaths: Set<String> = ["/v1/health"],
        maximumConnectionsPerAddress: Int = 0,
        maximumConnections: Int = 1_020,
        minimumBytesPerSecond: Int = 1_024,
        slowClientGraceSeconds: Int = 10
    ) {
        self.minimumBytesPerSecond = minimumBytesPerSecond
        self.slowClientGraceSeconds = slowClientGraceSeconds
        self.unthrottledPaths = unthrottledPaths
        self.maximumConnectionsPerAddress = maximumConnectionsPerAddress
        self.maximumConnections = maximumConnections
        self.port = port
        self.threadCount = threadCount
        self.workerCount = workerCount
        self.maximumBodyBytes = maximumBodyBytes
        self.maximumConcurrentRequests = maximumConcurrentRequests
        self.connectionTimeoutSeconds = connectionTimeoutSeconds
        self.loopbackOnly = loopbackOnly
    }
}

/// An `HTTPServer` that could not start: a port in use, a configuration out of range.
public struct HTTPServerError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, for people.
    public let message: String

    /// An error with its message.
    public init(message: String) { self.message = message }

    public var description: String { "HTTP server error: \(message)" }
}
