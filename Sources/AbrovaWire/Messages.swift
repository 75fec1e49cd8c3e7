import AbrovaCore

// The bodies of the sync protocol (Spec/protocol.md) and their JSON forms. Requests are read
// strictly: an unknown key, a wrong type or a value out of range is a 400 that names it, so a
// client's mistake is never silently ignored. Answers are written as canonical JSON.

/// Limits a server puts on requests; each refusal names the limit it hit.
public struct WireLimits: Hashable, Sendable {
    /// The most changes in one pushed batch.
    public var maximumChanges: Int
    /// The most documents in one pulled page.
    public var maximumPageSize: Int
    /// The most bytes of documents in one pulled page: a page of large documents holds fewer
    /// (always at least one), so that no data set makes an answer too large for a device.
    public var maximumPageBytes: Int

    /// Limits with the defaults: 1,000 changes a batch, 1,000 documents and 8 MiB a page.
    public init(maximumChanges: Int = 1_000, maximumPageSize: Int = 1_000, maximumPageBytes: Int = 8 << 20) {
        self.maximumChanges = maximumChanges
        self.maximumPageSize = maximumPageSize
        self.maximumPageBytes = maximumPageBytes
    }
}

/// A pushed batch: the client's changes and the strategy that settles their conflicts.
public struct PushRequest: Hashable, Sendable {
    /// The changes, with the client id and batch number that make the batch idempotent.
    public var batch: Batch
    /// How the server settles conflicts in this batch.
    public var strategy: ConflictStrategy

    /// A push of `batch` under `strategy`; a change with a strategy of its own keeps it (one equal
    /// to the batch's is the batch's, so that a body has one form).
    public init(batch: Batch, strategy: ConflictStrategy) {
        var batch = batch
        for index in batch.changes.indices where batch.changes[index].strategy == strategy { batch.changes[index].strategy = nil }
        self.batch = batch
        self.strategy = strategy
    }

    /// The canonical JSON body, `{"batchSeq", "changes": [{"collection", "delta", "id", "strategy"?,
    /// "writes"}], "clientId", "strategy"}`; a retry of the same batch has the same bytes.
    public var body: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(64 + batch.changes.count * 256)
        batch.writeEncoded(to: &bytes, strategy: strategy)
        return bytes
    }

    /// Reads a push body in one pass over its bytes, checking every part (PushReading.swift).
    ///
    /// - Throws: `Refusal` `.invalid` naming what is malformed (`.tooLarge` for too many changes or a
    ///   value too large).
    public init(body: some Collection<UInt8>, limits: WireLimits = WireLimits()) throws(Refusal) {
        var reader = JSONReader(bytes: Array(body), maximumDepth: ValueLimits.maximumEncodedDepth)
        let form: PushForm
        do {
            form = try PushForm.read(from: &reader, limits: limits)
            try reader.finish()
        } catch {
            throw Refusal(error, context: "the body is not valid JSON")
        }
        self = try form.request(limits: limits)
    }
}

/// The server's answer to a push: one result per change, in the batch's order, and the pull
/// cursor the device may take when its own pull would bring nothing but this batch.
public struct PushResponse: Hashable, Sendable {
    /// The results, one per change.
    public var results: [ChangeResult]
    /// The cursor after this batch, given when the push named the device's pull cursor and no
    /// document changed between it and the batch (Spec/protocol.md, "POST /v1/push"): a device
    /// whose cursor is still the one it sent takes it, and does not pull its own changes back.
    public var cursor: String?

    /// An answer holding `results`.
    public init(results: [ChangeResult], cursor: String? = nil) {
        self.results = results
        self.cursor = cursor
    }

