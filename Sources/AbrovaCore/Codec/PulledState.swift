/// A pulled document's state as a device takes it. Most documents have one shape: they exist and
/// every field is a top-level value. For those, the reader writes on its way the two forms a device
/// stores (`storedForms`: versions and view) and keeps the fields in the order they came, so that a
/// device that does not hold the document yet (the bulk of an initial sync) stores the forms
/// without building a `DocumentState`, and one that does builds it without reading the bytes again.
public struct PulledState: Sendable {
    /// A live top-level register as the page brought it.
    private struct FlatField: Sendable {
        var path: FieldPath
        var register: Register
    }

    /// The state, when it was read as such.
    private let read: DocumentState?
    /// Otherwise the existence, the live top-level registers in path order, and the forms written
    /// from them.
    private let existence: Existence
    private let fields: [FlatField]
    private let versions: [UInt8]
    private let view: String

    /// A state read already.
    public init(_ state: DocumentState) {
        read = state
        existence = state.existence
        fields = []
        versions = []
        view = ""
    }

    private init(existence: Existence, fields: [FlatField], versions: [UInt8], view: String) {
        read = nil
        self.existence = existence
        self.fields = fields
        self.versions = versions
        self.view = view
    }

    /// The state.
    public var state: DocumentState {
        if let read { return read }
        var byPath: [FieldPath: Field] = [:]
        byPath.reserveCapacity(fields.count)
        for field in fields { byPath[field.path] = .register(field.register) }
        return DocumentState(existence: existence, fields: byPath)
    }

    /// Whether the document exists.
    public var exists: Bool { existence.exists }

    /// The live value at `path` as apps see it (`DocumentState.liveValue(within:)`).
    public func liveValue(at path: FieldPath) -> Value? {
        if let read { return read.liveValue(within: path) }
        // Flat: top-level registers, none holding a map, so a nested path holds nothing.
        return fields.first { $0.path == path }?.register.value
    }

    /// What a device stores for the state: `DocumentState.storedForms`, written on the way when the
    /// reader could.
    public var storedForms: (versions: [UInt8], view: String?) {
        if let read { return read.storedForms }
        return (versions, view)
    }

    /// Whether the stored forms were written on the way (the document has the common shape).
    public var isFlat: Bool { read == nil }

    /// Reads a state's compact form at the reader's position: as `DocumentState.readEncoded`, and
    /// in the common shape with its stored forms written on the way. `nil` when
    /// `DocumentState.readEncoded` gives `nil`.
    package static func read(from reader: inout JSONReader) -> PulledState? {
        var attempt = reader
        if let flat = readFlat(from: &attempt) {
            reader = attempt
            return flat
        }
        return DocumentState.readEncoded(from: &reader).map(PulledState.init)
    }

    /// The common shape, `{"e":[1,version],"f":{path:[value,version],...}}` with top-level paths in
    /// path order, none holding a non-empty map, checked as `DocumentState.readEncoded` checks
    /// them; `nil` for anything else (the caller reads the bytes again).
    private static func readFlat(from reader: inout JSONReader) -> PulledState? {
        do {
            guard try reader.beginObject(), try reader.nextKey() == "e", try reader.beginArray(), try reader.nextElement(),
                case .int(1) = try reader.readValue(), try reader.nextElement(), case .int(let existenceVersion) = try reader.readValue(),
                existenceVersion >= 0, !(try reader.nextElement()), try reader.nextKey() == "f", try reader.beginObject()
            else { return nil }
            var fields: [FlatField] = []
            fields.reserveCapacity(16)
            var view: [UInt8] = []
            view.reserveCapacity(512)
            view.append(UInt8(ascii: "{"))
            var previous: FieldPath?
            while let dotted = try reader.nextKey() {
                let path = try FieldPath(dotted)
                guard !path.isRoot, !path.isNested, previous.map({ $0 < path }) ?? true, try reader.beginArray(), try reader.nextElement()
                else { return nil }
                let value = try reader.readValue()
                guard try reader.nextElement(), case .int(let version) = try reader.readValue(), version >= 0, !(try reader.nextElement())
                else { return nil }
                if case .map(let entries) = value, !entries.isEmpty { return nil }
                try value.validate(at: path, depth: 1)
                if !fields.isEmpty { view.append(UInt8(ascii: ",")) }
                let register = Register(value: value, version: Version(UInt64(version)))
                DocumentState.writeMember(path, .register(register), to: &view)
                fields.append(FlatField(path: path, register: register))
                previous = path
            }
            guard try reader.nextKey() == nil else { return nil }
            view.append(UInt8(ascii: "}"))
            let existence = Existence(exists: true, version: Version(UInt64(existenceVersion)))
            return PulledState(
                existence: existence, fields: fields, versions: versions(existence, fields),
                view: String(decoding: view, as: UTF8.self))
        } catch {
            return nil
        }
    }

    /// `DocumentState.writeVersions` for live top-level registers in path order.
    private static func versions(_ existence: Existence, _ fields: [FlatField]) -> [UInt8] {
        let common = DocumentState.mostCommon { visit in
            for field in fields {
                guard visit(field.register.version) else { return }
            }
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(24)
        DocumentState.writeVersionsOpening(common: common, existence: existence.version, to: &bytes)
        var isFirst = true
        for field in fields where field.register.version != common {
            bytes.append(contentsOf: isFirst ? #","r":{"#.utf8 : ",".utf8)
            isFirst = false
            Value.writeJSONString(field.path.dotted, to: &bytes)
            bytes.append(UInt8(ascii: ":"))
            Value.writeDecimal(Int64(bitPattern: field.register.version.rawValue), to: &bytes)
        }
        if !isFirst { bytes.append(UInt8(ascii: "}")) }
        bytes.append(UInt8(ascii: "}"))
        return bytes
    }
}

extension PulledState: Hashable {
    /// Equal when the states are (the stored forms follow from them).
    public static func == (left: PulledState, right: PulledState) -> Bool {
        left.state == right.state
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(state)
    }
}
