import AbrovaCore
import AbrovaServer
import AbrovaSync
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// An answer cut right after a complete header line (the connection closed in order, as a proxy
/// or a balancer may do) must count as the server being unreachable: the write is queued. On
/// Linux, URLSession (swift-corelibs-foundation) traps instead: libcurl reports the transfer
/// complete, and `_NativeProtocol.transferCompleted` has no response
/// (swift-corelibs-foundation issue 5285, fixed upstream by pull request 5286, not in this
/// toolchain). The long run found it; the app is a child process here, since the trap ends it.
/// Linux's transport uses libcurl (`CurlExchange`) instead, which the other tests cut at every
/// byte of an answer's head and at points of its body, in-process.
@Suite struct CutAnswerTests {
    static let urlSessionTrap = "Fatal error: Transfer completed, but there's no response."
    let folder = TemporaryFolder()

    @Test func anAnswerCutAfterItsStatusLineQueuesTheWriteWithoutEndingTheApp() async throws {
        let live = try LiveSyncServer()
        let proxy = try FaultProxy(upstreamPort: live.server.port)
        defer { proxy.stop() }
        proxy.fault = .cutResponse(afterBytes: "HTTP/1.1 200 OK\r\n".utf8.count)
        let device = try ChildProcess(
            "abrova-chaos-client",
            [
                "drive", "--store", folder.path("device.sqlite"), "--server", "http://127.0.0.1:\(proxy.port)",
                "--api-key", LiveSyncServer.apiKey, "--token", LiveSyncServer.token(of: "ana"), "--timeout-ms", "2000",
            ], logPath: folder.path("device.log"), isDriven: true)
        defer { device.kill() }
        let answer = try? await device.command("set cw t x v")
        await device.stop()
        // On Linux the client runs libcurl (CurlExchange); on Apple platforms, URLSession.
        #expect(answer == "ok pending" && !device.log.contains(Self.urlSessionTrap), "\(device.log.prefix(300))")
        await live.stop()
    }

    /// The HTTP clients that survive a cut answer: all but URLSession on Linux, which traps.
    static let survivingExchanges: [HTTPExchangeKind] = {
        #if os(Linux)
            HTTPExchangeKind.available.filter { $0 != .urlSession }
        #else
            HTTPExchangeKind.available
        #endif
    }()

    @Test(arguments: survivingExchanges)
    func anAnswerCutAtAnyByteIsUnreachableAndNeverTakenWhole(_ exchange: HTTPExchangeKind) async throws {
        let live = try LiveSyncServer()
        let proxy = try FaultProxy(upstreamPort: live.server.port)
        defer { proxy.stop() }
        let transport = HTTPTransport(
            serverURL: URL(string: "http://127.0.0.1:\(proxy.port)")!, apiKey: LiveSyncServer.apiKey,
            token: { LiveSyncServer.token(of: "ana") }, timeout: .seconds(10), exchange: exchange)
        let cart = DocumentKey(collection: "carts", id: "c1")
        _ = try await transport.push(body: makeRequest([(cart, try .create(["items": ["milk", "eggs"]], base: .zero))], sequence: 1).body)
        let page = try await transport.pull(cursor: nil, limit: 10)
        // The page's answer as the client hears it, head and body, on a connection of its own.
        proxy.resetConnections()
        let before = proxy.forwardedBytes
        #expect(try await transport.pull(cursor: nil, limit: 10) == page)
        let answerBytes = proxy.forwardedBytes.since(before).towardClients
        let bodyBytes = try #require(live.exchanges.last?.answerBytes)
        let headBytes = answerBytes - bodyBytes
        #expect(bodyBytes > 100 && headBytes > 50, "\(headBytes) + \(bodyBytes)")

        // Every byte of the head, then a few of the body, to one short of the end.
        let cuts = Array(0..<headBytes) + [headBytes, headBytes + 1, headBytes + bodyBytes / 2, answerBytes - 1]
        var taken: [String] = []
        for cut in cuts {
            proxy.fault = .cutResponse(afterBytes: cut)
            switch await failure(of: { try await transport.pull(cursor: nil, limit: 10) }) {
            case .unreachable(let reason)?:
                if !reason.hasPrefix("the connection was lost") { taken.append("\(cut): \(reason)") }
            case let other:
                taken.append("\(cut): \(String(describing: other))")
            }
        }
        #expect(taken.isEmpty, "cut answers not reported as a lost connection: \(taken.prefix(10))")
        // And the transport goes on once the network heals.
        proxy.fault = .none
        #expect(try await transport.pull(cursor: nil, limit: 10) == page)
        await live.stop()
    }

