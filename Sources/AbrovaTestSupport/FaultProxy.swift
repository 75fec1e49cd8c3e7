import AbrovaLocking
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A TCP proxy on loopback that injects network faults between a client and a server, for tests
/// on kernels without netem. Point the client at `port`; the proxy forwards to the server and
/// applies `fault`, which may be changed at any time (open connections follow the change at their
/// next read).
///
///     let proxy = try FaultProxy(upstreamPort: server.port)
///     proxy.fault = .latency(.seconds(3))
///     proxy.fault = .cutResponse(afterBytes: 40)  // the server commits; the client hears nothing
///
/// It knows nothing of HTTP: faults act on bytes and connections (but for `foreignAnswer`, which
/// writes an answer of its own). One thread pair a connection.
/// Call `stop()` when done: the accepting thread holds the proxy until then.
public final class FaultProxy: Sendable {
    /// What the proxy does to the traffic.
    public enum Fault: Sendable, Equatable {
        /// Forwards everything as it comes.
        case none
        /// 100% loss: connections are accepted, but nothing gets through either way, so clients
        /// wait for their timeout.
        case blackhole
        /// Every chunk waits this long before it is forwarded, both ways.
        case latency(Duration)
        /// Forwards this many bytes of each connection's request stream, then resets both sides:
        /// the server sees a request cut short.
        case cutRequest(afterBytes: Int)
        /// Forwards the requests whole but only this many bytes of the answers, then resets both
        /// sides: the server did the work; the client never hears the end of it.
        case cutResponse(afterBytes: Int)
        /// Forwards each connection's request stream twice, on two server connections; the client
        /// hears the first's answers. Every request reaches the server twice, at about once.
        case duplicateRequests
        /// Resets every new connection at once, and an open one at its next chunk.
        case reset
        /// Answers every request itself (on new connections and, from their next request, on
        /// open ones) with an HTML page under this status, as a captive portal or a
        /// misconfigured proxy does: the server never sees the request.
        case foreignAnswer(status: Int)
    }

    /// The port clients connect to (on 127.0.0.1).
    public let port: UInt16
    private let upstreamPort: UInt16
    private let listener: Int32
    private let state = Protected(State())

    private struct State {
        var fault = Fault.none
        var faultsInjected = 0
        var connections = 0
        var forwarded = ForwardedBytes()
        var isStopped = false
        var isListenerClosed = false
        /// Open connections, by their client socket.
        var open: [Int32: Connection] = [:]
    }

    /// Listens on a free loopback port and forwards to 127.0.0.1 at `upstreamPort`.
    ///
    /// - Throws: `RawHTTPConnection.Failure` when the listening socket cannot be made.
    public init(upstreamPort: UInt16) throws {
        self.upstreamPort = upstreamPort
        listener = try Socket.listen()
        port = try Socket.localPort(listener)
        let proxy = self
        Thread { proxy.acceptLoop() }.start()
    }

    /// The fault applied from now on.
    public var fault: Fault {
        get { state.withLock { $0.fault } }
        set { state.withLock { $0.fault = newValue } }
    }

    /// How many times a fault acted: a connection reset, cut or duplicated, a chunk delayed or lost.
    public var faultsInjected: Int { state.withLock { $0.faultsInjected } }

    /// How many connections clients have opened.
    public var connectionCount: Int { state.withLock { $0.connections } }

    /// Bytes the proxy has forwarded each way, as they went on the wire (HTTP heads and bodies as
    /// sent, compressed or not).
    public struct ForwardedBytes: Hashable, Sendable {
        /// From clients to the server: requests.
        public var towardServer = 0
        /// From the server to clients: answers.
        public var towardClients = 0
        /// Both ways.
        public var total: Int { towardServer + towardClients }

        public init(towardServer: Int = 0, towardClients: Int = 0) {
            self.towardServer = towardServer
            self.towardClients = towardClients
        }

        /// What was forwarded since `earlier`.
        public func since(_ earlier: ForwardedBytes) -> ForwardedBytes {
            ForwardedBytes(towardServer: towardServer - earlier.towardServer, towardClients: towardClients - earlier.towardClients)
        }
    }

    /// Bytes forwarded so far, both ways (duplicated requests count once, as the client sent them).
    ///
    ///     let before = proxy.forwardedBytes
    ///     await device.syncNow()
    ///     print(proxy.forwardedBytes.since(before).total)
    public var forwardedBytes: ForwardedBytes { state.withLock { $0.forwarded } }

    private func countForwarded(_ count: Int, towardServer: Bool) {
        state.withLock { state in
            if towardServer { state.forwarded.towardServer += count } else { state.forwarded.towardClients += count }
        }
    }

    /// Stops accepting and closes every connection.
    public func stop() {
        let open = state.withLock { state -> [Connection]? in
            guard !state.isStopped else { return nil }
            state.isStopped = true
            // Under the lock the accept loop closes the listener with: once closed, its number
            // may be another socket's.
            if !state.isListenerClosed { shutdown(listener, Int32(SHUT_RDWR)) }
            return Array(state.open.values)
        }
        for connection in open ?? [] { connection.resetAll() }
    }

    /// Resets every open connection (as a network that drops them all), leaving the proxy up.
    public func resetConnections() {
        let open = state.withLock { state in
            state.faultsInjected += state.open.isEmpty ? 0 : 1
            return Array(state.open.values)
        }
        for connection in open { connection.resetAll() }
    }

