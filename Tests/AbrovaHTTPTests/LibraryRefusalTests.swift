import AbrovaTestSupport
import Foundation
import Testing

@testable import AbrovaHTTP

/// Large heads: the server refuses a target over 8 KiB (414) or headers over 32 KiB (431) itself,
/// in the protocol's JSON. Beyond the connection's memory (64 KiB), and for a chunk line larger
/// than its read buffer, libmicrohttpd 0.9.75 refuses before any callback of the server's, with a
/// fixed HTML body that no option replaces; these known issues say so, and start failing once a
/// libmicrohttpd answers otherwise.
@Suite struct LibraryRefusalTests {
    @Test func aRequestLineLargerThanTheConnectionMemoryIs414AndClose() throws {
        let answer = try Self.answer(to: "GET /" + String(repeating: "a", count: 70_000) + " HTTP/1.1\r\nHost: a\r\n\r\n")
        #expect(answer.status == 414)
        withKnownIssue("libmicrohttpd 0.9.75 answers 414 with its own HTML") { #expect(answer.isJSONError) }
    }

    @Test func headersLargerThanTheConnectionMemoryAre431AndClose() throws {
        let answer = try Self.answer(to: "GET / HTTP/1.1\r\nHost: a\r\nX-Pad: " + String(repeating: "a", count: 70_000) + "\r\n\r\n")
        #expect(answer.status == 431)
        withKnownIssue("libmicrohttpd 0.9.75 answers 431 with its own HTML") { #expect(answer.isJSONError) }
    }

    /// Below the library's limit the server refuses large heads itself, in the protocol's JSON.
    @Test(arguments: [
        ("GET /" + String(repeating: "a", count: 9_000) + " HTTP/1.1\r\nHost: a\r\n\r\n", 414),
        ("GET /v1/pull?cursor=" + String(repeating: "c", count: 9_000) + " HTTP/1.1\r\nHost: a\r\n\r\n", 414),
        ("GET / HTTP/1.1\r\nHost: a\r\nX-Pad: " + String(repeating: "a", count: 40_000) + "\r\n\r\n", 431),
        (
            "GET / HTTP/1.1\r\nHost: a\r\n" + String(repeating: "X-Same: " + String(repeating: "s", count: 100) + "\r\n", count: 300)
                + "\r\n", 431
        ),
        (
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n"
                + (0..<300).map { "X-\($0): " + String(repeating: "v", count: 120) + "\r\n" }.joined()
                + "\r\n{}", 431
        ),
    ])
    func aHeadOverTheServersLimitsIsRefusedInJSONAndClosed(request: String, status: Int) throws {
        let answer = try Self.answer(to: request)
        #expect(answer.status == status)
        #expect(answer.isJSONError)
    }

    @Test func aHeadWithinTheLimitsIsServed() throws {
        let answer = try Self.answer(
            to: "GET /" + String(repeating: "a", count: 8_000) + " HTTP/1.1\r\nHost: a\r\nX-Pad: "
                + String(repeating: "p", count: 30_000) + "\r\nConnection: close\r\n\r\n")
        #expect(answer.status == 200)
    }

    @Test func aChunkExtensionLargerThanTheReadBufferIsClosed() throws {
        let answer = try Self.answer(
            to: "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2;"
                + String(repeating: "x", count: 100_000) + "\r\n{}\r\n0\r\n\r\n")
        withKnownIssue("libmicrohttpd 0.9.75 answers 500 with its own HTML when a chunk line fills its read buffer") {
            #expect((400...499).contains(answer.status))
            #expect(answer.isJSONError)
        }
    }

    /// The one answer to `request` on a new connection to a fresh server, which must then close.
    static func answer(to request: String) throws -> (status: Int, isJSONError: Bool) {
        let server = try HTTPServer(configuration: HTTPServerConfiguration(connectionTimeoutSeconds: 0, loopbackOnly: true)) { _ in
            HTTPResponse(status: 200)
        }
        defer { server.shutdown() }
        let connection = try RawHTTPConnection(port: server.port, receiveTimeoutSeconds: 5)
        // The server answers before it has read all: the rest of the send may fail.
        try? connection.send(request)
        let text = String(decoding: try connection.readUntilClosed(), as: UTF8.self)
        let statusLine = text.prefix(while: { $0 != "\r" }).split(separator: " ")
        let status = statusLine.count > 1 ? Int(statusLine[1]) ?? 0 : 0
        let body = text.range(of: "\r\n\r\n").map { text[$0.upperBound...] } ?? ""
        let error = (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any]
        return (status, error?["statusCode"] as? Int == status && text.contains("Content-Type: application/json"))
    }
}