    @Test(arguments: survivingExchanges)
    func aChunkedOrLengthDelimitedBodyCutShortIsUnreachable(_ exchange: HTTPExchangeKind) async throws {
        let page = PullResponse(documents: [], cursor: "c1.page", hasMore: false).body
        let half = page.count / 2
        var chunked = Array("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)
        for chunk in [Array(page.prefix(half)), Array(page.dropFirst(half)), []] {
            chunked += Array((String(chunk.count, radix: 16) + "\r\n").utf8)
            chunked += chunk
            chunked += Array("\r\n".utf8)
        }
        var sized = Array("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(page.count)\r\n\r\n".utf8)
        sized += page
        let answers: [(name: String, bytes: [UInt8])] = [("chunked", chunked), ("Content-Length", sized)]
        for (name, answer) in answers {
            let server = try CannedAnswerServer(answer: answer)
            defer { server.stop() }
            let transport = HTTPTransport(
                serverURL: URL(string: "http://127.0.0.1:\(server.port)")!, apiKey: "key", token: { nil },
                timeout: .seconds(10), exchange: exchange)
            #expect(try await transport.pull(cursor: nil, limit: 1).cursor == "c1.page", "\(name) whole")
            // Up to the last byte; a chunked answer counts as whole once its last chunk ("0\r\n") came
            // (libcurl does not wait for the blank line that ends the trailers), so up to its "0\r".
            let end = name == "chunked" ? answer.count - 3 : answer.count
            for cut in Set([1, 17, 40, answer.count / 2, end - 7, end - 5, end - 2, end - 1]) {
                server.cut(after: cut)
                guard case .unreachable(let reason)? = await failure(of: { try await transport.pull(cursor: nil, limit: 1) }),
                    reason.hasPrefix("the connection was lost")
                else {
                    Issue.record("\(name) cut after \(cut) bytes was not a lost connection")
                    continue
                }
            }
        }
    }
}

/// A server on loopback that answers every request on a connection with the same bytes, or with
/// only their first `cut(after:)` bytes before it closes the connection in order.
private final class CannedAnswerServer: Sendable {
    let port: UInt16
    private let listener: Int32
    private let answer: [UInt8]
    private let limit = Locked<Int?>(nil)

    /// The listening socket could not be made.
    struct Failure: Error {
        var errorNumber: Int32
    }

    init(answer: [UInt8]) throws {
        self.answer = answer
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, length) == 0 && listen(listener, 16) == 0 && getsockname(listener, $0, &length) == 0
            }
        }
        guard bound else {
            let error = errno
            close(listener)
            throw Failure(errorNumber: error)
        }
        self.listener = listener
        port = UInt16(bigEndian: address.sin_port)
        let server = self
        Thread { server.serve() }.start()
    }

    /// Answers from now on with only the first `count` bytes.
    func cut(after count: Int) { limit.update { $0 = count } }

    func stop() { shutdown(listener, Int32(SHUT_RDWR)) }

    private func serve() {
        while true {
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { break }
            var received: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4_096)
            reading: while true {
                let count = buffer.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
                guard count > 0 else { break }
                received += buffer[0..<count]
                // Each request head (the test sends GETs only) gets the answer.
                while let end = received.indices.dropLast(3).first(where: { received[$0...].starts(with: [13, 10, 13, 10]) }) {
                    received.removeFirst(end + 4)
                    let cut = limit.value
                    let bytes = cut.map { Array(answer.prefix($0)) } ?? answer
                    _ = bytes.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    if cut != nil { break reading }
                }
            }
            shutdown(connection, Int32(SHUT_RDWR))
            close(connection)
        }
        close(listener)
    }
}
