import Foundation
import Synchronization

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
    private let state = Mutex(State())

    private struct State {
        var fault = Fault.none
        var faultsInjected = 0
        var connections = 0
        var forwarded = ForwardedBytes()
        var isStopped = false
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
    ///     await device.forceSyncNow()
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
            return Array(state.open.values)
        }
        // Once only: the accept loop closes the listener after this, and its number may be
        // another socket's by a second call.
        guard let open else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        for connection in open { connection.resetAll() }
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
                // The twin's answers are read and dropped, so the server never blocks on them; the
                // twin is closed here, once the server has closed its end.
                Thread {
                    Socket.drain(twin)
                    _ = Glibc.close(twin)
                }.start()
            }
        }
        _ = Glibc.close(listener)
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
        if connection.finishOneDirection() {
            state.withLock { state in state.open[connection.client] = nil }
            connection.close()
        }
    }
}

/// One proxied connection: the client's socket, the server's, and the duplicate's.
private final class Connection: Sendable {
    let client: Int32
    let upstream: Int32
    let twin: Int32?
    private let directionsLeft = Mutex(2)

    init(client: Int32, upstream: Int32, twin: Int32?) {
        self.client = client
        self.upstream = upstream
        self.twin = twin
    }

    var descriptors: [Int32] { [client, upstream] + (twin.map { [$0] } ?? []) }

    /// Whether this was the last direction to finish.
    func finishOneDirection() -> Bool {
        directionsLeft.withLock { left in
            left -= 1
            return left == 0
        }
    }

    /// Resets every socket of the connection: both pumps stop at their next read.
    func resetAll() {
        for descriptor in descriptors { shutdown(descriptor, Int32(SHUT_RDWR)) }
        Socket.setResetOnClose(client)
        Socket.setResetOnClose(upstream)
    }

    /// Closes the client's and the server's sockets (the twin's reader closes the twin).
    func close() {
        _ = Glibc.close(client)
        _ = Glibc.close(upstream)
    }
}

/// The few socket calls the proxy makes.
private enum Socket {
    static func listen() throws -> Int32 {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw RawHTTPConnection.Failure(description: "socket: errno \(errno)") }
        var reuse: Int32 = 1
        setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &reuse, socklen_t(MemoryLayout<Int32>.size))
        var address = loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, Glibc.listen(descriptor, 128) == 0 else {
            let error = errno
            _ = Glibc.close(descriptor)
            throw RawHTTPConnection.Failure(description: "bind or listen: errno \(error)")
        }
        return descriptor
    }

    static func localPort(_ descriptor: Int32) throws -> UInt16 {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let result = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard result == 0 else { throw RawHTTPConnection.Failure(description: "getsockname: errno \(errno)") }
        return UInt16(bigEndian: address.sin_port)
    }

    static func connect(port: UInt16) throws -> Int32 {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw RawHTTPConnection.Failure(description: "socket: errno \(errno)") }
        var address = loopback(port: port)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else {
            let error = errno
            _ = Glibc.close(descriptor)
            throw RawHTTPConnection.Failure(description: "connect: errno \(error)")
        }
        setNoDelay(descriptor)
        return descriptor
    }

    /// Sends each chunk as soon as it is written. A relay that waits (Nagle's algorithm) holds
    /// the second write of a request (an HTTP client's body after its head) until the server
    /// acknowledges the first, which a server delays by up to 40 ms on Linux: a delay that the
    /// connection without the proxy does not have.
    static func setNoDelay(_ descriptor: Int32) {
        var on: Int32 = 1
        setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
    }

    static func loopback(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    /// Writes all of `bytes`; false when the peer is gone.
    static func sendAll(_ descriptor: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent < 0 && errno == EINTR { continue }
            guard sent > 0 else { return false }
            offset += sent
        }
        return true
    }

    /// Reads until the peer closes, dropping what comes.
    static func drain(_ descriptor: Int32) {
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        while buffer.withUnsafeMutableBytes({ recv(descriptor, $0.baseAddress, $0.count, 0) }) > 0 {}
    }

    /// Reads a request's head, answers it with an HTML page under `status` and closes, reading
    /// what else comes for a moment first (a close with unread bytes would be a reset).
    static func answerWithAPage(_ descriptor: Int32, status: Int) {
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        while received.count < 64 << 10, !holdsHeadEnd(received) {
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { break }
            received += buffer[0..<count]
        }
        _ = sendAll(descriptor, page(status: status))
        shutdown(descriptor, Int32(SHUT_WR))
        drain(descriptor)
        _ = Glibc.close(descriptor)
    }

    /// A captive portal's answer: an HTML page under `status`, and the connection closes.
    static func page(status: Int) -> [UInt8] {
        let page = Array("<html><head><title>\(status)</title></head><body><h1>Network login required</h1></body></html>".utf8)
        let head = "HTTP/1.1 \(status) Refused\r\nContent-Type: text/html\r\nContent-Length: \(page.count)\r\nConnection: close\r\n\r\n"
        return Array(head.utf8) + page
    }

    private static func holdsHeadEnd(_ bytes: [UInt8]) -> Bool {
        bytes.count >= 4
            && (0...(bytes.count - 4)).contains { bytes[$0] == 13 && bytes[$0 + 1] == 10 && bytes[$0 + 2] == 13 && bytes[$0 + 3] == 10 }
    }

    /// Makes the next close send a reset instead of an orderly end.
    static func setResetOnClose(_ descriptor: Int32) {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
    }

    /// Resets a connection that no pump owns.
    static func reset(_ descriptor: Int32) {
        setResetOnClose(descriptor)
        _ = Glibc.close(descriptor)
    }
}
