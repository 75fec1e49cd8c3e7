import AbrovaCore

// Reading a push body in one pass over its bytes (the server does it for every push): the batch,
// its changes and their deltas are built as their keys come, in any order; only the user's values
// become `Value`s.
//
// The refusals are those of reading the body as a `Value` tree and then walking it: a JSON error
// anywhere wins (the tree was parsed whole first), then the checks in the walk's order. So a part
// that is wrong is noted, not thrown, and the reading goes on to the end of the body; the parts
// are checked once it has been read.

extension PushRequest {
    /// The keys of a push body.
    static let keys = ["batchSeq", "changes", "clientId", "strategy"]
    /// The keys of a change.
    static let changeKeys = ["collection", "delta", "group", "id", "strategy", "writes"]
}

/// A push body as read.
struct PushForm {
    private var isObject = true
    private var unknownKeys = JSONReader.UnknownKeys()
    private var clientID: Value?
    private var sequence: Value?
    private var strategy: Value?
    private var changes: ChangesForm?

    /// Reads the body's value; only malformed JSON is thrown.
    static func read(from reader: inout JSONReader, limits: WireLimits) throws(ValueError) -> PushForm {
        var form = PushForm()
        guard try reader.beginObject() else {
            _ = try reader.readValue()
            form.isObject = false
            return form
        }
        while let key = try reader.nextKey() {
            let isNew: Bool
            switch key {
            case "clientId": isNew = store(try reader.readValue(), in: &form.clientID)
            case "batchSeq": isNew = store(try reader.readValue(), in: &form.sequence)
            case "strategy": isNew = store(try reader.readValue(), in: &form.strategy)
            case "changes": isNew = store(try ChangesForm.read(from: &reader, limits: limits), in: &form.changes)
            default:
                _ = try reader.readValue()
                isNew = form.unknownKeys.insert(key)
            }
            guard isNew else { throw reader.makeDuplicateKeyError() }
        }
        return form
    }

    /// The request, its parts checked in the order the tree decoder checked them.
    ///
    /// - Throws: `Refusal` `.invalid` naming what is wrong, `.tooLarge` for too many changes.
    func request(limits: WireLimits) throws(Refusal) -> PushRequest {
        guard isObject else { throw Refusal.invalid("the push must be a JSON object") }
        if let unknown = unknownKeys.first { throw unknownKeyError(unknown, allowed: PushRequest.keys, in: "the push") }
        let clientID = try string(clientID, named: "clientId")
        try checkClientID(clientID)
        guard case .int(let sequence)? = sequence, sequence >= 1 else {
            throw Refusal.invalid("batchSeq must be an integer from 1")
        }
        guard let strategy = ConflictStrategy(rawValue: try string(strategy, named: "strategy")) else {
            throw Refusal.invalid("strategy must be one of serverWins, clientWins, merge, manual")
        }
        guard let changes, changes.isArray else { throw Refusal.invalid("changes must be an array") }
        guard changes.count <= limits.maximumChanges else {
            throw Refusal(.tooLarge, "the batch holds \(changes.count) changes; the limit is \(limits.maximumChanges) (maximumChanges)")
        }
        if let refusal = changes.firstRefusal { throw refusal }
        try checkGroupsComeTogether(changes.changes)
        return PushRequest(batch: Batch(clientID: clientID, sequence: sequence, changes: changes.changes), strategy: strategy)
    }
}

/// Stores the value of a key; `false` when the key had one already (a duplicate key).
private func store<Part>(_ part: Part, in slot: inout Part?) -> Bool {
    let isNew = slot == nil
    slot = part
    return isNew
}

/// The `changes` of a push body as read: the changes up to the first refused one (and up to the
/// limit), and how many there are.
private struct ChangesForm {
    var isArray = true
    var count = 0
    var changes: [BatchChange] = []
    var firstRefusal: Refusal?

    static func read(from reader: inout JSONReader, limits: WireLimits) throws(ValueError) -> ChangesForm {
        var form = ChangesForm()
        guard try reader.beginArray() else {
            _ = try reader.readValue()
            form.isArray = false
            return form
        }
        while try reader.nextElement() {
            if form.firstRefusal == nil, form.count < limits.maximumChanges {
                let change = try ChangeForm.read(from: &reader)
                do {
                    form.changes.append(try change.change(at: form.count))
                } catch {
                    form.firstRefusal = error
                }
            } else {
                // An earlier refusal or the limit decides; the rest only has to be JSON.
                _ = try reader.readValue()
            }
            form.count += 1
        }
        return form
    }
}

/// One change of a push body as read.
private struct ChangeForm {
    private var isObject = true
    private var unknownKeys = JSONReader.UnknownKeys()
    private var hasVersion = false
    private var hasOwner = false
    private var collection: Value?
    private var id: Value?
    private var writes: Value?
    private var strategy: Value?
    private var group: Value?
    private var delta: DocumentDelta.ReadOutcome?

