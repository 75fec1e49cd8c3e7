import AbrovaHTTP
import AbrovaLocking
import Foundation

/// What a request waiting for its deferred answer (a long poll) costs the server: this
/// process's resident memory grown by N idle waiting connections from loopback, divided by N.
/// The clients are bare sockets in this process (their kernel buffers are not resident memory),
/// so the growth is the server's: libmicrohttpd's connection and its memory pool, the
/// request's state and its responder. Measured twice: the wait as a connection's first request,
/// and after a first request answered on it (as a client that pulls, then watches).
///
/// First measured at about 9.2 kB first on its connection and 65.6 kB after a request, for
/// 1,000 and 9,900 waiting: libmicrohttpd (0.9.75, and 1.0.1 alike) zeroes a connection's whole
/// memory pool (64 KiB, `connectionMemoryLimit`) as each request ends (`MHD_pool_reset`), so
/// every page of it is resident from then on, waiting or idle. No option of libmicrohttpd's
/// avoids it (`MHD_OPTION_CONNECTION_MEMORY_INCREMENT` only paces the read buffer's growth);
/// a smaller pool would, at the price of lower limits on request heads.
struct DeferredMemoryBenchmarks {
    let options: BenchmarkOptions
    static let target = 20_000

    func run(into report: inout BenchmarkReport) throws {
        #if os(Linux)
            try measureAll(into: &report)
        #else
            print("deferred memory: skipped, Linux only (it reads /proc/self/status)")
        #endif
    }
}

#if os(Linux)
    extension DeferredMemoryBenchmarks {
        private func measureAll(into report: inout BenchmarkReport) throws {
            raiseDescriptorLimit()
            // Two descriptors a connection (client and server), under the hard limit.
            let room = (Int(descriptorLimit()) - 200) / 2
            let counts = (options.isQuick ? [1_000] : [1_000, 10_000]).map { min($0, room) }
            for count in counts {
                for isReused in [false, true] {
                    let perRequest = try measure(count, afterARequest: isReused)
                    report.add(
                        .memory(
                            "server: memory per idle deferred request, \(count) waiting, "
                                + (isReused ? "after a request on the connection" : "first on its connection"),
                            bytesEach: perRequest, target: Self.target))
                }
            }
        }

        private func measure(_ count: Int, afterARequest: Bool) throws -> Int {
            let responders = Protected<[HTTPResponder]>([])
            let server = try HTTPServer(
                configuration: HTTPServerConfiguration(
                    threadCount: 4, loopbackOnly: true, maximumConnections: count + 100, minimumBytesPerSecond: 0)
            ) { request in
                guard request.path == "/wait" else { return HTTPResponse(status: 200, body: Array("done".utf8)) }
                return .deferred { responder in responders.withLock { $0.append(responder) } }
            }
            defer { server.shutdown() }
            // Threads, their stacks and the allocator's arenas warmed before the baseline.
            let warm = try (0..<32).map { _ in try IdleClient(port: server.port) }
            for client in warm {
                try client.send("GET /warm HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                try client.readUntil("done")
            }
            Thread.sleep(forTimeInterval: 0.2)
            let before = InitialSyncDevice.residentKiB("VmRSS")
            var clients: [IdleClient] = []
            clients.reserveCapacity(count)
            for _ in 0..<count {
                let client = try IdleClient(port: server.port)
                if afterARequest {
                    try client.send("GET /v1/pull?cursor=abc HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer user-0\r\n\r\n")
                    try client.readUntil("done")
                }
                try client.send("GET /wait?cursor=abc HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer user-0\r\n\r\n")
                clients.append(client)
            }
            let deadline = ContinuousClock.now.advanced(by: .seconds(60))
            while server.deferredRequests < count {
                guard ContinuousClock.now < deadline else {
                    throw BenchmarkFailure("\(server.deferredRequests) of \(count) requests waiting after 60 s")
                }
                Thread.sleep(forTimeInterval: 0.01)
            }
            Thread.sleep(forTimeInterval: 0.2)
            let after = InitialSyncDevice.residentKiB("VmRSS")
            let perRequest = max(0, after - before) * 1024 / count
            print("deferred memory: \(count) waiting (\(afterARequest ? "after a request" : "first request")): \(perRequest) bytes each")
            for responder in responders.withLock({ $0 }) { responder.send(HTTPResponse(status: 200)) }
            _ = clients.count
            return perRequest
        }
    }

    /// A client that is only a socket: no buffer of its own, so that it adds nothing to this
    /// process's resident memory but its descriptor.
    final class IdleClient {
        let descriptor: Int32

        init(port: UInt16) throws {
            descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard descriptor >= 0 else { throw BenchmarkFailure("socket: errno \(errno)") }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard result == 0 else {
                close(descriptor)
                throw BenchmarkFailure("connect: errno \(errno)")
            }
        }

        deinit { close(descriptor) }

        func send(_ text: String) throws {
            let bytes = Array(text.utf8)
            let sent = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent == bytes.count else { throw BenchmarkFailure("send: errno \(errno)") }
        }

        /// Reads until what arrived ends with `marker` (the answer's body).
        func readUntil(_ marker: String) throws {
            var received: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 512)
            while !received.reversed().starts(with: marker.utf8.reversed()) {
                let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
                guard count > 0 else { throw BenchmarkFailure("recv: \(count == 0 ? "closed" : "errno \(errno)")") }
                received += buffer[..<count]
            }
        }
    }

    /// The soft limit on open descriptors raised to the hard one.
    func raiseDescriptorLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }

    func descriptorLimit() -> rlim_t {
        var limit = rlimit()
        return getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 ? limit.rlim_cur : 1_024
    }
#endif
