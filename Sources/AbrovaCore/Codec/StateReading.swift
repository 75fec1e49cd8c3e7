// Reading a state's compact form in one pass over its bytes: the server reads one for every
// document it sends in a pull, and the device one for every document it receives. Only the
// user's values become `Value`s; the maps around them are never built.
//
// The one-pass reader takes only states in the shape their writer gives them. Anything else
// (malformed JSON, an unknown key, a repeated path, a wrong type) is left to the tree decoder,
// which reads it again and refuses it exactly as before, with the same error.

extension DocumentState {
    /// Reads the compact form from its JSON bytes: the same state, and the same refusals, as
    /// `DocumentState(encoded: Value(json: bytes, maximumDepth: ValueLimits.maximumEncodedDepth))`,
    /// without building the tree for a well-formed state.
    ///
    /// - Throws: `ValueError` when the bytes are not a state (see `init(encoded:)`).
    public init(encodedJSON bytes: [UInt8]) throws(ValueError) {
        var reader = JSONReader(bytes: bytes, maximumDepth: ValueLimits.maximumEncodedDepth)
        if let state = Self.readEncoded(from: &reader), (try? reader.finish()) != nil {
            self = state
            return
        }
        try self.init(encoded: try Value(json: bytes, maximumDepth: ValueLimits.maximumEncodedDepth))
    }

    /// Reads a state's compact form at the reader's position, in one pass. `nil` when the value is
    /// anything but a well-formed state in the writer's shape (the reader is then left anywhere in
    /// it): the caller reads the bytes again with the tree decoder, which names the problem.
    package static func readEncoded(from reader: inout JSONReader) -> DocumentState? {
        do {
            guard try reader.beginObject() else { return nil }
            var existence: Existence?
            var fields: [FieldPath: Field]?
            while let key = try reader.nextKey() {
                switch key {
                case "e" where existence == nil:
                    guard try reader.beginArray(), try reader.nextElement(), case .int(let exists) = try reader.readValue(),
                        exists == 0 || exists == 1, try reader.nextElement(), let version = try readVersion(from: &reader),
                        !(try reader.nextElement())
                    else { return nil }
                    existence = Existence(exists: exists == 1, version: version)
                case "f" where fields == nil:
                    guard let read = try readFields(from: &reader) else { return nil }
                    fields = read
                default:
                    return nil
                }
            }
            guard let existence else { return nil }
            return DocumentState(existence: existence, fields: fields ?? [:])
        } catch {
            return nil
        }
    }

    /// `{path: field}`, a register's `[value, version]` and a removed field's `[version]` read in
    /// place; a set is read whole and decoded as the tree decoder does.
    private static func readFields(from reader: inout JSONReader) throws -> [FieldPath: Field]? {
        guard try reader.beginObject() else { return nil }
        var fields: [FieldPath: Field] = [:]
        fields.reserveCapacity(16)
        while let dotted = try reader.nextKey() {
            let path = try FieldPath(dotted)
            try path.checkNotRoot()
            let field: Field
            if try reader.beginArray() {
                guard try reader.nextElement() else { return nil }
                let first = try reader.readValue()
                if try reader.nextElement() {
                    guard let version = try readVersion(from: &reader), !(try reader.nextElement()) else { return nil }
                    try first.validate(at: path, depth: path.depth)
                    field = .register(Register(value: first, version: version))
                } else {
                    guard case .int(let number) = first, number >= 0 else { return nil }
                    field = .register(Register(value: nil, version: Version(UInt64(number))))
                }
            } else {
                field = try decodeField(try reader.readValue(), at: path)
            }
            guard fields.updateValue(field, forKey: path) == nil else { return nil } // a repeated path
        }
        return fields
    }

    /// A version: a non-negative integer; `nil` for any other value.
    private static func readVersion(from reader: inout JSONReader) throws(ValueError) -> Version? {
        guard case .int(let number) = try reader.readValue(), number >= 0 else { return nil }
        return Version(UInt64(number))
    }
}
