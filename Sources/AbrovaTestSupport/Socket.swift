import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The few socket calls the test servers make (`FaultProxy`, `LongPollServer`).
enum Socket {
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