    /// The canonical JSON body: `{"cursor"?, "results": [...]}` where a result is `{"status":
    /// "applied", "version", "state"?, "conflicts"}` (no state for an uncontested change),
    /// `{"status": "conflict", "state", "conflicts"}` or `{"status": "rejected", "statusCode",
    /// "message"}`.
    public var body: [UInt8] {
        var bytes: [UInt8] = []
        bytes.append(UInt8(ascii: "{"))
        if let cursor {
            bytes.append(contentsOf: #""cursor":"#.utf8)
            Value.string(cursor).writeCanonicalJSON(to: &bytes)
            bytes.append(UInt8(ascii: ","))
        }
        bytes.append(contentsOf: #""results":["#.utf8)
        for (index, result) in results.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            // Keys in canonical order: conflicts, message, state, status, statusCode, version.
            switch result {
            case .applied(let version, let state, let conflicts):
                bytes.append(contentsOf: #"{"conflicts":"#.utf8)
                Value.array(conflicts.map(\.wire)).writeCanonicalJSON(to: &bytes)
                if let state {
                    bytes.append(contentsOf: #","state":"#.utf8)
                    state.writeEncoded(to: &bytes)
                }
                bytes.append(contentsOf: #","status":"applied","version":"#.utf8)
                Value.writeDecimal(Int64(bitPattern: version.rawValue), to: &bytes)
                bytes.append(UInt8(ascii: "}"))
            case .unresolved(let state, let conflicts):
                bytes.append(contentsOf: #"{"conflicts":"#.utf8)
                Value.array(conflicts.map(\.wire)).writeCanonicalJSON(to: &bytes)
                bytes.append(contentsOf: #","state":"#.utf8)
                state.writeEncoded(to: &bytes)
                bytes.append(contentsOf: #","status":"conflict"}"#.utf8)
            case .rejected(let reason, let message):
                Value.map(["status": "rejected", "statusCode": .int(Int64(reason.httpStatus)), "message": .string(message)])
                    .writeCanonicalJSON(to: &bytes)
            }
        }
        bytes.append(contentsOf: "]}".utf8)
        return bytes
    }

    /// `body` of an answer with `cursor` added, made from the body of the same answer without
    /// one (as stored for a retry) rather than by writing the results again.
    public static func adding(cursor: String, to body: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = Array(#"{"cursor":"#.utf8)
        Value.string(cursor).writeCanonicalJSON(to: &bytes)
        bytes.append(UInt8(ascii: ","))
        bytes.append(contentsOf: body.dropFirst())
        return bytes
    }

    /// The most common answer read in one pass, without a `Value` tree: every result uncontested
    /// and without conflicts, exactly as `body` writes it (`{"conflicts":[],"status":"applied",
    /// "version":n}`). `nil` for anything else, which the tree reading then accepts or refuses as
    /// before.
    static func readUncontested(_ bytes: [UInt8]) -> PushResponse? {
        var reader = JSONReader(bytes: bytes, maximumDepth: ValueLimits.maximumEncodedDepth)
        do {
            guard try reader.beginObject() else { return nil }
            var key = try reader.nextKey()
            var cursor: String?
            if key == "cursor" {
                guard case .string(let text) = try reader.readValue() else { return nil }
                cursor = text
                key = try reader.nextKey()
            }
            guard key == "results", try reader.beginArray() else { return nil }
            var results: [ChangeResult] = []
            while try reader.nextElement() {
                guard try reader.beginObject(), try reader.nextKey() == "conflicts", try reader.beginArray(), !(try reader.nextElement()),
                    try reader.nextKey() == "status", case .string("applied") = try reader.readValue(),
                    try reader.nextKey() == "version", case .int(let number) = try reader.readValue(), number >= 0,
                    try reader.nextKey() == nil
                else { return nil }
                results.append(.applied(version: Version(UInt64(number)), state: nil, conflicts: []))
            }
            guard try reader.nextKey() == nil else { return nil }
            try reader.finish()
            return PushResponse(results: results, cursor: cursor)
        } catch {
            return nil
        }
    }

    /// Reads a push answer.
    ///
    /// - Throws: `Refusal` `.invalid` when the body is not one.
    public init(body: some Collection<UInt8>) throws(Refusal) {
        if let uncontested = Self.readUncontested(Array(body)) {
            self = uncontested
        } else {
            self = try Self.readResults(body)
        }
    }

    /// Reads the answer through a `Value` tree: any answer, with the refusals of the protocol.
    static func readResults(_ body: some Collection<UInt8>) throws(Refusal) -> PushResponse {
        let parts = try fields(of: try parse(body), allowed: ["cursor", "results"], in: "the push answer")
        let cursor: String?
        switch parts["cursor"] {
        case nil: cursor = nil
        case .string(let text)?: cursor = text
        default: throw Refusal.invalid("cursor must be a string")
        }
        guard case .array(let items)? = parts["results"] else { throw Refusal.invalid("results must be an array") }
        var results: [ChangeResult] = []
        for (index, item) in items.enumerated() {
            let context = "results[\(index)]"
            let result = try fields(of: item, allowed: ["status", "version", "state", "conflicts", "statusCode", "message"], in: context)
            switch try string(result["status"], named: "\(context).status") {
            case "applied":
                results.append(
                    .applied(
                        version: try Version(wire: result["version"], named: "\(context).version"),
                        state: try result["state"].map { value throws(Refusal) in try state(value, in: context) },
                        conflicts: try conflicts(result["conflicts"], in: context)))
            case "conflict":
                results.append(
                    .unresolved(
                        state: try state(result["state"], in: context),
                        conflicts: try conflicts(result["conflicts"], in: context)))
            case "rejected":
                guard case .int(let status)? = result["statusCode"], (400...599).contains(status) else {
                    throw Refusal.invalid("\(context).statusCode must be an HTTP error status")
                }
                results.append(
                    .rejected(
                        reason: Refusal.Reason(httpStatus: Int(status)), message: try string(result["message"], named: "\(context).message")
                    ))
            case let other:
                throw Refusal.invalid("\(context).status \"\(other)\" is not applied, conflict or rejected")
            }
        }
        return PushResponse(results: results, cursor: cursor)
    }
}

/// A document as the server sends it: its key, the version of its last change and its state
/// (a deleted document is a tombstone: its state says it does not exist).
public struct ServerDocument: Hashable, Sendable {
    /// Which document.
    public var key: DocumentKey
    /// The version of its last change.
    public var version: Version
    /// Its state as a device takes it: read as a pulled page comes, with what a device stores for
    /// it, for the common shape, written on the way (`PulledState`).
    public var pulled: PulledState

    /// Its state (built from `pulled` each time it is read).
    public var state: DocumentState {
        get { pulled.state }
        set { pulled = PulledState(newValue) }
    }

    /// A document at `version`.
    public init(key: DocumentKey, version: Version, state: DocumentState) {
        self.init(key: key, version: version, pulled: PulledState(state))
    }

    /// A document at `version`, its state as a page brought it.
    public init(key: DocumentKey, version: Version, pulled: PulledState) {
        self.key = key
        self.version = version
        self.pulled = pulled
    }

    init(wire value: Value, in context: String) throws(Refusal) {
        let parts = try fields(of: value, allowed: ["collection", "id", "version", "deleted", "state", "data"], in: context)
        key = DocumentKey(
            collection: try string(parts["collection"], named: "\(context).collection"),
            id: try string(parts["id"], named: "\(context).id"))
        version = try Version(wire: parts["version"], named: "\(context).version")
        pulled = PulledState(try AbrovaWire.state(parts["state"], in: context))
    }

    /// The canonical JSON body of an online read's answer: `{"collection", "data", "deleted", "id",
    /// "state", "version"}`; `data` (the document, for readers that do not need the state) only
    /// when it exists.
    public var body: [UInt8] {
        var bytes: [UInt8] = []
        write(to: &bytes)
        return bytes
    }

    /// Appends the canonical JSON form; without `data` unless `includesData` (it follows from
    /// the state, which is what a device keeps).
    func write(to bytes: inout [UInt8], includesData: Bool = true) {
        let state = state
        let (data, encoded) = includesData ? state.documentJSONAndEncoded : (nil, state.encodedBytes)
        Self.write(key, version: version, exists: state.exists, data: data, encodedState: encoded, to: &bytes)
    }

    /// Appends a document's object from its parts: `encodedState` is the state's compact form.
    static func write(
        _ key: DocumentKey, version: Version, exists: Bool, data: String?, encodedState: [UInt8], to bytes: inout [UInt8]
    ) {
        // Keys in canonical order: collection, data, deleted, id, state, version.
        bytes.append(contentsOf: #"{"collection":"#.utf8)
        Value.writeJSONString(key.collection, to: &bytes)
        if let data {
            bytes.append(contentsOf: #","data":"#.utf8)
            bytes.append(contentsOf: data.utf8)
        }
        bytes.append(contentsOf: exists ? #","deleted":false,"id":"#.utf8 : #","deleted":true,"id":"#.utf8)
        Value.writeJSONString(key.id, to: &bytes)
        bytes.append(contentsOf: #","state":"#.utf8)
        bytes.append(contentsOf: encodedState)
        bytes.append(contentsOf: #","version":"#.utf8)
        Value.writeDecimal(Int64(bitPattern: version.rawValue), to: &bytes)
        bytes.append(UInt8(ascii: "}"))
    }

    /// Reads an online read's answer.
    ///
    /// - Throws: `Refusal` `.invalid` when the body is not one.
    public init(body: some Collection<UInt8>) throws(Refusal) {
        try self.init(wire: try parse(body), in: "the document")
    }
}

/// What a pulled document carries (`GET /v1/pull?form=`).
public enum PullForm: String, Sendable {
    /// Its state and, when it exists, its data: for readers that do not keep states.
    case full
    /// Its state alone, which the data follows from: what a device asks for.
    case state
}

/// A page of a pull: the documents changed after the cursor, in version order, and the cursor to
/// ask from next.
public struct PullResponse: Hashable, Sendable {
    /// The documents, tombstones included.
    public var documents: [ServerDocument]
    /// Where the next pull starts.
    public var cursor: String
    /// Whether more changes wait after this page.
    public var hasMore: Bool
    /// Documents that changed after the cursor and that the pull's scope no longer covers (a pull
    /// with a `scope` of equalities and a cursor): a device that holds one lets it go.
    public var left: [DocumentKey]

    /// A page.
    public init(documents: [ServerDocument], cursor: String, hasMore: Bool, left: [DocumentKey] = []) {
        self.documents = documents
        self.cursor = cursor
        self.hasMore = hasMore
        self.left = left
    }

    /// The canonical JSON body: `{"cursor", "documents": [...], "hasMore"}`.
    public var body: [UInt8] { body(form: .full) }

    /// The canonical JSON body, its documents in `form`.
    public func body(form: PullForm) -> [UInt8] {
        var writer = Writer(form: form)
        for document in documents { writer.append(document) }
        for key in left { writer.appendLeft(key) }
        return writer.finish(cursor: cursor, hasMore: hasMore)
    }

    /// Writes a page's body a document at a time, so that a server knows its size as it fills it
    /// and each document is encoded once.
    public struct Writer: Sendable {
        private var documentBytes: [UInt8] = []
        private var leftBytes: [UInt8] = []
        /// How many documents it holds, those that left the scope included.
        public private(set) var count = 0
        /// Whether each document carries `data` beside its state (`PullForm`).
        private let includesData: Bool

        /// An empty page, of documents in `form`.
        public init(form: PullForm = .full) {
            includesData = form == .full
        }

        /// The bytes of the documents so far.
        public var byteCount: Int { documentBytes.count + leftBytes.count }

        /// Adds `document` unless the documents would then hold more than `maximumBytes` and
        /// the page already holds one; returns whether it was added.
        @discardableResult
        public mutating func append(_ document: ServerDocument, maximumBytes: Int = .max) -> Bool {
            let includesData = includesData
            return append(maximumBytes: maximumBytes) { document.write(to: &$0, includesData: includesData) }
        }

        /// Adds a document given as its state's compact form (canonical, as `DocumentState.
        /// encodedBytes` writes it), as `append(_:maximumBytes:)` would add it: copied as it is
        /// into a page of states alone; a page with data reads it for the data.
        ///
        /// - Throws: `ValueError` when a page with data cannot read the state.
        @discardableResult
        public mutating func append(
            _ key: DocumentKey, version: Version, exists: Bool, encodedState: [UInt8], maximumBytes: Int = .max
        ) throws -> Bool {
            if includesData {
                return append(
                    ServerDocument(key: key, version: version, state: try DocumentState(encodedJSON: encodedState)),
                    maximumBytes: maximumBytes)
            }
            return append(maximumBytes: maximumBytes) {
                ServerDocument.write(key, version: version, exists: exists, data: nil, encodedState: encodedState, to: &$0)
            }
        }

        /// Adds a document the pull's scope no longer covers (`left`), on the terms of
        /// `append(_:maximumBytes:)`; returns whether it was added.
        @discardableResult
        public mutating func appendLeft(_ key: DocumentKey, maximumBytes: Int = .max) -> Bool {
            let mark = leftBytes.count
            if !leftBytes.isEmpty { leftBytes.append(UInt8(ascii: ",")) }
            // Keys in canonical order: collection, id.
            leftBytes.append(contentsOf: #"{"collection":"#.utf8)
            Value.writeJSONString(key.collection, to: &leftBytes)
            leftBytes.append(contentsOf: #","id":"#.utf8)
            Value.writeJSONString(key.id, to: &leftBytes)
            leftBytes.append(UInt8(ascii: "}"))
            guard byteCount <= maximumBytes || count == 0 else {
                leftBytes.removeSubrange(mark...)
                return false
            }
            count += 1
            return true
        }

        private mutating func append(maximumBytes: Int, _ write: (inout [UInt8]) -> Void) -> Bool {
            let mark = documentBytes.count
            if !documentBytes.isEmpty { documentBytes.append(UInt8(ascii: ",")) }
            write(&documentBytes)
            guard byteCount <= maximumBytes || count == 0 else {
                documentBytes.removeSubrange(mark...)
                return false
            }
            count += 1
            return true
        }

        /// The page's body.
        public func finish(cursor: String, hasMore: Bool) -> [UInt8] {
            var bytes: [UInt8] = []
            bytes.reserveCapacity(72 + cursor.utf8.count + byteCount)
            // Keys in canonical order: cursor, documents, hasMore, left (only when some left).
            bytes.append(contentsOf: #"{"cursor":"#.utf8)
            Value.writeJSONString(cursor, to: &bytes)
            bytes.append(contentsOf: #","documents":["#.utf8)
            bytes.append(contentsOf: documentBytes)
            bytes.append(contentsOf: hasMore ? #"],"hasMore":true"#.utf8 : #"],"hasMore":false"#.utf8)
            if !leftBytes.isEmpty {
                bytes.append(contentsOf: #","left":["#.utf8)
                bytes.append(contentsOf: leftBytes)
                bytes.append(UInt8(ascii: "]"))
            }
            bytes.append(UInt8(ascii: "}"))
            return bytes
        }
    }

    /// Reads a page.
    ///
    /// - Throws: `Refusal` `.invalid` when the body is not one.
    public init(body: some Collection<UInt8>) throws(Refusal) {
        let bytes = Array(body)
        if let page = Self.readInOnePass(bytes) {
            self = page
            return
        }
        self = try Self.readAsTree(bytes)
    }

    /// Reads a page as a `Value` tree, then walks it: the reading that names what is wrong.
    static func readAsTree(_ bytes: [UInt8]) throws(Refusal) -> PullResponse {
        let parts = try fields(of: try parse(bytes), allowed: ["documents", "cursor", "hasMore", "left"], in: "the page")
        guard case .array(let items)? = parts["documents"], case .bool(let hasMore)? = parts["hasMore"] else {
            throw Refusal.invalid("a page needs documents and hasMore")
        }
        var documents: [ServerDocument] = []
        for (index, item) in items.enumerated() { documents.append(try ServerDocument(wire: item, in: "documents[\(index)]")) }
        var left: [DocumentKey] = []
        if let listed = parts["left"] {
            guard case .array(let keys) = listed else { throw Refusal.invalid("left must be a list") }
            for (index, key) in keys.enumerated() {
                let context = "left[\(index)]"
                let parts = try fields(of: key, allowed: ["collection", "id"], in: context)
                left.append(
                    DocumentKey(
                        collection: try string(parts["collection"], named: "\(context).collection"),
                        id: try string(parts["id"], named: "\(context).id")))
            }
        }
        return PullResponse(
            documents: documents, cursor: try string(parts["cursor"], named: "cursor"), hasMore: hasMore, left: left)
    }
}

// Reading a page in one pass (a device reads pages of 500 documents throughout an initial sync):
// only the documents' values become `Value`s. Anything but a well-formed page is left to the tree
// reading, which reads it again and refuses it with its reasons.

extension PullResponse {
    /// The page, when `bytes` are a well-formed one; otherwise `nil`.
    static func readInOnePass(_ bytes: [UInt8]) -> PullResponse? {
        var reader = JSONReader(bytes: bytes, maximumDepth: ValueLimits.maximumEncodedDepth)
        do {
            guard try reader.beginObject() else { return nil }
            var cursor: String?
            var documents: [ServerDocument]?
            var hasMore: Bool?
            var left: [DocumentKey]?
            while let key = try reader.nextKey() {
                switch key {
                case "cursor" where cursor == nil:
                    guard case .string(let text) = try reader.readValue() else { return nil }
                    cursor = text
                case "hasMore" where hasMore == nil:
                    guard case .bool(let flag) = try reader.readValue() else { return nil }
                    hasMore = flag
                case "documents" where documents == nil:
                    guard try reader.beginArray() else { return nil }
                    var read: [ServerDocument] = []
                    while try reader.nextElement() {
                        guard let document = try ServerDocument.readInOnePass(from: &reader) else { return nil }
                        read.append(document)
                    }
                    documents = read
                case "left" where left == nil:
                    guard case .array(let items) = try reader.readValue() else { return nil }
                    var keys: [DocumentKey] = []
                    for item in items {
                        guard case .map(let parts) = item, parts.count == 2, case .string(let collection)? = parts["collection"],
                            case .string(let id)? = parts["id"]
                        else { return nil }
                        keys.append(DocumentKey(collection: collection, id: id))
                    }
                    left = keys
                default:
                    return nil
                }
            }
            try reader.finish()
            guard let cursor, let documents, let hasMore else { return nil }
            return PullResponse(documents: documents, cursor: cursor, hasMore: hasMore, left: left ?? [])
        } catch {
            return nil
        }
    }
}

extension ServerDocument {
    /// A document of a page at the reader's position, when it is a well-formed one; otherwise `nil`.
    static func readInOnePass(from reader: inout JSONReader) throws(ValueError) -> ServerDocument? {
        guard try reader.beginObject() else { return nil }
        var collection: String?
        var id: String?
        var version: Version?
        var state: PulledState?
        var seen: UInt8 = 0 // a bit per key, so that a repeated one is refused
        while let key = try reader.nextKey() {
            let bit: UInt8 =
                switch key {
                case "collection": 1
                case "id": 2
                case "version": 4
                case "state": 8
                case "data": 16
                case "deleted": 32
                default: 0
                }
            guard bit != 0, seen & bit == 0 else { return nil }
            seen |= bit
            switch key {
            case "collection", "id":
                guard case .string(let text) = try reader.readValue() else { return nil }
                if key == "id" { id = text } else { collection = text }
            case "version":
                guard case .int(let number) = try reader.readValue(), number >= 0 else { return nil }
                version = Version(UInt64(number))
            case "state":
                guard let read = PulledState.read(from: &reader) else { return nil }
                state = read
            case "data", "deleted":
                // Not needed: the state says it all. Only checked, as the tree reading checks it.
                try reader.skipValue()
            default:
                return nil
            }
        }
        guard let collection, let id, let version, let state else { return nil }
        return ServerDocument(key: DocumentKey(collection: collection, id: id), version: version, pulled: state)
    }
}

/// Checks a client id: 1 to 128 ASCII letters, digits, `-` or `_` (a UUID fits).
///
/// - Throws: `Refusal` `.invalid`.
public func checkClientID(_ clientID: String) throws(Refusal) {
    let isValid =
        !clientID.isEmpty && clientID.utf8.count <= 128
        && clientID.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte | 0x20 >= 0x61 && byte | 0x20 <= 0x7A) || byte == 0x2D || byte == 0x5F
        }
    guard isValid else { throw Refusal.invalid("clientId must be 1 to 128 ASCII letters, digits, - or _") }
}

// MARK: - Reading parts

func parse(_ body: some Collection<UInt8>) throws(Refusal) -> Value {
    do {
        return try Value(json: body, maximumDepth: ValueLimits.maximumEncodedDepth)
    } catch {
        throw Refusal(error, context: "the body is not valid JSON")
    }
}

/// The entries of a map whose keys are all in `allowed`.
func fields(of value: Value, allowed: Set<String>, in context: String) throws(Refusal) -> [String: Value] {
    guard case .map(let parts) = value else { throw Refusal.invalid("\(context) must be a JSON object") }
    if let unknown = parts.keys.first(where: { !allowed.contains($0) }) {
        throw unknownKeyError(unknown, allowed: allowed, in: context)
    }
    return parts
}

/// The refusal of a key that is not in `allowed`.
func unknownKeyError(_ key: String, allowed: some Sequence<String>, in context: String) -> Refusal {
    Refusal.invalid("\(context) has an unknown key \"\(key.prefix(60))\"; allowed: \(allowed.sorted().joined(separator: ", "))")
}

/// The text of a string part; `name` is built only for a refusal.
func string(_ value: Value?, named name: @autoclosure () -> String) throws(Refusal) -> String {
    guard case .string(let text)? = value else { throw Refusal.invalid("\(name()) must be a string") }
    return text
}

private func state(_ value: Value?, in context: String) throws(Refusal) -> DocumentState {
    guard let value else { throw Refusal.invalid("\(context).state is missing") }
    do {
        return try DocumentState(encoded: value)
    } catch {
        throw Refusal(error, context: "\(context).state")
    }
}

private func conflicts(_ value: Value?, in context: String) throws(Refusal) -> [Conflict] {
    guard case .array(let items)? = value else { throw Refusal.invalid("\(context).conflicts must be an array") }
    var conflicts: [Conflict] = []
    for (index, item) in items.enumerated() {
        let name = "\(context).conflicts[\(index)]"
        let parts = try fields(of: item, allowed: ["path", "serverValue", "clientValue", "outcome"], in: name)
        guard let outcome = Conflict.Outcome(rawValue: try string(parts["outcome"], named: "\(name).outcome")) else {
            throw Refusal.invalid("\(name).outcome is not serverWon, clientWon, merged or unresolved")
        }
        let dotted = try string(parts["path"], named: "\(name).path")
        let path: FieldPath
        do {
            path = try FieldPath(dotted)
        } catch {
            throw Refusal(error, context: name)
        }
        conflicts.append(Conflict(path: path, serverValue: parts["serverValue"], clientValue: parts["clientValue"], outcome: outcome))
    }
    return conflicts
}

extension Conflict {
    /// `{"path", "outcome", "serverValue"?, "clientValue"?}`: an absent side (removed, deleted,
    /// never there) is left out.
    var wire: Value {
        var parts: [String: Value] = ["path": .string(path.dotted), "outcome": .string(outcome.rawValue)]
        if let serverValue { parts["serverValue"] = serverValue }
        if let clientValue { parts["clientValue"] = clientValue }
        return .map(parts)
    }
}

extension Version {
    var wire: Value { .int(Int64(bitPattern: rawValue)) }

    init(wire value: Value?, named name: String) throws(Refusal) {
        guard case .int(let number)? = value, number >= 0 else { throw Refusal.invalid("\(name) must be a non-negative integer") }
        self.init(UInt64(number))
    }
}
