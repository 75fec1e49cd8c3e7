/// Why a value, a path or a document was refused. Names the field it concerns.
///
/// A struct over a code, so that new codes do not break callers that switch on them.
public struct ValueError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What kind of problem it is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// A double that is NaN or infinite, or a number that fits no double.
        public static let notRepresentable = Code(name: "notRepresentable")
        /// A string or key that is not valid UTF-8 (or holds a lone surrogate).
        public static let invalidUTF8 = Code(name: "invalidUTF8")
        /// A field name that is empty or contains the path separator `.`.
        public static let invalidFieldName = Code(name: "invalidFieldName")
        /// Nesting deeper than `ValueLimits.maximumDepth`.
        public static let tooDeep = Code(name: "tooDeep")
        /// A document larger than `ValueLimits.maximumDocumentBytes`.
        public static let tooLarge = Code(name: "tooLarge")
        /// Text that is not JSON.
        public static let malformedJSON = Code(name: "malformedJSON")
        /// A change to a document that does not exist and that the change does not create.
        public static let documentNotFound = Code(name: "documentNotFound")
        public var description: String { name }
    }

    /// What kind of problem it is.
    public let code: Code
    /// The dotted path of the field concerned, `""` for the whole document.
    public let field: String
    /// A sentence for people.
    public let detail: String

    /// An error of kind `code` about `field` (`""` for the whole document).
    public init(_ code: Code, field: String, detail: String) {
        self.code = code
        self.field = field
        self.detail = detail
    }

    /// Why a change carrying this value is refused.
    public var reason: Refusal.Reason {
        switch code {
        case .tooLarge: .tooLarge
        case .documentNotFound: .notFound
        default: .invalid
        }
    }

    public var description: String {
        field.isEmpty ? "\(code): \(detail)" : "\(code) at field \"\(field)\": \(detail)"
    }
}

/// Documented limits on values and documents.
public enum ValueLimits {
    /// The deepest nesting of maps and arrays in a value (a value at the top counts as level 0).
    public static let maximumDepth = 32
    /// The deepest nesting of the compact forms (states, deltas, batches, wire bodies): a
    /// document's values sit at most this many levels deeper inside them than `maximumDepth`.
    public static let maximumEncodedDepth = maximumDepth + 8
    /// The largest document, measured as its canonical JSON encoding.
    public static let maximumDocumentBytes = 1 << 20
}
