import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// An HTTP/1.1 client over a plain socket, for what URLSession will not send: lying headers,
/// half-sent bodies, exact bytes. Blocking; for tests.
public final class RawHTTPConnection {
    /// A response read off the socket.
    public struct Response: Sendable {
        /// The status code.
        public var status: Int
        /// The headers, by lowercased name.
        public var headers: [String: String]
        /// The body (its length from Content-Length).
        public var body: [UInt8]
    }

    /// A socket call that failed, or a response that could not be read.
    public struct Failure: Error, CustomStringConvertible {
        /// What went wrong.
        public var description: String
        /// Whether the server ended the connection (an end or a reset) before the answer was whole.
        public var isEndedByTheServer = false
    }

    private let socketDescriptor: Int32
    private let port: UInt16
    private var buffered: [UInt8] = []
    /// Bytes received so far, read or not: a failure says how far the answer had come.
    private var receivedBytes = 0

    /// Connects to 127.0.0.1 at `port`; a read that waits longer than `receiveTimeoutSeconds` fails.
    /// Connects to 127.0.0.1:`port`. A `receiveBufferBytes` makes the socket's receive buffer
    /// that small (the kernel doubles it), for a client that takes its answers slowly.
    public init(port: UInt16, receiveTimeoutSeconds: Int = 20, receiveBufferBytes: Int? = nil) throws {
        self.port = port
        #if canImport(Glibc)
            socketDescriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
            socketDescriptor = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard socketDescriptor >= 0 else { throw RawHTTPConnection.Failure(description: "socket: errno \(errno)") }
        var timeout = timeval(tv_sec: receiveTimeoutSeconds, tv_usec: 0)
        setsockopt(socketDescriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        if let receiveBufferBytes {
            var bytes = Int32(receiveBufferBytes)
            setsockopt(socketDescriptor, SOL_SOCKET, SO_RCVBUF, &bytes, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(socketDescriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else {
            let error = errno
            _ = closeDescriptor(socketDescriptor)
            throw RawHTTPConnection.Failure(description: "connect: errno \(error)")
        }
    }

    private var isOpen = true

    deinit { close() }

    /// Closes the socket (also done when the value is released).
    public func close() {
        guard isOpen else { return }
        isOpen = false
        _ = closeDescriptor(socketDescriptor)
    }

    /// Resets the connection (SO_LINGER of 0, then close): the server sees a reset, not an end.
    public func reset() {
        guard isOpen else { return }
        var lingering = linger(l_onoff: 1, l_linger: 0)
        setsockopt(socketDescriptor, SOL_SOCKET, SO_LINGER, &lingering, socklen_t(MemoryLayout<linger>.size))
        close()
    }

    /// Whether the server has ended the connection (an end or a reset), looked at without
    /// waiting and without taking what it sent.
    public var isClosedByThePeer: Bool {
        var byte: UInt8 = 0
        let count = recv(socketDescriptor, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        return count == 0 || (count < 0 && (errno == ECONNRESET || errno == EPIPE))
    }

    /// Sends text as UTF-8.
    public func send(_ text: String) throws {
        try send(Array(text.utf8))
    }

    /// Sends bytes, all of them.
    public func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes {
                #if canImport(Glibc)
                    Glibc.send(socketDescriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
                #else
                    Darwin.send(socketDescriptor, $0.baseAddress, $0.count, 0)
                #endif
            }
            guard sent > 0 else { throw RawHTTPConnection.Failure(description: "send: errno \(errno)") }
            offset += sent
        }
    }

    /// Says that nothing more will be sent (a half close): a server waiting for more of a body
    /// sees the end of the stream.
    public func finishSending() {
        #if canImport(Glibc)
            _ = shutdown(socketDescriptor, Int32(SHUT_WR))
        #else
            _ = shutdown(socketDescriptor, SHUT_WR)
        #endif
    }

    /// Reads one response, whose body has a Content-Length.
    public func readResponse() throws -> Response {
        let separator = Array("\r\n\r\n".utf8)
        var headEnd: Int?
        while headEnd == nil {
            headEnd = buffered.firstRange(of: separator)?.lowerBound
            if headEnd == nil { try fill() }
        }
        let head = String(decoding: buffered[..<headEnd!], as: UTF8.self)
        buffered.removeFirst(headEnd! + separator.count)
        var lines = head.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else {
            throw RawHTTPConnection.Failure(description: "bad status line in \(head)")
        }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        guard let length = headers["content-length"].flatMap({ Int($0) }) else {
            throw RawHTTPConnection.Failure(description: "no Content-Length in \(head)")
        }
        while buffered.count < length { try fill() }
        let body = Array(buffered[..<length])
        buffered.removeFirst(length)
        return Response(status: status, headers: headers, body: body)
    }

    /// Reads until the server closes the connection (a reset counts as closed) and returns what
    /// was not read yet: for answers that are not one response with a Content-Length.
    ///
    /// - Throws: `Failure` when the server neither closes nor sends within the receive timeout,
    ///   or when more than `limit` bytes arrive.
    public func readUntilClosed(limit: Int = 16 << 20) throws -> [UInt8] {
        while buffered.count <= limit {
            let count = chunk.withUnsafeMutableBytes { recv(socketDescriptor, $0.baseAddress, $0.count, 0) }
            if count == 0 || (count < 0 && errno == ECONNRESET) {
                defer { buffered = [] }
                return buffered
            }
            guard count > 0 else { throw RawHTTPConnection.Failure(description: "recv: errno \(errno)") }
            receivedBytes += count
            buffered += chunk[..<count]
        }
        throw RawHTTPConnection.Failure(description: "more than \(limit) bytes without the connection closing")
    }

    /// The receive buffer, made once: zeroing a fresh one per read costs as much as a small request.
    private var chunk = [UInt8](repeating: 0, count: 65536)

    private func fill() throws {
        let count = chunk.withUnsafeMutableBytes { recv(socketDescriptor, $0.baseAddress, $0.count, 0) }
        guard count > 0 else {
            let error = errno
            let what = count == 0 ? "connection closed by the server" : "recv: errno \(error) (\(String(cString: strerror(error))))"
            throw RawHTTPConnection.Failure(
                description: "\(what), port \(port), after \(receivedBytes) bytes of answer",
                isEndedByTheServer: count == 0 || error == ECONNRESET)
        }
        receivedBytes += count
        buffered += chunk[..<count]
    }
}

private func closeDescriptor(_ descriptor: Int32) -> Int32 {
    #if canImport(Glibc)
        Glibc.close(descriptor)
    #else
        Darwin.close(descriptor)
    #endif
}
