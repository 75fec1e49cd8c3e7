/// A request head too large to serve: a target (path and query) over 8 KiB is 414, headers over
/// 32 KiB together are 431 (RFC 9110 §15.5.15, RFC 6585 §5). Both are far above what the protocol
/// sends (ids of 256 bytes, cursors under 100) and well below libmicrohttpd's own limit, the
/// connection's 64 KiB, past which it answers with an HTML page instead of the protocol's JSON.
/// The connection is closed after the answer: its body is not read.
struct HeadSizeRefusal: Hashable, Sendable {
    static let maximumTargetBytes = 8 * 1024
    static let maximumHeaderBytes = 32 * 1024

    let status: Int
    let message: String

    /// The refusal of a head, `nil` when it is within the limits. Sizes are counted as sent, near
    /// enough: each query argument with its separators (a repeated name counts once: the target
    /// is short by libmicrohttpd's memory in any case), and `headerBytes`, every header line.
    init?(path: String, query: [String: String], headerBytes header: Int) {
        let target = path.utf8.count + query.reduce(0) { $0 + $1.key.utf8.count + $1.value.utf8.count + 2 }
        if target > Self.maximumTargetBytes {
            status = 414
            message = "the request target holds more than \(Self.maximumTargetBytes) bytes"
        } else if header > Self.maximumHeaderBytes {
            status = 431
            message = "the request headers hold more than \(Self.maximumHeaderBytes) bytes together"
        } else {
            return nil
        }
    }

    var response: HTTPResponse {
        .error(status: status, message: message, headers: [("Connection", "close")])
    }
}
