/// An HTTP response from a handler.
///
/// The server adds `Content-Length` itself (and `Date`); a `Content-Length` header set here is
/// ignored.
public struct HTTPResponse: Sendable {
    /// The status code (200, 404, ...).
    public var status: Int
    /// The headers, in order. Names are sent as written.
    public var headers: [(name: String, value: String)]
    /// The body.
    public var body: [UInt8]
    /// Set by `deferred`: the server calls it with a responder instead of sending this response.
    var deferredStart: (@Sendable (HTTPResponder) -> Void)?
    /// Set by `offloaded`: the server runs it on a worker thread and sends what it makes.
    var offloadedWork: (@Sendable () -> HTTPResponse)?

    /// A response from its status, headers and body.
    public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A response whose body is JSON: adds `Content-Type: application/json` before `headers`.
    ///
    ///     return .json(status: 200, Array(#"{"ok":true}"#.utf8))
    public static func json(
        status: Int,
        _ body: [UInt8],
        headers: [(name: String, value: String)] = []
    ) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", "application/json")] + headers, body: body)
    }

    /// The server's own error answer: `{"message":"...","statusCode":N}`, keys in that order.
    package static func error(status: Int, message: String, headers: [(name: String, value: String)] = []) -> HTTPResponse {
        .json(status: status, Array(#"{"message":\#(jsonString(message)),"statusCode":\#(status)}"#.utf8), headers: headers)
    }
}

/// `text` as a JSON string literal, quotes included.
func jsonString(_ text: String) -> String {
    var result = "\""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": result += "\\\""
        case "\\": result += "\\\\"
        case "\n": result += "\\n"
        case "\r": result += "\\r"
        case "\t": result += "\\t"
        case _ where scalar.value < 0x20:
            let hex = String(scalar.value, radix: 16)
            result += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
        default: result.unicodeScalars.append(scalar)
        }
    }
    return result + "\""
}
