import AbrovaLocking
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// An HTTP/1.1 server on loopback that answers what the test scripts and may hold a request open
/// (a long poll, `GET /v1/watch`) until the test answers it, seeing when the client gives up on
/// it: the connection closing while the request is held is recorded (`abandoned`), which is how a
/// test checks that cancelling a request really closes it.
///
///     let server = try LongPollServer { request in
///         request.path == "/v1/watch" ? .hold : .json(200, #"{"status":"ok"}"#)
///     }
///     // ... the client sends a watch; the test waits for `server.held` ...
///     server.release(id, with: .json(200, #"{"changed":true}"#))
///
/// One thread a connection, keep-alive, requests with a `Content-Length` body (no chunks).
/// Call `stop()` when done: the accepting thread holds the server until then.
public final class LongPollServer: Sendable {
    /// A request as it came.
    public struct Request: Sendable {
        /// The server's number for it, from 1 in the order they came.
        public var id: Int
        public var method: String
        /// The path, not percent-decoded.
        public var path: String
        /// The query's parameters, percent-decoded (`nil` for one that was not sent).
        public var query: [String: String]
        /// The headers, by lowercased name.
        public var headers: [String: String]
        public var body: [UInt8]
    }

    /// What the script does with a request.
    public enum Reply: Sendable {
        /// Answers at once.
        case answer(status: Int, headers: [String: String], body: [UInt8])
        /// Holds the request until `release(_:with:)`, or until the client closes the connection.
        case hold

        /// A JSON answer.
        public static func json(_ status: Int, _ body: String) -> Reply {
            .answer(status: status, headers: ["Content-Type": "application/json"], body: Array(body.utf8))
        }
    }

    /// The port it listens on (127.0.0.1).
    public let port: UInt16
    /// `http://127.0.0.1:<port>`.
    public var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

    private let listener: Int32
    private let state: Protected<State>

    private struct State {
        var script: @Sendable (Request) -> Reply
        var requests: [Request] = []
        /// Held requests, by id, with their answer once the test gives one.
        var held: [Int: Reply?] = [:]
        var abandoned: [Int] = []
        var open: Set<Int32> = []
        var isStopped = false
        var isListenerClosed = false
    }

    /// Listens on a free loopback port; `script` decides each request's reply (changed with
    /// `answer(with:)`).
    ///
    /// - Throws: `RawHTTPConnection.Failure` when the listening socket cannot be made.
    public init(_ script: @escaping @Sendable (Request) -> Reply) throws {
        state = Protected(State(script: script))
        listener = try Socket.listen()
        port = try Socket.localPort(listener)
        let server = self
        Thread { server.acceptLoop() }.start()
    }

    /// Replies to the next requests with `script`.
    public func answer(with script: @escaping @Sendable (Request) -> Reply) {
        state.withLock { $0.script = script }
    }

    /// Every request so far, in the order they came.
    public var requests: [Request] { state.withLock { $0.requests } }

    /// The requests held now, waiting for an answer, in the order they came.
    public var held: [Request] {
        state.withLock { state in state.requests.filter { state.held[$0.id] != nil } }
    }

    /// The held requests whose client closed the connection before they were answered.
    public var abandoned: [Int] { state.withLock { $0.abandoned } }

    /// Answers the held request `id` with `reply` (an `.answer`); false when it is not held.
    @discardableResult
    public func release(_ id: Int, with reply: Reply) -> Bool {
        state.withLock { state in
            guard state.held[id] != nil else { return false }
            state.held[id] = .some(reply)
            return true
        }
    }

