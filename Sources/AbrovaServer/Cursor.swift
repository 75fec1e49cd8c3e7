import AbrovaCore
import AbrovaWire

/// Makes and reads pull cursors. A cursor is opaque to clients: the version it stands for, a tag
/// of the read rules it was made under, and a MAC under the database's cursor key over both and
/// the caller's user, in URL-safe base64. A changed cursor, or another user's, fails the MAC and
/// is refused (`invalid`); one made under other read rules is answered "resync required"
/// (`resyncRequired`), so that
/// a device drops what it may no longer read. A valid cursor grants nothing: rules are checked on
/// every pull.
struct CursorCodec: Sendable {
    let key: [UInt8]
    /// The first 8 bytes of the SHA-256 of the rule book's `readRevision`.
    let rulesTag: [UInt8]

    init(key: [UInt8], readRevision: String = "") {
        self.key = key
        rulesTag = Array(SHA256.hash(Array(readRevision.utf8)).prefix(8))
    }

    /// A new random cursor key (32 bytes), made once when a database is created.
    static func makeKey() -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }

    /// Where a pull goes on from: after `version`; and, in a pull that started from the
    /// beginning, `freshThrough`, the latest version when it started (a document of a version
    /// at or below it has not changed since, so it was not sent before in this pull).
    struct Position: Equatable {
        var version: Version
        var freshThrough: Version = .zero
    }

    /// The cursor that stands for `version`, for `caller`.
    func cursor(for version: Version, caller: Caller) -> String {
        cursor(for: Position(version: version), caller: caller)
    }

    /// The cursor that stands for `position`, for `caller`: with its `freshThrough` only while it
    /// lies past the version.
    func cursor(for position: Position, caller: Caller) -> String {
        var signed = Self.bigEndian(position.version.rawValue) + rulesTag
        if position.freshThrough > position.version { signed += Self.bigEndian(position.freshThrough.rawValue) }
        return "c1." + Self.base64URL(signed + mac(signed, caller: caller))
    }

    /// The version a cursor stands for; an absent or empty cursor is the beginning.
    ///
    /// - Throws: `Refusal`, as `position(of:caller:)`.
    func version(of cursor: String?, caller: Caller) throws(Refusal) -> Version {
        try position(of: cursor, caller: caller).version
    }

    /// The position a cursor stands for; an absent or empty cursor is the beginning.
    ///
    /// - Throws: `Refusal` `.invalid` when the cursor was not made by this database's servers for
    ///   this caller; `.resyncRequired` when it was made under other read rules (or by an older server).
    func position(of cursor: String?, caller: Caller) throws(Refusal) -> Position {
        guard let cursor, !cursor.isEmpty else { return Position(version: .zero) }
        guard cursor.hasPrefix("c1."), let bytes = Self.decodeBase64URL(cursor.dropFirst(3)), [24, 32, 40].contains(bytes.count) else {
            throw Refusal.invalid("the cursor is malformed; use the cursor of the last page, or none to start over")
        }
        if bytes.count == 24 {
            let versionBytes = Array(bytes[0..<8])
            // The form of servers before cursors were tied to rules and users.
            let expected = Array(HMACSHA256.authenticationCode(for: versionBytes, key: key).prefix(16))
            guard HMACSHA256.isEqual(expected, Array(bytes[8...])) else { throw Self.notMadeHere }
            throw Refusal(.resyncRequired, "resync required: the cursor was made by an older server; pull from the beginning (no cursor)")
        }
        let signed = Array(bytes[0..<(bytes.count - 16)])
        guard HMACSHA256.isEqual(mac(signed, caller: caller), Array(bytes[signed.count...])) else { throw Self.notMadeHere }
        guard HMACSHA256.isEqual(Array(signed[8..<16]), rulesTag) else {
            throw Refusal(.resyncRequired, "resync required: the read rules changed since this cursor; pull from the beginning (no cursor)")
        }
        let number = { (bytes: ArraySlice<UInt8>) in Version(bytes.reduce(0) { $0 << 8 | UInt64($1) }) }
        return Position(version: number(signed[0..<8]), freshThrough: signed.count == 24 ? number(signed[16..<24]) : .zero)
    }

    private static let notMadeHere = Refusal.invalid(
        "the cursor was not made by this server for this user; use the cursor of the last page, or none to start over")

    private func mac(_ signed: [UInt8], caller: Caller) -> [UInt8] {
        // The user is part of what is signed: a cursor is one user's.
        let user: [UInt8] = caller.userID.map { [1] + Array($0.utf8) } ?? [0]
        return Array(HMACSHA256.authenticationCode(for: signed + user, key: key).prefix(16))
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
