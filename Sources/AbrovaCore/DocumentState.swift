/// A last-writer-wins register: a leaf value and the version that wrote it.
public struct Register: Hashable, Sendable {
    /// The value, or `nil` for a removed field (a field tombstone).
    public var value: Value?
    /// The version of the write.
    public var version: Version

    /// A register holding `value` (or removed, for `nil`) since `version`.
    public init(value: Value?, version: Version) {
        self.value = value
        self.version = version
    }
}

/// An observed-remove set.
///
/// Each element carries the version of its latest add. A remove with base `b` takes the adds with
/// version `<= b`, so the element survives it exactly when its latest add is newer than `b`: the
/// latest add is all that needs keeping, and the set does not grow with history.
public struct ObservedRemoveSet: Hashable, Sendable {
    /// Element -> version of its latest add.
    public var elements: [Value: Version]
    /// The version of the last change to the set (an add or a remove).
    public var version: Version

    /// A set with these elements (each with its latest add), last changed at `version`.
    public init(elements: [Value: Version] = [:], version: Version) {
        self.elements = elements
        self.version = version
    }

    /// The elements in their canonical order, as apps see them.
    public var sortedElements: [Value] {
        Self.canonicallySorted(elements.keys)
    }
}

/// One field of a document: a register or a set.
public enum Field: Hashable, Sendable {
    case register(Register)
    case set(ObservedRemoveSet)

    /// The version of the field's last change.
    public var version: Version {
        switch self {
        case .register(let register): register.version
        case .set(let set): set.version
        }
    }

    /// Whether the field holds something: a register with a value, or a set (even an empty one).
    public var isLive: Bool {
        switch self {
        case .register(let register): register.value != nil
        case .set: true
        }
    }

    /// What apps see: the register's value, or the set's elements as a sorted array.
    public var value: Value? {
        switch self {
        case .register(let register): register.value
        case .set(let set): .array(set.sortedElements)
        }
    }
}

/// Whether a document exists, and since which version.
public struct Existence: Hashable, Sendable {
    /// Whether the document exists.
    public var exists: Bool
    /// The version of the last create or delete.
    public var version: Version

    /// An existence register.
    public init(exists: Bool, version: Version) {
        self.exists = exists
        self.version = version
    }

    /// A document nobody has written.
    public static let never = Existence(exists: false, version: .zero)
}

/// The CRDT state of one document: its existence register and a field per leaf path.
///
/// A deleted document keeps its fields under the existence tombstone so that an edit that wins over
/// a concurrent delete re-creates it as the editor saw it; `document` hides them.
public struct DocumentState: Hashable, Sendable {
    /// Whether the document exists, and since which version.
    public private(set) var existence: Existence
    /// Field path -> field, tombstones included.
    public private(set) var fields: [FieldPath: Field]
    /// The highest version anywhere in the state: the base a client uses for its next change.
    public private(set) var version: Version
    /// Every strict prefix of a stored path but the root (paths are never taken out, so this only
    /// grows), so that "is anything stored under P?" is a lookup, not a scan, for documents without
    /// nesting. Empty for a flat document: its fields are put in without touching it.
    private var interiorPaths: Set<FieldPath>
    /// The size of the live fields: the UTF-8 bytes of each live path and its canonical value.
    /// This is what `ValueLimits.maximumDocumentBytes` limits.
    public private(set) var byteSize: Int

    /// The state of a document nobody has written.
    public init() {
        existence = .never
        fields = [:]
        version = .zero
        interiorPaths = []
        byteSize = 0
    }

    /// Makes a state from its parts, as read back from storage or the wire.
    public init(existence: Existence, fields: [FieldPath: Field]) {
        self.init()
        self.existence = existence
        version = existence.version
        // The dictionary is taken as it is (its keys are distinct); only the bookkeeping is made.
        self.fields = fields
        for (path, field) in fields { noteAdded(field, at: path) }
    }

    /// Whether no stored path has a prefix other than the root: every field is top-level.
    var isFlat: Bool { interiorPaths.isEmpty }

    /// The document as apps see it: nested maps of the live fields, or `nil` when it does not exist.
    public var document: Value? {
        guard existence.exists else { return nil }
        if isFlat {
            // Nothing nests: every live field is top-level.
            var entries: [String: Value] = [:]
            entries.reserveCapacity(fields.count)
            for (path, field) in fields where field.isLive { entries[path.dotted] = field.value }
            return .map(entries)
        }
        return liveValue(within: .root) ?? .map([:])
    }

