import AbrovaCore
import Foundation

extension HTTPTransport {
    /// `text` percent-encoded for a URL's path or query: everything but RFC 3986's unreserved
    /// characters is escaped, `+` included (the server reads a query's `+` as a space).
    static func percentEncoded(_ text: String) -> String {
        var encoded = ""
        encoded.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                encoded.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = Array("0123456789ABCDEF".unicodeScalars)
                encoded.unicodeScalars.append("%")
                encoded.unicodeScalars.append(hex[Int(byte >> 4)])
                encoded.unicodeScalars.append(hex[Int(byte & 0x0F)])
            }
        }
        return encoded
    }

    /// A pull's or a watch's query argument for `scope`: whole collections as `collections=`
    /// (what every server reads), a scope with equalities as its JSON in `scope=`.
    static func scopeArgument(_ scope: SyncScope) -> String {
        guard scope.hasEqualities else { return "collections=" + percentEncoded(scope.collections.joined(separator: ",")) }
        return "scope=" + percentEncoded(scope.canonicalJSON)
    }

    /// One path segment: percent-encoded, and a segment of dots escaped too, so that no URL
    /// layer removes it as `.` or `..` (the server then refuses the name itself).
    static func pathSegment(_ text: String) -> String {
        guard !text.isEmpty, text.allSatisfy({ $0 == "." }) else { return percentEncoded(text) }
        return String(repeating: "%2E", count: text.count)
    }
}