    /// Stops listening and closes every connection.
    ///
    /// The shutdowns happen under the lock that a connection's close takes: a socket closed
    /// meanwhile has left `open`, and its number, perhaps another connection's of the process by
    /// then, is not touched.
    public func stop() {
        state.withLock { state in
            guard !state.isStopped else { return }
            state.isStopped = true
            if !state.isListenerClosed { shutdown(listener, Int32(SHUT_RDWR)) }
            for descriptor in state.open { shutdown(descriptor, Int32(SHUT_RDWR)) }
        }
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            guard client >= 0 else {
                if [EINTR, ECONNABORTED, EPROTO].contains(errno) && !state.withLock({ $0.isStopped }) { continue }
                break
            }
            Socket.setNoDelay(client)
            let stopped = state.withLock { state in
                if !state.isStopped { state.open.insert(client) }
                return state.isStopped
            }
            if stopped {
                _ = Glibc.close(client)
                break
            }
            let server = self
            Thread { server.serve(client) }.start()
        }
        state.withLock { state in
            state.isListenerClosed = true
            _ = Glibc.close(listener)
        }
    }

    /// Serves one connection's requests until it closes.
    private func serve(_ descriptor: Int32) {
        var connection = Connection(descriptor: descriptor)
        while let (head, body) = connection.readRequest(), let request = record(head, body) {
            var reply = state.withLock { $0.script }(request)
            if case .hold = reply {
                state.withLock { $0.held[request.id] = .some(nil) }
                guard let released = waitForRelease(of: request.id, on: &connection) else { break }
                reply = released
            }
            guard case .answer(let status, let headers, let body) = reply, Socket.sendAll(descriptor, Self.answer(status, headers, body))
            else { break }
        }
        state.withLock { state in
            state.open.remove(descriptor)
            _ = Glibc.close(descriptor)
        }
    }

    /// Waits until the test answers the held request (its answer) or the client closes (`nil`).
    private func waitForRelease(of id: Int, on connection: inout Connection) -> Reply? {
        while true {
            let reply = state.withLock { state -> Reply?? in
                guard !state.isStopped else { return .some(nil) }
                guard case .some(.some(let reply)) = state.held[id] else { return nil }
                state.held[id] = nil
                return .some(reply)
            }
            if let reply { return reply }
            var descriptor = pollfd(fd: connection.descriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 10) != 0 else { continue }
            // Readable while held: the client closed (or sent more, kept for later).
            guard connection.fill() else {
                state.withLock { state in
                    state.held[id] = nil
                    state.abandoned.append(id)
                }
                return nil
            }
        }
    }

    private func record(_ head: String, _ body: [UInt8]) -> Request? {
        let lines = head.components(separatedBy: "\r\n")
        let parts = lines[0].split(separator: " ")
        guard parts.count == 3 else { return nil }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        let target = String(parts[1])
        let components = URLComponents(string: target)
        var query: [String: String] = [:]
        for item in components?.queryItems ?? [] { query[item.name] = item.value ?? "" }
        let path = target.split(separator: "?", maxSplits: 1).first.map(String.init) ?? target
        return state.withLock { state in
            let request = Request(
                id: state.requests.count + 1, method: String(parts[0]), path: path, query: query, headers: headers, body: body)
            state.requests.append(request)
            return request
        }
    }

    private static func answer(_ status: Int, _ headers: [String: String], _ body: [UInt8]) -> [UInt8] {
        var head = "HTTP/1.1 \(status) Scripted\r\n"
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) { head += "\(name): \(value)\r\n" }
        head += "Content-Length: \(body.count)\r\n\r\n"
        return Array(head.utf8) + body
    }
}

/// One connection's bytes as they come, cut into requests.
private struct Connection {
    let descriptor: Int32
    private var buffered: [UInt8] = []

    init(descriptor: Int32) { self.descriptor = descriptor }

    /// Reads what the client sent; false when it closed the connection (or it failed).
    mutating func fill() -> Bool {
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        let count = chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return false }
        buffered += chunk[0..<count]
        return true
    }

    /// The next request's head and body; `nil` once the connection closed.
    mutating func readRequest() -> (head: String, body: [UInt8])? {
        while true {
            if let end = headEnd() {
                let head = String(decoding: buffered[..<end], as: UTF8.self)
                let length =
                    head.components(separatedBy: "\r\n").lazy
                    .compactMap { line -> Int? in
                        guard line.lowercased().hasPrefix("content-length:") else { return nil }
                        return Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces))
                    }
                    .first ?? 0
                while buffered.count < end + 4 + length { guard fill() else { return nil } }
                let body = Array(buffered[(end + 4)..<(end + 4 + length)])
                buffered.removeFirst(end + 4 + length)
                return (head, body)
            }
            guard fill() else { return nil }
        }
    }

    private func headEnd() -> Int? {
        guard buffered.count >= 4 else { return nil }
        return (0...(buffered.count - 4)).first {
            buffered[$0] == 13 && buffered[$0 + 1] == 10 && buffered[$0 + 2] == 13 && buffered[$0 + 3] == 10
        }
    }
}
