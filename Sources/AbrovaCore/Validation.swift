extension Value {
    /// Checks that the value can be stored at `path`, `depth` levels below the document.
    ///
    /// - Throws: `ValueError` naming the offending field: a NaN or infinite double, a map key that
    ///   is empty, contains `.` or a character field names may not hold, or nesting deeper than `ValueLimits.maximumDepth`.
    ///   Where there are several, the first met walking arrays in order and maps in the order of
    ///   their keys (Swift's string order).
    package func validate(at path: FieldPath, depth: Int) throws(ValueError) {
        guard depth <= ValueLimits.maximumDepth else {
            throw ValueError(.tooDeep, field: path.dotted, detail: "nested deeper than \(ValueLimits.maximumDepth) levels")
        }
        switch self {
        case .double(let double) where !double.isFinite:
            throw ValueError(.notRepresentable, field: path.dotted, detail: "\(double) is not a finite number")
        case .timestamp(let timestamp) where !timestamp.isStorable:
            throw ValueError(.notRepresentable, field: path.dotted, detail: "\(timestamp) lies outside the years 0000 to 9999")
        case .array(let elements):
            for element in elements { try element.validate(at: path, depth: depth + 1) }
        case .map(let entries):
            // A dictionary's order varies from run to run, and between equal dictionaries: its
            // entries are each checked once, in that order, and the smallest key's problem named.
            var first: (key: String, error: ValueError)?
            for (key, value) in entries where first.map({ key < $0.key }) ?? true {
                do {
                    try value.validate(asEntry: key, ofMapAt: path, depth: depth)
                } catch {
                    first = (key, error)
                }
            }
            if let first { throw first.error }
        default:
            break
        }
    }

    /// Checks the value of a map's entry `key`, and the key, for a map at `path` and `depth`.
    private func validate(asEntry key: String, ofMapAt path: FieldPath, depth: Int) throws(ValueError) {
        guard !key.isEmpty, !key.contains(FieldPath.separator) else {
            throw ValueError(
                .invalidFieldName, field: path.isRoot ? key : path.dotted + "." + key,
                detail: "a field name is empty or contains \".\"")
        }
        let field = path.isRoot ? key : path.dotted + "." + key
        switch key {
        case Value.timestampKey:
            throw ValueError(
                .notRepresentable, field: field,
                detail:
                    "{\"$timestamp\": …} holds RFC 3339 text with six digits of fraction and Z, alone in its map (field names may not begin with $)"
            )
        case Value.bytesKey:
            throw ValueError(
                .notRepresentable, field: field,
                detail: "{\"$bytes\": …} holds base64 text with its = padding, alone in its map (field names may not begin with $)")
        default:
            try FieldPath.checkName(key, at: field)
        }
        try validate(at: path.appending(key), depth: depth + 1)
    }

    /// The leaves of a value placed at `path`: each non-empty map is opened up, everything else is a
    /// leaf (an empty map and an array included).
    func leaves(at path: FieldPath) -> [(FieldPath, Value)] {
        guard case .map(let entries) = self, !entries.isEmpty else { return [(path, self)] }
        return entries.flatMap { key, value in value.leaves(at: path.appending(key)) }
    }
}

extension FieldPath {
    func checkNotRoot() throws(ValueError) {
        if isRoot { throw ValueError(.invalidFieldName, field: "", detail: "a field path is empty") }
    }
}

extension DocumentState {
    /// Checks the document against `ValueLimits.maximumDocumentBytes`.
    ///
    /// - Throws: `ValueError` with code `tooLarge`.
    public func checkSize() throws(ValueError) {
        guard byteSize <= ValueLimits.maximumDocumentBytes else {
            throw ValueError(
                .tooLarge, field: "",
                detail: "the document holds \(byteSize) bytes; the limit is \(ValueLimits.maximumDocumentBytes)")
        }
    }
}
