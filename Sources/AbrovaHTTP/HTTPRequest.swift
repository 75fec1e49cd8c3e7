/// An HTTP request as the server hands it to its handler: the whole body included.
public struct HTTPRequest: Sendable {
    /// The method, as sent (`GET`, `POST`, ...).
    public var method: String
    /// The path as sent, without the query and not percent-decoded (`/v1/docs/notes/a%2Fb`).
    public var path: String
    /// The query arguments, percent-decoded, with `+` read as a space (form encoding): a literal
    /// plus travels as `%2B`. When a name repeats, the last value counts.
    public var query: [String: String]
    /// The headers, by lowercased name. When a name repeats, the last value counts; the server
    /// refuses a repeated Content-Length, Transfer-Encoding or Authorization before the handler.
    public var headers: [String: String]
    /// The body (empty when there was none).
    public var body: [UInt8]

    /// A request from its parts; for tests that call a handler without a server.
    public init(
        method: String = "GET",
        path: String = "/",
        query: [String: String] = [:],
        headers: [String: String] = [:],
        body: [UInt8] = []
    ) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
    }
}

/// Decodes `%XX` escapes (and, for form data, `+` as a space); a `%` not followed by two hex
/// digits stays as it is, and bytes that are not UTF-8 become U+FFFD.
public func percentDecoded(_ text: some StringProtocol, plusIsSpace: Bool = false) -> String {
    guard text.utf8.contains(where: { $0 == UInt8(ascii: "%") || (plusIsSpace && $0 == UInt8(ascii: "+")) }) else {
        return String(text)
    }
    let bytes = Array(text.utf8)
    var decoded: [UInt8] = []
    decoded.reserveCapacity(bytes.count)
    var index = 0
    while index < bytes.count {
        if bytes[index] == UInt8(ascii: "%"), index + 2 < bytes.count,
            let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2])
        {
            decoded.append(high << 4 | low)
            index += 3
        } else {
            decoded.append(plusIsSpace && bytes[index] == UInt8(ascii: "+") ? UInt8(ascii: " ") : bytes[index])
            index += 1
        }
    }
    return String(decoding: decoded, as: UTF8.self)
}

private func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
    default: nil
    }
}
