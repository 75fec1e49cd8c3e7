/// A server-assigned Lamport version.
///
/// The server keeps one counter per database and gives every change it applies the next version,
/// so versions order changes without trusting any device's clock. `Version.zero` means "never".
public struct Version: RawRepresentable, Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    /// The version's number.
    public let rawValue: UInt64

    /// Makes a version from its number.
    public init(rawValue: UInt64) { self.rawValue = rawValue }

    /// Makes a version from its number.
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }

    /// "Never": older than every change.
    public static let zero = Version(0)

    /// The version after this one.
    public var next: Version { Version(rawValue + 1) }

    public static func < (left: Version, right: Version) -> Bool { left.rawValue < right.rawValue }

    public var description: String { String(rawValue) }

    public init(from decoder: any Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(UInt64.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}
