/// The dotted path of a field inside a document, such as `address.city`.
///
/// Segments are never empty and never contain the separator `.`; the empty path is the root, the
/// whole document. A path is stored as its dotted string, which is what it is hashed and compared by.
public struct FieldPath: Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    /// The separator between segments.
    public static let separator: Character = "."

    /// The root: the whole document.
    public static let root = FieldPath(unchecked: "")

    /// The dotted form, `""` for the root.
    public let dotted: String
    /// The dotted form's hash, taken once: a path is looked up many times (composing a change
    /// looks up each prefix of each path it writes), and hashing a string each time was a tenth of
    /// a sync's processor time. Seeded per process, as every `Hasher` is.
    private let dottedHash: Int

    /// Makes a path from its dotted form.
    ///
    /// - Throws: `ValueError` with code `invalidFieldName` when a segment is empty or holds a
    ///   character field names may not hold (see `checkName(_:at:)`).
    public init(_ dotted: String) throws(ValueError) {
        if !dotted.isEmpty {
            // Decoders make a path from every key they read: ASCII text, the usual case, is checked
            // in one pass over its bytes. Other text is split by characters, where a `.` followed by
            // a combining mark is no separator.
            if try !Self.isCheckedASCII(dotted) {
                for segment in dotted.split(separator: Self.separator, omittingEmptySubsequences: false) {
                    if segment.isEmpty { throw Self.emptySegment(in: dotted) }
                    try Self.checkName(segment, at: dotted)
                }
            }
        }
        self.dotted = dotted
        dottedHash = dotted.hashValue
    }

    /// Checks an ASCII path's segments in one pass, finding the problem that splitting it would
    /// find first. Returns `false`, throwing nothing, for a path that is not ASCII (checked by
    /// characters instead).
    private static func isCheckedASCII(_ dotted: String) throws(ValueError) -> Bool {
        var segmentLength = 0
        var problem: ValueError?
        for byte in dotted.utf8 {
            if byte >= 0x80 { return false }
            guard problem == nil else { continue } // the first problem, once the path is known to be ASCII
            if byte == UInt8(ascii: ".") {
                if segmentLength == 0 { problem = emptySegment(in: dotted) }
                segmentLength = 0
            } else {
                if !isAllowedInName(byte) { problem = badName(at: dotted) }
                if segmentLength == 0, byte == UInt8(ascii: "$") { problem = reservedName(at: dotted) }
                segmentLength += 1
            }
        }
        if let problem { throw problem }
        if segmentLength == 0 { throw emptySegment(in: dotted) }
        return true
    }

    private static func emptySegment(in dotted: String) -> ValueError {
        ValueError(.invalidFieldName, field: dotted, detail: "a path segment is empty")
    }

    /// Makes a path from segments.
    ///
    /// - Throws: `ValueError` with code `invalidFieldName` when a segment is empty, contains `.`
    ///   or holds a character field names may not hold.
    public init(segments: [String]) throws(ValueError) {
        let dotted = segments.joined(separator: ".")
        for segment in segments {
            if segment.isEmpty || segment.contains(Self.separator) {
                throw ValueError(.invalidFieldName, field: dotted, detail: "a field name is empty or contains \".\"")
            }
            try Self.checkName(segment, at: dotted)
        }
        self.dotted = dotted
        dottedHash = dotted.hashValue
    }

    /// Checks one field name: control characters, quotes, backslashes and semicolons are refused,
    /// so that no name can be mistaken for markup or SQL wherever it is shown or stored, and so is a
    /// `$` at its start, which the JSON forms of timestamps and bytes use.
    ///
    /// - Throws: `ValueError` with code `invalidFieldName` naming `path`.
    package static func checkName(_ name: some StringProtocol, at path: String) throws(ValueError) {
        if name.utf8.first == UInt8(ascii: "$") { throw reservedName(at: path) }
        for byte in name.utf8 where !isAllowedInName(byte) {
            throw badName(at: path)
        }
    }

    private static func isAllowedInName(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x00..<0x20, 0x7F, UInt8(ascii: "'"), UInt8(ascii: "\""), UInt8(ascii: "`"), UInt8(ascii: ";"), UInt8(ascii: "\\"): false
        default: true
        }
    }

    /// Names that begin with `$` are the JSON forms' own (`{"$timestamp": …}`).
    private static func reservedName(at path: String) -> ValueError {
        ValueError(.invalidFieldName, field: path, detail: "a field name may not begin with $")
    }

    private static func badName(at path: String) -> ValueError {
        ValueError(.invalidFieldName, field: path, detail: "a field name may not hold control characters or any of ' \" ` ; \\")
    }

    /// A path known to be valid (built from validated parts).
    init(unchecked dotted: String) {
        self.dotted = dotted
        dottedHash = dotted.hashValue
    }

    public static func == (left: FieldPath, right: FieldPath) -> Bool {
        left.dottedHash == right.dottedHash && left.dotted == right.dotted
    }

    public func hash(into hasher: inout Hasher) { hasher.combine(dottedHash) }

    public init(from decoder: any Decoder) throws {
        let dotted = try decoder.singleValueContainer().decode(String.self)
        do {
            try self.init(dotted)
        } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.description))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(dotted)
    }

    public var description: String { dotted }

    /// The number of segments, counted without splitting (0 for the root).
    public var depth: Int {
        isRoot ? 0 : 1 + dotted.utf8.reduce(0) { $1 == UInt8(ascii: ".") ? $0 + 1 : $0 }
    }

    /// Whether the path has more than one segment.
    public var isNested: Bool { dotted.utf8.contains(UInt8(ascii: ".")) }

    /// Whether this is the root path.
    public var isRoot: Bool { dotted.isEmpty }

    /// The segments, none for the root.
    public var segments: [Substring] {
        isRoot ? [] : dotted.split(separator: Self.separator, omittingEmptySubsequences: false)
    }

    /// The path one level down.
    public func appending(_ segment: String) -> FieldPath {
        FieldPath(unchecked: isRoot ? segment : dotted + "." + segment)
    }

    /// Whether `self` is `other` or lies under it (`a.b` is within `a`; everything is within the root).
    public func isWithin(_ other: FieldPath) -> Bool {
        if other.isRoot { return true }
        let mine = dotted.utf8
        let theirs = other.dotted.utf8
        let length = theirs.count
        if mine.count == length { return dotted == other.dotted }
        guard mine.count > length else { return false }
        // The separator check rejects most non-prefixes before any comparison of the prefix.
        let separator = mine.index(mine.startIndex, offsetBy: length)
        return mine[separator] == UInt8(ascii: ".") && mine[..<separator].elementsEqual(theirs)
    }

    /// Whether one of the two paths lies within the other: writing one replaces the other.
    public func overlaps(_ other: FieldPath) -> Bool {
        isWithin(other) || other.isWithin(self)
    }

    public static func < (left: FieldPath, right: FieldPath) -> Bool {
        Value.canonicalOrder(left.dotted, right.dotted)
    }
}
