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

    /// Makes a path from its dotted form.
    ///
    /// - Throws: `ValueError` with code `invalidFieldName` when a segment is empty.
    public init(_ dotted: String) throws(ValueError) {
        if !dotted.isEmpty {
            for segment in dotted.split(separator: Self.separator, omittingEmptySubsequences: false) where segment.isEmpty {
                throw ValueError(.invalidFieldName, field: dotted, detail: "a path segment is empty")
            }
        }
        self.dotted = dotted
    }

    /// Makes a path from segments.
    ///
    /// - Throws: `ValueError` with code `invalidFieldName` when a segment is empty or contains `.`.
    public init(segments: [String]) throws(ValueError) {
        for segment in segments where segment.isEmpty || segment.contains(Self.separator) {
            throw ValueError(.invalidFieldName, field: segments.joined(separator: "."),
                             detail: "a field name is empty or contains \".\"")
        }
        self.dotted = segments.joined(separator: ".")
    }

    /// A path known to be valid (built from validated parts).
    init(unchecked dotted: String) { self.dotted = dotted }

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