    /// A new document made by `delta` with distinct top-level fields, the common create: what
    /// `applyLocally` gives on a pristine state, without looking for what each write replaces.
    /// `nil` for any other change.
    init?(creating delta: DocumentDelta, at version: Version) {
        guard delta.create != nil, delta.increments.isEmpty, !delta.assignments.keys.contains(where: \.isNested),
            !delta.setChanges.keys.contains(where: { $0.isNested || delta.assignments[$0] != nil })
        else { return nil }
        self.init()
        fields.reserveCapacity(delta.assignments.count + delta.setChanges.count)
        existence = Existence(exists: delta.delete == nil, version: version)
        self.version = version
        for (path, assignment) in delta.assignments {
            store(.register(Register(value: assignment.value, version: version)), at: path)
        }
        for (path, change) in delta.setChanges {
            let elements = Dictionary(uniqueKeysWithValues: change.adds.map { ($0, version) })
            store(.set(ObservedRemoveSet(elements: elements, version: version)), at: path)
        }
    }

    /// Whether the document exists.
    public var exists: Bool { existence.exists }

    /// Whether nobody has written the document: no fields, not even tombstones.
    public var isPristine: Bool { existence == .never && fields.isEmpty }

    /// Whether `delta` meets no write it has not seen: nothing here is newer than its earliest base.
    /// Its join is then the same under every strategy, without conflicts, so the client can compute
    /// the server's result from its own confirmed state (Spec/protocol.md, push answers).
    public func isUncontested(by delta: DocumentDelta) -> Bool { version <= delta.earliestBase }

    /// The field stored at exactly `path`.
    public subscript(path: FieldPath) -> Field? { fields[path] }

    /// The live value at `path` as apps would see it (a subtree is shown as a map), or `nil`.
    public func liveValue(within path: FieldPath) -> Value? {
        let live = livePaths(within: path)
        if live.isEmpty { return nil }
        if live == [path] { return fields[path]?.value }
        // Older first, so that where a broken state holds overlapping leaves the newer one shows.
        let ordered = live.compactMap { livePath in fields[livePath].map { (livePath, $0) } }
            .sorted { ($0.1.version, $0.0) < ($1.1.version, $1.0) }
        let depth = path.depth
        var result = Value.map([:])
        for (fieldPath, field) in ordered {
            guard let value = field.value else { continue }
            let relative = fieldPath.segments.dropFirst(depth).map(String.init)
            if relative.isEmpty { result = value } else { Self.insert(value, at: relative[...], into: &result) }
        }
        return result
    }

    private static func insert(_ value: Value, at path: ArraySlice<String>, into target: inout Value) {
        guard let key = path.first else { return }
        var entries = target.mapValue ?? [:]
        if path.count == 1 {
            entries[key] = value
        } else {
            var child = entries[key] ?? .map([:])
            if child.mapValue == nil { child = .map([:]) }
            insert(value, at: path.dropFirst(), into: &child)
            entries[key] = child
        }
        target = .map(entries)
    }

    // Equality is about content: the bookkeeping (interior paths) may differ between equal states.
    public static func == (left: DocumentState, right: DocumentState) -> Bool {
        left.existence == right.existence && left.fields == right.fields
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(existence)
        hasher.combine(fields)
    }

    // MARK: Writes. Each takes the version it writes at; none checks conflicts (`apply` does).

    /// Puts `field` at `path`, keeping the bookkeeping true.
    mutating func store(_ field: Field, at path: FieldPath) {
        if let old = fields.updateValue(field, forKey: path) {
            byteSize -= Self.byteSize(of: old, at: path)
            byteSize += Self.byteSize(of: field, at: path)
            if field.version > version { version = field.version }
        } else {
            noteAdded(field, at: path)
        }
    }

    /// Keeps the bookkeeping true for a field just put at a path that held none.
    private mutating func noteAdded(_ field: Field, at path: FieldPath) {
        var prefix = path
        while let parent = prefix.parent, !parent.isRoot {
            if !interiorPaths.insert(parent).inserted { break }
            prefix = parent
        }
        byteSize += Self.byteSize(of: field, at: path)
        if field.version > version { version = field.version }
    }

    private static func byteSize(of field: Field, at path: FieldPath) -> Int {
        switch field {
        case .register(let register):
            guard let value = register.value else { return 0 }
            return path.dotted.utf8.count + value.canonicalByteCount
        case .set(let set):
            // As the array apps see: brackets, elements, commas (the order does not change the size).
            let elements = set.elements.keys.reduce(0) { $0 + $1.canonicalByteCount }
            return path.dotted.utf8.count + 2 + elements + max(set.elements.count - 1, 0)
        }
    }

