import AbrovaLocking
import AbrovaTestSupport
import Dispatch
import Foundation
import Testing

@testable import AbrovaHTTP

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite struct HTTPServerTests {
    @Test func getWithQueryHasRawPathAndDecodedQuery() async throws {
        let recorder = Recorder()
        let server = try HTTPServer(configuration: HTTPServerConfiguration(loopbackOnly: true)) { request in
            recorder.record(request)
            return HTTPResponse(status: 200, body: Array("ok".utf8))
        }
        let url = server.url("/v1/docs/notes/a%2Fb?cursor=a%2Fb%20c&plus=a%2Bb&space=x+y&flag&same=1&same=2")
        let (body, response) = try await fetch(URLRequest(url: url))
        #expect(response.statusCode == 200)
        #expect(body == Array("ok".utf8))
        let request = try #require(recorder.requests.first)
        #expect(request.method == "GET")
        #expect(request.path == "/v1/docs/notes/a%2Fb")
        #expect(request.query == ["cursor": "a/b c", "plus": "a+b", "space": "x y", "flag": "", "same": "2"])
        #expect(request.body.isEmpty)
    }

    @Test func postEchoesAMegabyteByteExact() async throws {
        let server = try HTTPServer(configuration: HTTPServerConfiguration(loopbackOnly: true)) { request in
            HTTPResponse(
                status: request.method == "POST" ? 200 : 405, headers: [("Content-Type", "application/octet-stream")], body: request.body)
        }
        let payload = (0..<1_000_000).map { UInt8(truncatingIfNeeded: $0 &* 7919 ^ $0 >> 11) }
        var request = URLRequest(url: server.url("/echo"))
        request.httpMethod = "POST"
        request.httpBody = Data(payload)
        let (body, response) = try await fetch(request)
        #expect(response.statusCode == 200)
        #expect(response.value(forHTTPHeaderField: "Content-Length") == "1000000")
        #expect(body.count == payload.count)
        #expect(body == payload)
    }

    @Test func headerNamesAreLowercasedAndTheLastValueWins() async throws {
        let recorder = Recorder()
        let server = try HTTPServer(configuration: HTTPServerConfiguration(loopbackOnly: true)) { request in
            recorder.record(request)
            return HTTPResponse(status: 200, headers: [("X-Reply", "yes")])
        }
        var request = URLRequest(url: server.url("/headers"))
        request.setValue("Some Value", forHTTPHeaderField: "X-Custom-Header")
        let (_, response) = try await fetch(request)
        #expect(response.statusCode == 200)
        #expect(response.value(forHTTPHeaderField: "X-Reply") == "yes")

        // URLSession merges repeated headers, so the repeat goes over a raw socket.
        let connection = try RawHTTPConnection(port: server.port)
        try connection.send("GET /twice HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Twice: first\r\nX-TWICE: second\r\n\r\n")
        let raw = try connection.readResponse()
        #expect(raw.status == 200)

        let requests = recorder.requests
        try #require(requests.count == 2)
        #expect(requests[0].headers["x-custom-header"] == "Some Value")
        #expect(requests[0].headers.keys.allSatisfy { $0 == $0.lowercased() })
        #expect(requests[0].headers["host"] == "127.0.0.1:\(server.port)")
        #expect(requests[1].headers["x-twice"] == "second")
    }

    @Test func declaredOversizedBodyIsRefusedBeforeItIsRead() async throws {
        let recorder = Recorder()
        let server = try HTTPServer(configuration: HTTPServerConfiguration(maximumBodyBytes: 1000, loopbackOnly: true)) { request in
            recorder.record(request)
            return HTTPResponse(status: 200)
        }
        // Headers alone: the answer comes without the server waiting for a single byte of body.
        let connection = try RawHTTPConnection(port: server.port)
        try connection.send("POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1001\r\n\r\n")
        let raw = try connection.readResponse()
        #expect(raw.status == 413)
        #expect(raw.headers["content-type"] == "application/json")
        #expect(
            String(decoding: raw.body, as: UTF8.self)
                == #"{"message":"the body holds more than 1000 bytes (limit maximumBodyBytes)","statusCode":413}"#)

        // A Content-Length past Int.max is over any limit.
        let huge = try RawHTTPConnection(port: server.port)
        try huge.send("POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99999999999999999999999\r\n\r\n")
        #expect(try huge.readResponse().status != 200)

        // URLSession, waiting for 100 Continue, gets the 413 and never sends the body.
        var request = URLRequest(url: server.url("/upload"))
        request.httpMethod = "POST"
        request.setValue("100-continue", forHTTPHeaderField: "Expect")
        request.httpBody = Data(count: 5000)
        let (body, response) = try await fetch(request)
        #expect(response.statusCode == 413)
        #expect(String(decoding: body, as: UTF8.self).contains("maximumBodyBytes"))

        // The limit itself is allowed.
        var atLimit = URLRequest(url: server.url("/upload"))
        atLimit.httpMethod = "POST"
        atLimit.httpBody = Data(count: 1000)
        #expect(try await fetch(atLimit).response.statusCode == 200)
        #expect(recorder.requests.map(\.body.count) == [1000])
    }

    @Test func chunkedBodyGrowingPastTheLimitIs413() async throws {
        let recorder = Recorder()
        let server = try HTTPServer(configuration: HTTPServerConfiguration(maximumBodyBytes: 1000, loopbackOnly: true)) { request in
            recorder.record(request)
            return HTTPResponse(status: 200, body: Array("\(request.body.count)".utf8))
        }
        let chunk = "190\r\n" + String(repeating: "x", count: 400) + "\r\n" // 0x190 = 400 bytes
        let head = "POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"

        let over = try RawHTTPConnection(port: server.port)
        try over.send(head + chunk + chunk + chunk + "0\r\n\r\n") // 1200 bytes
        let refused = try over.readResponse()
        #expect(refused.status == 413)
        #expect(
            String(decoding: refused.body, as: UTF8.self)
                == #"{"message":"the body holds more than 1000 bytes (limit maximumBodyBytes)","statusCode":413}"#)

        // Two chunks (800 bytes) stay under the limit and reach the handler.
        let under = try RawHTTPConnection(port: server.port)
        try under.send(head + chunk + chunk + "0\r\n\r\n")
        let accepted = try under.readResponse()
        #expect(accepted.status == 200)
        #expect(accepted.body == Array("800".utf8))
        #expect(recorder.requests.map(\.body.count) == [800])
    }

    @Test func requestsBeyondTheLimitGet429() async throws {
        let recorder = Recorder()
        let gate = Gate()
        let server = try HTTPServer(configuration: HTTPServerConfiguration(maximumConcurrentRequests: 1, loopbackOnly: true)) { request in
            recorder.record(request)
            if request.path == "/hold" { gate.hold() }
            return HTTPResponse(status: 200, body: Array(request.path.utf8))
        }
        // The held request goes over a raw socket on its own thread: on a loaded machine URLSession
        // can take seconds to start a request, which this test does not measure.
        let port = server.port
        let held = Task {
            try await onNewThread {
                let connection = try RawHTTPConnection(port: port)
                try connection.send("GET /hold HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                return try connection.readResponse()
            }
        }
        try await waitUntil(timeout: .seconds(30)) { gate.entered == 1 }
        #expect(server.requestsInFlight == 1)

        let (body, response) = try await fetch(URLRequest(url: server.url("/other")))
        #expect(response.statusCode == 429)
        #expect(response.value(forHTTPHeaderField: "Retry-After") == "1")
        #expect(
            String(decoding: body, as: UTF8.self)
                == #"{"message":"too many requests at once: more than 1 (limit maximumConcurrentRequests)","statusCode":429}"#)
        #expect(recorder.requests.map(\.path) == ["/hold"])

        gate.release()
        let heldResponse = try await held.value
        #expect(heldResponse.status == 200)
        #expect(heldResponse.body == Array("/hold".utf8))
        try await waitUntil(timeout: .seconds(30)) { server.requestsInFlight == 0 }
        #expect(try await fetch(URLRequest(url: server.url("/other"))).response.statusCode == 200)
    }

    @Test func shutdownAnswersTheRequestInFlightAndCallsNoMoreHandlers() async throws {
        let recorder = Recorder()
        let gate = Gate()
        // No minimum rate: the upload it leaves stalled must outlive a full run's starved test threads.
        let server = try HTTPServer(configuration: HTTPServerConfiguration(loopbackOnly: true, minimumBytesPerSecond: 0)) { request in
            recorder.record(request)
            gate.hold()
            return HTTPResponse(status: 200, body: Array("finished".utf8))
        }
        let port = server.port
        // An upload still arriving when shutdown starts: its handler must never run.
        let uploading = try RawHTTPConnection(port: port)
        try uploading.send("POST /late HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\n12345")
        try await waitUntil { server.liveRequestStates == 1 }
        let held = Task {
            try await onNewThread {
                let connection = try RawHTTPConnection(port: port)
                try connection.send("GET /hold HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                return try connection.readResponse()
            }
        }
        try await waitUntil { gate.entered == 1 }

        let finished = Flag()
        Thread {
            server.shutdown()
            finished.set()
        }.start()
        // A request made once shutdown has started reaches no handler. (The daemon listens until
        // it stops: quiescing an epoll daemon can abort the process, see CMicroHTTPD.c.)
        try await waitUntil { server.isShuttingDown }
        let probe = try? RawHTTPConnection(port: port)
        try? probe?.send("GET /probe HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        try await Task.sleep(for: .milliseconds(100))
        #expect(!finished.isSet, "shutdown returned while a request was in flight")
        try uploading.send("67890")

        gate.release()
        let response = try await held.value
        #expect(response.status == 200)
        #expect(response.body == Array("finished".utf8))
        try await waitUntil { finished.isSet }
        // The late upload is answered 503 when its thread is free before the daemon stops, and cut
        // off otherwise (when it shares the held request's thread); either way, no handler ran.
        if let late = try? uploading.readResponse() {
            #expect(late.status == 503)
            #expect(String(decoding: late.body, as: UTF8.self) == #"{"message":"the server is shutting down","statusCode":503}"#)
        }
        // The probe is answered 503, or cut off when its thread was the held request's.
        if let answer = try? probe?.readResponse() { #expect(answer.status == 503) }
        #expect(recorder.requests.map(\.path) == ["/hold"])
        #expect(server.requestsInFlight == 0)
        #expect(server.liveRequestStates == 0)
        server.shutdown() // a second call does nothing
    }

    @Test func manyConcurrentRequestsAreAllAnswered() async throws {
        let server = try HTTPServer(configuration: HTTPServerConfiguration(loopbackOnly: true)) { request in
            HTTPResponse(status: 200, body: Array((request.query["n"] ?? "missing").utf8))
        }
        let session = URLSession(configuration: .ephemeral)
        let answers = try await withThrowingTaskGroup(of: [Int: String].self) { group in
            for task in 0..<8 {
                group.addTask {
                    var answers: [Int: String] = [:]
                    for index in stride(from: task, to: 200, by: 8) {
                        let (body, response) = try await fetch(URLRequest(url: server.url("/n?n=\(index)")), session: session)
                        answers[index] =
                            response.statusCode == 200 ? String(decoding: body, as: UTF8.self) : "status \(response.statusCode)"
                    }
                    return answers
                }
            }
            return try await group.reduce(into: [:]) { $0.merge($1) { first, _ in first } }
        }
        #expect(answers.count == 200)
        #expect(answers.filter { $0.value != "\($0.key)" }.isEmpty)
        session.finishTasksAndInvalidate()
        server.shutdown()
        #expect(server.liveRequestStates == 0)
    }

    @Test func keepAliveServesSeveralRequestsOnOneConnection() async throws {
        let server = try HTTPServer(configuration: HTTPServerConfiguration(loopbackOnly: true)) { request in
            HTTPResponse(status: 201, body: request.body + Array(request.path.utf8))
        }
        let connection = try RawHTTPConnection(port: server.port)
        for index in 0..<3 {
            try connection.send("POST /\(index) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n\r\nabc")
            let response = try connection.readResponse()
            #expect(response.status == 201)
            #expect(response.headers["content-length"] == "5")
            #expect(response.body == Array("abc/\(index)".utf8))
        }
    }

    @Test func abortedUploadsAreReleased() async throws {
        let recorder = Recorder()
        // No minimum rate: the upload it leaves stalled must outlive a full run's starved test threads.
        let server = try HTTPServer(configuration: HTTPServerConfiguration(loopbackOnly: true, minimumBytesPerSecond: 0)) { request in
            recorder.record(request)
            return HTTPResponse(status: 200)
        }
        let connections = try (0..<5).map { _ in try RawHTTPConnection(port: server.port) }
        for connection in connections {
            try connection.send(
                "POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5000\r\n\r\n" + String(repeating: "x", count: 100))
        }
        try await waitUntil { server.liveRequestStates == 5 }
        #expect(server.requestsInFlight == 0, "an unfinished upload holds a request slot")
        for connection in connections { connection.close() } // each body unfinished
        try await waitUntil { server.liveRequestStates == 0 && server.requestsInFlight == 0 }
        server.shutdown()
        #expect(server.liveRequestStates == 0)
        #expect(recorder.requests.isEmpty)
    }

    @Test func errorBodiesAreJSONWithMessageAndStatusCode() throws {
        let response = HTTPResponse.error(status: 400, message: "a \"quoted\"\\ line\nand\u{1}")
        #expect(response.status == 400)
        #expect(response.headers.map(\.name) == ["Content-Type"])
        #expect(response.headers.map(\.value) == ["application/json"])
        #expect(String(decoding: response.body, as: UTF8.self) == #"{"message":"a \"quoted\"\\ line\nand\u0001","statusCode":400}"#)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])
        #expect(object["message"] as? String == "a \"quoted\"\\ line\nand\u{1}")
        #expect(object["statusCode"] as? Int == 400)
        #expect(HTTPResponse.shuttingDown.status == 503)
        #expect(HTTPResponse.shuttingDown.headers.contains { $0.name == "Connection" && $0.value == "close" })
    }

    @Test func handlerStatusOutsideTheFinalRangeBecomes500() async throws {
        let server = try HTTPServer(configuration: HTTPServerConfiguration(loopbackOnly: true)) { _ in
            HTTPResponse(status: 42)
        }
        #expect(try await fetch(URLRequest(url: server.url("/"))).response.statusCode == 500)
    }

    @Test func startingOnATakenPortThrows() throws {
        let first = try HTTPServer(configuration: HTTPServerConfiguration(loopbackOnly: true)) { _ in HTTPResponse(status: 200) }
        #expect(first.port != 0)
        #expect(throws: HTTPServerError.self) {
            _ = try HTTPServer(configuration: HTTPServerConfiguration(port: first.port, loopbackOnly: true)) { _ in
                HTTPResponse(status: 200)
            }
        }
        #expect(throws: HTTPServerError.self) {
            _ = try HTTPServer(configuration: HTTPServerConfiguration(threadCount: 0)) { _ in HTTPResponse(status: 200) }
        }
    }

    #if os(Linux)
        @Test func loopbackOnlyDecidesTheBoundAddress() throws {
            let loopback = try HTTPServer(configuration: HTTPServerConfiguration(loopbackOnly: true)) { _ in HTTPResponse(status: 200) }
            let everywhere = try HTTPServer(configuration: HTTPServerConfiguration()) { _ in HTTPResponse(status: 200) }
            // As a set: /proc/net/tcp is read in pieces while other tests open sockets, so a line can
            // come twice.
            #expect(Set(try listeningAddresses(port: loopback.port)) == ["0100007F"])
            #expect(Set(try listeningAddresses(port: everywhere.port)) == ["00000000"])
        }
    #endif
}

// MARK: - Helpers

extension HTTPServer {
    func url(_ pathAndQuery: String) -> URL {
        URL(string: "http://127.0.0.1:\(port)\(pathAndQuery)")!
    }
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String
}

/// Sends `request` and returns the body and response; a status other than 2xx is not an error.
func fetch(
    _ request: URLRequest,
    session: URLSession? = nil
) async throws -> (body: [UInt8], response: HTTPURLResponse) {
    let ownSession = session == nil ? URLSession(configuration: .ephemeral) : nil
    defer { ownSession?.finishTasksAndInvalidate() }
    let session = session ?? ownSession!
    var request = request
    request.timeoutInterval = 30
    let (data, response) = try await session.data(for: request)
    guard let response = response as? HTTPURLResponse else { throw TestFailure(description: "not an HTTP response") }
    return (Array(data), response)
}

/// Polls `condition` until it holds, failing after `timeout`.
func waitUntil(timeout: Duration = .seconds(30), _ condition: () throws -> Bool) async throws {
    let deadline = ContinuousClock.now.advanced(by: timeout)
    while try !condition() {
        guard ContinuousClock.now < deadline else { throw TestFailure(description: "condition not met within \(timeout)") }
        try await Task.sleep(for: .milliseconds(5))
    }
}

/// What a test server's handler saw, in order.
final class Recorder: Sendable {
    private let seen = Protected<[HTTPRequest]>([])
    func record(_ request: HTTPRequest) { seen.withLock { $0.append(request) } }
    var requests: [HTTPRequest] { seen.withLock { $0 } }
}

/// Holds handlers until released.
final class Gate: Sendable {
    private let enteredCount = Protected<Int>(0)
    private let semaphore = DispatchSemaphore(value: 0)
    private let isOpen = Protected<Bool>(false)

    var entered: Int { enteredCount.value }

    /// Blocks the calling (server) thread until `release`; at most 30 seconds, so a failing test
    /// does not hang the run.
    func hold() {
        enteredCount.withLock { $0 += 1 }
        if isOpen.value { return }
        _ = semaphore.wait(timeout: .now() + 30)
    }

    func release() {
        isOpen.withLock { $0 = true }
        for _ in 0..<entered { semaphore.signal() }
    }
}

final class Flag: Sendable {
    private let value = Protected<Bool>(false)
    var isSet: Bool { value.value }
    func set() { value.withLock { $0 = true } }
}
