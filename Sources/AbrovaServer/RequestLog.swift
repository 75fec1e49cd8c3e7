import AbrovaCore
import Foundation

/// How the server writes its log: plain lines, or one JSON object a line (`--log-format json`)
/// for a log collector.
public enum LogFormat: String, Sendable, CaseIterable {
    case text, json

    /// A line for a message that is not a request's (start, failures), at `level`.
    public func line(_ message: String, level: String = "info", at time: Date = Date()) -> String {
        switch self {
        case .text: return message
        case .json:
            return Value.map(["time": .string(Self.timestamp(time)), "level": .string(level), "msg": .string(message)]).canonicalJSON
        }
    }

    static func timestamp(_ time: Date) -> String {
        var text: [UInt8] = []
        Timestamp(secondsSince1970: time.timeIntervalSince1970).writeRFC3339(to: &text)
        return String(decoding: text, as: UTF8.self)
    }
}

/// One answered request, as the log records it.
public struct RequestRecord: Sendable {
    /// The request's id: the client's `X-Request-Id` when it is a usable one, else one made here.
    public var id: String
    public var method: String
    public var path: String
    public var status: Int
    public var milliseconds: Double
    /// Who called, when known.
    public var caller: String?

    /// The record as a line of `format`: in text, what the client sent is escaped
    /// (`escapedForLog`); in JSON, the encoder escapes it.
    public func line(_ format: LogFormat, at time: Date = Date()) -> String {
        switch format {
        case .text:
            let callerField = caller.map { " caller=\(escapedForLog($0))" } ?? ""
            return
                "\(escapedForLog(method)) \(escapedForLog(path)) \(status) \(String(format: "%.1f", milliseconds)) ms id=\(id)\(callerField)"
        case .json:
            var parts: [String: Value] = [
                "time": .string(LogFormat.timestamp(time)), "level": .string(status >= 500 ? "error" : "info"), "msg": "request",
                "id": .string(id), "method": .string(method), "path": .string(path), "status": .int(Int64(status)),
                "ms": .double((milliseconds * 10).rounded() / 10),
            ]
            if let caller { parts["caller"] = .string(caller) }
            return Value.map(parts).canonicalJSON
        }
    }

    /// The id of a request: the client's `X-Request-Id` when it is 1 to 64 ASCII letters, digits,
    /// `-`, `_` or `.`, else 16 random hex digits.
    static func id(sentAs header: String?) -> String {
        if let header, !header.isEmpty, header.utf8.count <= 64,
            header.utf8.allSatisfy({ byte in
                (byte >= 0x30 && byte <= 0x39) || (byte | 0x20 >= 0x61 && byte | 0x20 <= 0x7A) || byte == 0x2D || byte == 0x5F
                    || byte == 0x2E
            })
        {
            return header
        }
        let number = UInt64.random(in: 0...UInt64.max)
        let digits = String(number, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
}
