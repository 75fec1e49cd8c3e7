import AbrovaCore
import AbrovaWire

/// Makes and reads pull cursors. A cursor is opaque to clients: the version it stands for and a
/// MAC under the database's cursor key, in URL-safe base64. A changed cursor fails the MAC and is
/// refused; a valid one grants nothing (rules are checked on every pull).
struct CursorCodec: Sendable {
    let key: [UInt8]

    /// A new random cursor key (32 bytes), made once when a database is created.
    static func makeKey() -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }

    /// The cursor that stands for `version`.
    func cursor(for version: Version) -> String {
        let bytes = Self.bigEndian(version.rawValue)
        return "c1." + Self.base64URL(bytes + Array(HMACSHA256.authenticationCode(for: bytes, key: key).prefix(16)))
    }

    /// The version a cursor stands for; an absent or empty cursor is the beginning.
    ///
    /// - Throws: `RequestError` 400 when the cursor was not made by this database's servers.
    func version(of cursor: String?) throws(RequestError) -> Version {
        guard let cursor, !cursor.isEmpty else { return .zero }
        guard cursor.hasPrefix("c1."), let bytes = Self.decodeBase64URL(cursor.dropFirst(3)), bytes.count == 24 else {
            throw RequestError.invalid("the cursor is malformed; use the cursor of the last page, or none to start over")
        }
        let versionBytes = Array(bytes[0..<8])
        let expected = Array(HMACSHA256.authenticationCode(for: versionBytes, key: key).prefix(16))
        guard HMACSHA256.isEqual(expected, Array(bytes[8...])) else {
            throw RequestError.invalid("the cursor was not made by this server; use the cursor of the last page, or none to start over")
        }
        return Version(versionBytes.reduce(0) { $0 << 8 | UInt64($1) })
    }

    private static func bigEndian(_ number: UInt64) -> [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: number >> (56 - 8 * $0)) }
    }

    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    private static func base64URL(_ bytes: [UInt8]) -> String {
        var output: [UInt8] = []
        var index = 0
        while index < bytes.count {
            let chunk = bytes[index..<min(index + 3, bytes.count)]
            let value = chunk.enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (16 - 8 * UInt32($1.offset)) }
            for position in 0..<(chunk.count + 1) { output.append(alphabet[Int(value >> (18 - 6 * UInt32(position)) & 63)]) }
            index += 3
        }
        return String(decoding: output, as: UTF8.self)
    }

    private static func decodeBase64URL(_ text: Substring) -> [UInt8]? {
        var values: [UInt8] = []
        for byte in text.utf8 {
            guard let value = alphabet.firstIndex(of: byte) else { return nil }
            values.append(UInt8(value))
        }
        guard values.count % 4 != 1 else { return nil }
        var output: [UInt8] = []
        var index = 0
        while index < values.count {
            let chunk = values[index..<min(index + 4, values.count)]
            let value = chunk.enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (18 - 6 * UInt32($1.offset)) }
            for position in 0..<(chunk.count - 1) { output.append(UInt8(truncatingIfNeeded: value >> (16 - 8 * UInt32(position)))) }
            index += 4
        }
        // Only the canonical spelling is accepted, so that one version has one cursor.
        return base64URL(output) == String(text) ? output : nil
    }
}