    /// Puts back a field as it was in an earlier state (`nil`: there was none), undoing a write.
    /// Call `restoreVersion(_:)` after undoing.
    mutating func restore(_ path: FieldPath, to field: Field?) {
        if let field {
            store(field, at: path)
        } else if let old = fields.removeValue(forKey: path) {
            byteSize -= Self.byteSize(of: old, at: path)
        }
    }

    /// Puts back an earlier existence register. Call `restoreVersion(_:)` after undoing.
    mutating func restore(_ existence: Existence) {
        self.existence = existence
    }

    /// Sets `version` after writes were undone: the caller knows the highest version left.
    mutating func restoreVersion(_ version: Version) {
        self.version = version
    }

    /// Sets whether the document exists.
    mutating func setExistence(_ exists: Bool, at version: Version) {
        existence = Existence(exists: exists, version: version)
        if version > self.version { self.version = version }
    }

    /// This state with its existence set.
    func settingExistence(_ exists: Bool, at version: Version) -> DocumentState {
        var result = self
        result.setExistence(exists, at: version)
        return result
    }

    /// Paths of the live fields that lie within `path` (the field at `path` itself included).
    func livePaths(within path: FieldPath) -> [FieldPath] {
        var result: [FieldPath] = []
        if let field = fields[path], field.isLive { result.append(path) }
        if path.isRoot || interiorPaths.contains(path) {
            for (candidate, field) in fields where field.isLive && candidate != path && candidate.isWithin(path) {
                result.append(candidate)
            }
        }
        return result
    }

    /// Calls `body` with the path of each live field that writing `path` would replace: at `path`,
    /// at a strict prefix of it or within it.
    func forEachLivePath(overlapping path: FieldPath, _ body: (FieldPath) -> Void) {
        if let field = fields[path], field.isLive { body(path) }
        if path.isRoot || interiorPaths.contains(path) {
            for (candidate, field) in fields where field.isLive && candidate != path && candidate.isWithin(path) { body(candidate) }
        }
        var prefix = path
        while let parent = prefix.parent, !parent.isRoot {
            if let field = fields[parent], field.isLive { body(parent) }
            prefix = parent
        }
    }

    /// Removes the field at `path` (leaving a tombstone).
    mutating func remove(_ path: FieldPath, at version: Version) {
        store(.register(Register(value: nil, version: version)), at: path)
    }

    /// Removes every live field within `path`.
    mutating func removeSubtree(_ path: FieldPath, at version: Version) {
        for live in livePaths(within: path) { remove(live, at: version) }
    }

    /// Assigns a leaf value, removing whatever it replaces.
    mutating func assign(_ value: Value, at path: FieldPath, version: Version) {
        // In a flat document, a top-level field replaces nothing but itself.
        if !isFlat || path.isRoot || path.isNested { removeLiveFields(replacedBy: path, at: version) }
        store(.register(Register(value: value, version: version)), at: path)
    }

    /// Removes the live fields a write at `path` replaces besides its own: those at a strict
    /// prefix of it and those strictly within it (`forEachLivePath(overlapping:)` but `path`,
    /// found without gathering them when there are none, the common case).
    private mutating func removeLiveFields(replacedBy path: FieldPath, at version: Version) {
        var prefix = path
        while let parent = prefix.parent, !parent.isRoot {
            if fields[parent]?.isLive == true { remove(parent, at: version) }
            prefix = parent
        }
        guard path.isRoot || interiorPaths.contains(path) else { return }
        let within = fields.compactMap { candidate, field in
            field.isLive && candidate != path && candidate.isWithin(path) ? candidate : nil
        }
        for live in within { remove(live, at: version) }
    }

    /// Whether a write at `path` replaces a live field besides its own (see `removeLiveFields`).
    func replacesLiveFields(_ path: FieldPath) -> Bool {
        var prefix = path
        while let parent = prefix.parent, !parent.isRoot {
            if fields[parent]?.isLive == true { return true }
            prefix = parent
        }
        guard path.isRoot || interiorPaths.contains(path) else { return false }
        return fields.contains { candidate, field in field.isLive && candidate != path && candidate.isWithin(path) }
    }

