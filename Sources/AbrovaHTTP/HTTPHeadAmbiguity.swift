/// A request head that two HTTP parsers could read differently (RFC 9112 §6.3, §11.2): its body
/// could be framed two ways, so a request hidden in it would be served by one and not the other,
/// or it names two callers. The server answers 400 and closes the connection.
struct HTTPHeadAmbiguity: Hashable, Sendable {
    /// What is ambiguous, for the error answer.
    let message: String

    /// The ambiguity in a head, `nil` when it reads one way only. `headers` are by lowercased
    /// name; `repeatedHeaders` are the names sent more than once.
    init?(headers: [String: String], repeatedHeaders: Set<String>) {
        if let repeated = ["content-length", "transfer-encoding", "authorization"].first(where: repeatedHeaders.contains) {
            message = "the \(repeated) header is sent more than once"
        } else if headers["transfer-encoding"] != nil, headers["content-length"] != nil {
            message = "transfer-encoding and content-length are both sent; send one"
        } else if let coding = headers["transfer-encoding"], coding.lowercased() != "chunked" {
            // libmicrohttpd reads any other coding as a body running until the connection ends.
            message = "transfer-encoding must be chunked, not \"\(coding.prefix(40))\""
        } else {
            return nil
        }
    }
}
