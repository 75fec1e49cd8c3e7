import AbrovaCore
import AbrovaWire
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

// Reading what the server answered: the client's one edge between HTTP statuses and the domain.

/// What came back for one request: the status, the headers (by lowercased name) and the body as
/// the HTTP client (`HTTPExchange`) handed it over.
struct HTTPAnswer: Hashable, Sendable {
    /// The status code.
    var statusCode: Int
    /// The headers, by lowercased name.
    var headers: [String: String]
    /// The body as received (zstd or not, see `HTTPTransport.content(of:limit:)`).
    var body: [UInt8]
    /// The body grew past the limit and was abandoned: `body` is empty.
    var exceedsLimit = false
}

extension HTTPTransport {
    /// The four bytes that open a zstd frame (0xFD2FB528, little-endian).
    private static let zstdMagic: [UInt8] = [0x28, 0xB5, 0x2F, 0xFD]

    /// The answer of a 2xx read by `read`; any other answer as the failure it is.
    ///
    /// - Throws: `TransportFailure`: `failure(for:limit:)` for a status other than 2xx;
    ///   `.unreachable` for a 2xx whose body cannot be decompressed or read (a retry is the safe
    ///   move: a push answered so may have been applied).
    static func read<Result>(
        _ answer: HTTPAnswer, limit: Int,
        _ read: ([UInt8]) throws(Refusal) -> Result
    ) throws(TransportFailure) -> Result {
        guard (200..<300).contains(answer.statusCode) else { throw failure(for: answer, limit: limit) }
        let body: [UInt8]
        do {
            body = try content(of: answer, limit: limit)
        } catch {
            throw .unreachable("the answer could not be read: \(error.reason)")
        }
        do {
            return try read(body)
        } catch {
            throw .unreachable("the answer could not be read: \(error.message)")
        }
    }

    /// The failure an answer that is not 2xx stands for.
    static func failure(for answer: HTTPAnswer, limit: Int) -> TransportFailure {
        let status = answer.statusCode
        switch status {
        case 401:
            return .unauthorized(message(of: answer, limit: limit))
        case 408, 429, 500...599:
            var reason = "\(status): \(message(of: answer, limit: limit))"
            if let retryAfter = answer.headers["retry-after"] { reason += " (Retry-After: \(retryAfter.prefix(40)))" }
            return .unreachable(reason)
        case 400...499:
            // Only the sync server's own refusal (its JSON error body, with this status) refuses;
            // a proxy's or a captive portal's 4xx page means the request never reached it.
            if let body = try? content(of: answer, limit: limit), let error = ErrorBody(body), error.statusCode == status {
                // A refusal this SDK cannot name is waited out, not taken as one it knows: a
                // refused change is dropped, and nothing may be dropped for a guess.
                guard let reason = Refusal.Reason(exactly: status) else {
                    return .unreachable("\(status): \(error.message), a refusal this version of the SDK does not know")
                }
                return .refused(reason: reason, message: error.message)
            }
            return .unreachable(
                "\(status): \(message(of: answer, limit: limit)), so not from the sync server (a proxy or a captive portal?)")
        case 300...399:
            let location = answer.headers["location"].map { " to \($0.prefix(200))" } ?? ""
            return .unreachable("\(status): a redirect\(location), which the protocol never sends; check the server URL")
        default:
            return .unreachable("\(status): a status the protocol never sends")
        }
    }

    /// The server's message from its JSON error body, or a sentence naming the status and the
    /// start of whatever else came.
    private static func message(of answer: HTTPAnswer, limit: Int) -> String {
        let reasonPhrase = HTTPURLResponse.localizedString(forStatusCode: answer.statusCode)
        let body: [UInt8]
        do {
            body = try content(of: answer, limit: limit)
        } catch {
            return "\(reasonPhrase), with a body that could not be read: \(error.reason)"
        }
        if let error = Refusal(body: body) { return error.message }
        let excerpt = String(decoding: body.prefix(200), as: UTF8.self)
            .map { $0.isNewline || $0.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) ? " " : String($0) }
            .joined()
            .trimmingCharacters(in: .whitespaces)
        return "\(reasonPhrase), without the protocol's JSON error body" + (excerpt.isEmpty ? "" : ": \"\(excerpt)\"")
    }

    /// The answer's body decoded.
    ///
    /// A zstd body is decompressed here, never past `limit`. URLSession leaves `Content-Encoding`
    /// as sent but may have decoded the body already: on Linux, libcurl decodes every encoding it
    /// was built with, zstd included on current distributions; on Apple platforms it does not.
    /// A JSON body never opens with zstd's magic number, so the bytes tell which happened.
    ///
    /// - Throws: `UnreadableBody` when the body grew past `limit` or is not valid zstd.
    static func content(of answer: HTTPAnswer, limit: Int) throws(UnreadableBody) -> [UInt8] {
        guard !answer.exceedsLimit else {
            throw UnreadableBody(reason: "it holds more than \(limit) bytes (maximumAnswerBytes)")
        }
        let encoding = answer.headers["content-encoding"]?.trimmingCharacters(in: .whitespaces).lowercased()
        guard encoding == "zstd", answer.body.starts(with: zstdMagic) else { return answer.body }
        do {
            return try Zstd.decompress(answer.body, limit: limit, maximumWindowLog: windowLog(for: limit))
        } catch {
            throw UnreadableBody(reason: "its zstd body was refused: \(error.message)")
        }
    }

    /// The largest zstd window worth allowing: one as large as the answer may be (zstd accepts
    /// 2^10...2^30).
    private static func windowLog(for limit: Int) -> Int {
        var log = 10
        while log < 30, 1 << log < limit { log += 1 }
        return log
    }

    /// Why an answer's body could not be read.
    struct UnreadableBody: Error {
        var reason: String
    }
}
