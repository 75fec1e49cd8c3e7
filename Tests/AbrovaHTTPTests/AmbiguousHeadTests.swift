import AbrovaTestSupport
import Foundation
import Testing

@testable import AbrovaHTTP

/// Heads whose body could be framed two ways (request smuggling, RFC 9112 §11.2), or that name two
/// callers: one 400 with the JSON error body, then the connection is closed, so a request hidden in
/// the body is never served.
@Suite struct AmbiguousHeadTests {
    /// A full request, which the body of each smuggling attempt carries.
    static let hidden = "GET /hidden HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    static let head = "POST /v1/push HTTP/1.1\r\nHost: 127.0.0.1\r\n"

    @Test(arguments: [(5, hidden.utf8.count + 5), (hidden.utf8.count + 5, 5)])
    func twoDifferentContentLengthsAre400AndClose(first: Int, second: Int) throws {
        let exchange = try Exchange(Self.head + "Content-Length: \(first)\r\nContent-Length: \(second)\r\n\r\n{\"a\"}" + Self.hidden)
        #expect(exchange.statuses == [400])
        #expect(exchange.errorMessage == "the content-length header is sent more than once")
        #expect(exchange.handled.isEmpty)
    }

    @Test func twoEqualContentLengthsAre400AndClose() throws {
        let exchange = try Exchange(Self.head + "Content-Length: 5\r\nContent-Length: 5\r\n\r\n{\"a\"}" + Self.hidden)
        #expect(exchange.statuses == [400])
        #expect(exchange.handled.isEmpty)
    }

    @Test func transferEncodingWithContentLengthIs400AndClose() throws {
        let exchange = try Exchange(Self.head + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + Self.hidden)
        #expect(exchange.statuses == [400])
        #expect(exchange.errorMessage == "transfer-encoding and content-length are both sent; send one")
        #expect(exchange.handled.isEmpty)
    }

    @Test(arguments: ["gzip", "chunked, identity", "identity"])
    func aTransferEncodingOtherThanChunkedIs400AndClose(coding: String) throws {
        let exchange = try Exchange(Self.head + "Transfer-Encoding: \(coding)\r\n\r\n0\r\n\r\n" + Self.hidden)
        #expect(exchange.statuses == [400])
        #expect(exchange.handled.isEmpty)
    }

    @Test func twoTransferEncodingsAre400AndClose() throws {
        let exchange = try Exchange(Self.head + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + Self.hidden)
        #expect(exchange.statuses == [400])
        #expect(exchange.handled.isEmpty)
    }

    @Test func twoAuthorizationHeadersAre400AndClose() throws {
        let exchange = try Exchange(
            "GET /v1/session HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ana\r\nAuthorization: Bearer ben\r\n\r\n" + Self.hidden)
        #expect(exchange.statuses == [400])
        #expect(exchange.errorMessage == "the authorization header is sent more than once")
        #expect(exchange.handled.isEmpty)
    }

    /// The control: the same bytes with one framing serve both requests, so the tests above would
    /// see the hidden one if it were served.
    @Test func oneContentLengthServesThePipelinedRequestToo() throws {
        let exchange = try Exchange(Self.head + "Content-Length: 5\r\n\r\n{\"a\"}" + Self.hidden)
        #expect(exchange.statuses == [200, 200])
        #expect(exchange.handled == ["/v1/push", "/hidden"])
    }
}

/// One connection to a fresh server: `request` sent, then everything read until the server closes.
/// The server has no idle timeout, so an exchange whose connection is left open fails.
private struct Exchange {
    /// The status of each answer, in order.
    var statuses: [Int] = []
    /// The message of the first answer's JSON error body, when it has one.
    var errorMessage: String?
    /// The paths the handler was called with.
    var handled: [String]

    init(_ request: String) throws {
        let recorder = Recorder()
        let server = try HTTPServer(configuration: HTTPServerConfiguration(connectionTimeoutSeconds: 0, loopbackOnly: true)) { request in
            recorder.record(request)
            return HTTPResponse(status: 200)
        }
        defer { server.shutdown() }
        let connection = try RawHTTPConnection(port: server.port, receiveTimeoutSeconds: 5)
        try connection.send(request)
        let text = String(decoding: try connection.readUntilClosed(), as: UTF8.self)
        for line in text.components(separatedBy: "\r\n") where line.hasPrefix("HTTP/1.") {
            statuses += line.split(separator: " ").dropFirst().prefix(1).compactMap { Int($0) }
        }
        if let bodyStart = text.range(of: "\r\n\r\n")?.upperBound,
            let error = try? JSONSerialization.jsonObject(with: Data(text[bodyStart...].utf8)) as? [String: Any]
        {
            #expect(error["statusCode"] as? Int == statuses.first)
            errorMessage = error["message"] as? String
        }
        handled = recorder.requests.map(\.path)
    }
}