    private func count() { state.withLock { $0.faultsInjected += 1 } }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            guard client >= 0 else {
                // A client gone before it was accepted (a reset) is no reason to stop listening.
                let error = errno
                if [EINTR, ECONNABORTED, EPROTO].contains(error) && !state.withLock({ $0.isStopped }) { continue }
                break // stopped
            }
            Socket.setNoDelay(client)
            let (fault, stopped) = state.withLock { state in
                state.connections += 1
                return (state.fault, state.isStopped)
            }
            if stopped {
                _ = Glibc.close(client)
                break
            }
            if fault == .reset {
                count()
                Socket.reset(client)
                continue
            }
            if case .foreignAnswer(let status) = fault {
                count()
                Thread { Socket.answerWithAPage(client, status: status) }.start()
                continue
            }
            guard let upstream = try? Socket.connect(port: upstreamPort) else {
                Socket.reset(client)
                continue
            }
            let twin = fault == .duplicateRequests ? try? Socket.connect(port: upstreamPort) : nil
            if twin != nil { count() }
            let connection = Connection(client: client, upstream: upstream, twin: twin)
            state.withLock { state in state.open[client] = connection }
            let proxy = self
            Thread { proxy.pump(connection, towardServer: true) }.start()
            Thread { proxy.pump(connection, towardServer: false) }.start()
            if let twin {
                // The twin's answers are read and dropped, so the server never blocks on them.
                Thread {
                    Socket.drain(twin)
                    proxy.finishThread(of: connection)
                }.start()
            }
        }
        state.withLock { state in
            state.isListenerClosed = true
            _ = Glibc.close(listener)
        }
    }

    /// Copies one direction of a connection, applying the fault chunk by chunk.
    private func pump(_ connection: Connection, towardServer: Bool) {
        let source = towardServer ? connection.client : connection.upstream
        let destination = towardServer ? connection.upstream : connection.client
        var forwarded = 0
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        loop: while true {
            let count = buffer.withUnsafeMutableBytes { recv(source, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { break }
            var chunk = Array(buffer[0..<count])
            switch fault {
            case .none:
                break
            case .reset:
                self.count()
                connection.resetAll()
                break loop
            case .foreignAnswer(let status):
                guard towardServer else { break }
                // The request goes no further; the page answers it, and the connection ends.
                self.count()
                _ = Socket.sendAll(connection.client, Socket.page(status: status))
                shutdown(connection.client, Int32(SHUT_WR))
                break loop
            case .blackhole:
                self.count()
                continue loop
            case .latency(let delay):
                self.count()
                Thread.sleep(forTimeInterval: Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18)
            case .cutRequest(let limit) where towardServer, .cutResponse(let limit) where !towardServer:
                if forwarded + chunk.count > limit {
                    chunk = Array(chunk.prefix(max(0, limit - forwarded)))
                    if Socket.sendAll(destination, chunk) { countForwarded(chunk.count, towardServer: towardServer) }
                    self.count()
                    connection.resetAll()
                    break loop
                }
            case .cutRequest, .cutResponse:
                break
            case .duplicateRequests:
                break
            }
            if towardServer, let twin = connection.twin { _ = Socket.sendAll(twin, chunk) }
            guard Socket.sendAll(destination, chunk) else { break }
            forwarded += chunk.count
            countForwarded(chunk.count, towardServer: towardServer)
        }
        // Half-close: the other side hears the end of this direction; the last pump out closes all.
        shutdown(destination, Int32(SHUT_WR))
        if towardServer, let twin = connection.twin { shutdown(twin, Int32(SHUT_WR)) }
        finishThread(of: connection)
    }

    /// One of `connection`'s threads is done; after the last, it leaves the open connections.
    private func finishThread(of connection: Connection) {
        // A reset of it meanwhile, found in `open`, sees that its sockets are closed.
        if connection.finishThread() { state.withLock { state in state.open[connection.client] = nil } }
    }
}

/// One proxied connection: the client's socket, the server's, and the duplicate's.
///
/// Its sockets are closed by the last of its threads to finish (the two pumps, and the twin's
/// reader), so no thread of it touches a socket number after the close; a reset from outside
/// (`stop`, `resetConnections`) looks under the lock whether they are closed. A socket's number is
/// another's once closed: a shutdown of it would end some other connection of the process.
private final class Connection: Sendable {
    let client: Int32
    let upstream: Int32
    let twin: Int32?
    /// The threads still using the sockets, and whether they are closed.
    private let lifecycle: Protected<(threadsLeft: Int, isClosed: Bool)>

    init(client: Int32, upstream: Int32, twin: Int32?) {
        self.client = client
        self.upstream = upstream
        self.twin = twin
        lifecycle = Protected((threadsLeft: twin == nil ? 2 : 3, isClosed: false))
    }

    private var descriptors: [Int32] { [client, upstream] + (twin.map { [$0] } ?? []) }

    /// A thread of the connection is done with its sockets; the last one closes them. Returns
    /// whether this was the last.
    func finishThread() -> Bool {
        lifecycle.withLock { state in
            state.threadsLeft -= 1
            guard state.threadsLeft == 0 else { return false }
            state.isClosed = true
            for descriptor in descriptors { _ = Glibc.close(descriptor) }
            return true
        }
    }

    /// Resets every socket, unless they are closed: the connection's threads stop at their next read.
    func resetAll() {
        lifecycle.withLock { state in
            guard !state.isClosed else { return }
            for descriptor in descriptors { shutdown(descriptor, Int32(SHUT_RDWR)) }
            Socket.setResetOnClose(client)
            Socket.setResetOnClose(upstream)
        }
    }
}