    /// Adds and removes set elements at `path`; a path that holds no set gets a new one.
    /// Returns whether the set changed.
    @discardableResult
    mutating func changeSet(
        at path: FieldPath, adding adds: Set<Value>, removing removes: Set<Value>,
        version: Version, removeIf shouldRemove: (Version) -> Bool = { _ in true }
    ) -> Bool {
        if let index = fields.index(forKey: path), case .set = fields.values[index], !replacesLiveFields(path) {
            // Changed in place, in proportion to the change: the set is taken out of its field while
            // it changes (so that its elements are not copied), and the size is adjusted by the
            // elements that come and go rather than measured again.
            var sizeChange = 0
            let changed = Self.changeInPlace(&fields.values[index]) { set in
                let countBefore = set.elements.count
                var changed = false
                for element in removes {
                    if let added = set.elements[element], shouldRemove(added) {
                        set.elements[element] = nil
                        sizeChange -= element.canonicalByteCount
                        changed = true
                    }
                }
                for element in adds {
                    if set.elements.updateValue(version, forKey: element) == nil { sizeChange += element.canonicalByteCount }
                    changed = true
                }
                if changed {
                    set.version = version
                    sizeChange += max(set.elements.count - 1, 0) - max(countBefore - 1, 0) // the commas
                }
                return changed
            }
            guard changed else { return false }
            byteSize += sizeChange
            if version > self.version { self.version = version }
            return true
        }
        removeLiveFields(replacedBy: path, at: version)
        store(
            .set(
                ObservedRemoveSet(
                    elements: Dictionary(uniqueKeysWithValues: adds.map { ($0, version) }),
                    version: version)), at: path)
        return true
    }

    /// Runs `body` on the set a field holds, with the field's reference to it released meanwhile,
    /// so that the set is changed in place.
    private static func changeInPlace(_ field: inout Field, _ body: (inout ObservedRemoveSet) -> Bool) -> Bool {
        guard case .set(var set) = field else { return false }
        field = .register(Register(value: nil, version: .zero))
        defer { field = .set(set) }
        return body(&set)
    }

    // MARK: Join

    /// Folds `other` into this state: per field (and for existence) the newer entry wins.
    ///
    /// Both states are snapshots (or delta-states) of one server's history, so the newer entry is
    /// the later write. Equal versions with different contents, which a server never produces, are
    /// ordered by their canonical encoding, so the join is commutative, associative and idempotent.
    public mutating func merge(_ other: DocumentState) {
        if existence == .never && fields.isEmpty {
            self = other // joining into nothing gives the other state (a pulled document seen first)
            return
        }
        if Self.precedes(existence, other.existence) { setExistence(other.existence.exists, at: other.existence.version) }
        for (path, field) in other.fields {
            if let mine = fields[path], !Self.precedes(mine, field) { continue }
            store(field, at: path)
        }
    }

    /// The join of this state and `other`.
    public func merging(_ other: DocumentState) -> DocumentState {
        var result = self
        result.merge(other)
        return result
    }

    private static func precedes(_ left: Existence, _ right: Existence) -> Bool {
        left.version != right.version ? left.version < right.version : (!left.exists && right.exists)
    }

    private static func precedes(_ left: Field, _ right: Field) -> Bool {
        if left.version != right.version { return left.version < right.version }
        if left == right { return false }
        return Value.canonicalOrder(left.canonicalKey, right.canonicalKey)
    }

    /// Checks the invariants tests rely on; returns what is wrong, or nothing.
    package func invariantViolations() -> [String] {
        var problems: [String] = []
        let highest = fields.values.map(\.version).reduce(existence.version, max)
        if highest != version { problems.append("version \(version) is not the highest version \(highest)") }
        let size = fields.reduce(0) { $0 + Self.byteSize(of: $1.value, at: $1.key) }
        if size != byteSize { problems.append("byteSize \(byteSize) is not \(size)") }
        for path in fields.keys {
            var prefix = path
            while let parent = prefix.parent, !parent.isRoot {
                if !interiorPaths.contains(parent) { problems.append("missing interior path \(parent)") }
                prefix = parent
            }
        }
        return problems
    }
}

extension Field {
    /// A canonical encoding, used to order fields with equal versions.
    var canonicalKey: String {
        switch self {
        case .register(let register):
            return "r" + register.version.description + ":" + (register.value?.canonicalJSON ?? "-")
        case .set(let set):
            let elements = set.elements.map { $0.key.canonicalJSON + "@" + $0.value.description }.sorted(by: Value.canonicalOrder)
            return "s" + set.version.description + ":" + elements.joined(separator: ",")
        }
    }
}

extension FieldPath {
    /// The path one level up; `nil` for the root. The parent of a top-level field is the root.
    var parent: FieldPath? {
        guard !isRoot else { return nil }
        guard let dot = dotted.utf8.lastIndex(of: UInt8(ascii: ".")) else { return .root }
        return FieldPath(unchecked: String(dotted[..<dot]))
    }
}