    static func read(from reader: inout JSONReader) throws(ValueError) -> ChangeForm {
        var form = ChangeForm()
        guard try reader.beginObject() else {
            _ = try reader.readValue()
            form.isObject = false
            return form
        }
        while let key = try reader.nextKey() {
            let isNew: Bool
            switch key {
            case "collection": isNew = store(try reader.readValue(), in: &form.collection)
            case "id": isNew = store(try reader.readValue(), in: &form.id)
            case "writes": isNew = store(try reader.readValue(), in: &form.writes)
            case "strategy": isNew = store(try reader.readValue(), in: &form.strategy)
            case "group": isNew = store(try reader.readValue(), in: &form.group)
            case "delta": isNew = store(try DocumentDelta.read(from: &reader), in: &form.delta)
            case "version", "owner":
                _ = try reader.readValue()
                isNew = form.unknownKeys.insert(key)
                if key == "version" { form.hasVersion = true } else { form.hasOwner = true }
            default:
                _ = try reader.readValue()
                isNew = form.unknownKeys.insert(key)
            }
            guard isNew else { throw reader.makeDuplicateKeyError() }
        }
        return form
    }

    /// The change, its parts checked in the order the tree decoder checked them.
    ///
    /// - Throws: `Refusal` `.invalid` naming what is wrong.
    func change(at index: Int) throws(Refusal) -> BatchChange {
        // Built only for a refusal: most changes have none.
        func context() -> String { "changes[\(index)]" }
        if hasVersion || hasOwner {
            let owned = hasVersion ? "version" : "owner"
            throw Refusal.invalid("\(context()): \(owned) is set by the server; a change may not carry it")
        }
        guard isObject else { throw Refusal.invalid("\(context()) must be a JSON object") }
        if let unknown = unknownKeys.first { throw unknownKeyError(unknown, allowed: PushRequest.changeKeys, in: context()) }
        let key = DocumentKey(
            collection: try string(collection, named: "\(context()).collection"),
            id: try string(id, named: "\(context()).id"))
        do {
            try key.validate()
        } catch {
            throw Refusal(error, context: context())
        }
        var writes = 1
        if let count = self.writes {
            guard case .int(let number) = count, number >= 1, number <= Int64(Int32.max) else {
                throw Refusal.invalid("\(context()).writes must be a positive integer")
            }
            writes = Int(number)
        }
        let strategy = try changeStrategy(self.strategy, in: context)
        let group = try changeGroup(self.group, in: context)
        switch delta {
        case nil: throw Refusal.invalid("\(context()).delta is missing")
        case .notAnObject?: throw Refusal.invalid("\(context()).delta must be a JSON object")
        case .unknownKey(let unknown)?: throw unknownKeyError(unknown, allowed: DocumentDelta.encodedKeys, in: "\(context()).delta")
        case .invalid(let error)?: throw Refusal(error, context: "\(context()) (\(key))")
        case .delta(let delta)?:
            guard !delta.isEmpty else { throw Refusal.invalid("\(context()) (\(key)) changes nothing") }
            return BatchChange(key: key, delta: delta, writes: writes, strategy: strategy, group: group)
        }
    }
}

/// A change's atomic group, when it names one.
///
/// - Throws: `Refusal` `.invalid` for anything but a positive integer.
func changeGroup(_ value: Value?, in context: () -> String) throws(Refusal) -> Int64? {
    guard let value else { return nil }
    guard case .int(let group) = value, group >= 1 else { throw Refusal.invalid("\(context()).group must be a positive integer") }
    return group
}

/// Checks that the changes of each group come together in the batch.
///
/// - Throws: `Refusal` `.invalid` naming the first change of a group that comes again.
func checkGroupsComeTogether(_ changes: [BatchChange]) throws(Refusal) {
    var ended: Set<Int64> = []
    var current: Int64?
    for (index, change) in changes.enumerated() where change.group != current {
        if let current { ended.insert(current) }
        current = change.group
        if let group = change.group, ended.contains(group) {
            throw Refusal.invalid("changes[\(index)]: the changes of group \(group) must come together in the batch")
        }
    }
}

/// A change's own strategy, when it names one.
///
/// - Throws: `Refusal` `.invalid` for a name that is not a strategy.
func changeStrategy(_ value: Value?, in context: () -> String) throws(Refusal) -> ConflictStrategy? {
    guard let value else { return nil }
    guard case .string(let name) = value, let strategy = ConflictStrategy(rawValue: name) else {
        throw Refusal.invalid("\(context()).strategy must be one of serverWins, clientWins, merge, manual")
    }
    return strategy
}
