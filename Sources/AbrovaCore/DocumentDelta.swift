/// A client's unsent change to one document: what it did, and the base version of each part.
///
/// The parts apply in a fixed order: `create` (or `createIfMissing`), `removals`, `fieldRemovals`,
/// `assignments`, `setChanges`, `increments`, `delete`.
/// A base is the document version the client had seen when it first touched that part; the server
/// counts a field as "changed on the server" when its version is newer than the base.
/// See Spec/conflicts.md.
public struct DocumentDelta: Hashable, Sendable {
    /// A leaf value to assign.
    public struct Assignment: Hashable, Sendable {
        /// The value assigned; for a server timestamp, the device's estimate of it.
        public var value: Value
        /// The document version the client had seen when it first touched this path.
        public var base: Version
        /// Whether the server writes its own time here when it applies the change
        /// (`FieldValue.serverTimestamp()`); `value` is then a timestamp the device shows meanwhile.
        public var isServerTimestamp: Bool

        /// An assignment of `value` based on `base`.
        public init(value: Value, base: Version, isServerTimestamp: Bool = false) {
            self.value = value
            self.base = base
            self.isServerTimestamp = isServerTimestamp
        }
    }

    /// Set operations on one set field. `adds` and `removes` never share an element.
    public struct SetChange: Hashable, Sendable {
        /// Elements added.
        public var adds: Set<Value>
        /// Elements removed (only the adds the client had observed).
        public var removes: Set<Value>
        /// The document version the client had seen when it first touched this set.
        public var base: Version

        /// Set operations based on `base`; an element in both is only added.
        public init(adds: Set<Value> = [], removes: Set<Value> = [], base: Version) {
            self.adds = adds
            self.removes = removes.subtracting(adds)
            self.base = base
        }

        /// Folds `later`'s operations on the same set into these, with the composed change's `base`.
        mutating func compose(with later: SetChange, base: Version) {
            adds.subtract(later.removes)
            adds.formUnion(later.adds)
            removes.subtract(later.adds)
            removes.formUnion(later.removes)
            self.base = base
        }
    }

    /// When set, the document is (re)created with no fields (every field is removed) first.
    public var create: Version?
    /// When set, a document that does not exist where the change is applied is first created
    /// with no fields, as `create` does; one that exists is left as it is (`setData(_:merge:)`,
    /// written by a device that has not seen the document). Never set beside `create`.
    public var createIfMissing: Version?
    /// Paths removed with everything under them.
    public internal(set) var removals: [FieldPath: Version]
    /// Fields removed at exactly their path; what lies under them stays. Composition leaves these
    /// behind for the prefixes of a write it takes away, which that write had replaced.
    public internal(set) var fieldRemovals: [FieldPath: Version]
    /// Leaf values assigned.
    public internal(set) var assignments: [FieldPath: Assignment]
    /// Set operations.
    public internal(set) var setChanges: [FieldPath: SetChange]
    /// Counter increments (`FieldValue.increment`): each adds its amount to the number the field
    /// holds where the change is applied. See `Increment`.
    public internal(set) var increments: [FieldPath: Increment]
    /// When set, the document is deleted last.
    public var delete: Version?
    /// At least the depth of every path here (more once deeper paths are taken out); every write
    /// of a path raises it. Two paths overlap only when one is a prefix of the other, so compose
    /// looks up a path's prefixes, and scans for paths under it only when some path is deeper.
    var deepestPath = 0

    /// Whether a path with a separator may be here.
    var hasNestedPaths: Bool { deepestPath > 1 }
    /// The proper prefixes of the paths here, and maybe more: kept by compose once it needed them
    /// (a path with paths under it here is one), `nil` before, and after parts were written
    /// directly. A change composed again and again (a batch's) then never scans its paths.
    private var prefixesOfPaths: Set<FieldPath>?

    /// Checks that no two writes (assignments, set changes, increments) touch one place: a path
    /// and a path under it, or a path both changed as a set and assigned or incremented. Applied in any order they would
    /// then give different documents on different replicas. The SDK's deltas never do (compose
    /// retires what a later write covers); a hand-made one is refused.
    ///
    /// - Throws: `ValueError` `malformedJSON` naming the two paths (of several, the smallest path
    ///   both assigned and changed as a set, else the smallest path under another).
    func checkWritesDoNotOverlap() throws(ValueError) {
        func refuse(_ path: FieldPath, _ other: FieldPath) -> ValueError {
            ValueError(
                .malformedJSON, field: path.dotted,
                detail: "the change writes both \"\(other.dotted)\" and \"\(path.dotted)\"; a change writes each place once")
        }
        // The smallest, not the first the dictionary's order (which varies from run to run) meets.
        var assignedAndChanged: FieldPath?
        for path in setChanges.keys
        where (assignments[path] != nil || increments[path] != nil) && assignedAndChanged.map({ path < $0 }) ?? true {
            assignedAndChanged = path
        }
        if let assignedAndChanged { throw refuse(assignedAndChanged, assignedAndChanged) }
        guard hasNestedPaths else { return } // distinct top-level paths never overlap
        // An assignment and an increment of one path are one write: the increment adds to the value.
        var written = Set(assignments.keys)
        written.formUnion(setChanges.keys)
        written.formUnion(increments.keys)
        for path in written.sorted() {
            var prefix = path
            while let parent = prefix.parent, !parent.isRoot {
                if written.contains(parent) { throw refuse(path, parent) }
                prefix = parent
            }
        }
    }

    /// Sets `deepestPath` from the parts, after they were written directly.
    mutating func notePathDepths() {
        prefixesOfPaths = nil
        deepestPath = 0
        for path in removals.keys { deepestPath = max(deepestPath, path.depth) }
        for path in fieldRemovals.keys { deepestPath = max(deepestPath, path.depth) }
        for path in assignments.keys { deepestPath = max(deepestPath, path.depth) }
        for path in setChanges.keys { deepestPath = max(deepestPath, path.depth) }
        for path in increments.keys { deepestPath = max(deepestPath, path.depth) }
    }

    // Equality is about the parts: `deepestPath` is bookkeeping.
    public static func == (left: DocumentDelta, right: DocumentDelta) -> Bool {
        left.create == right.create && left.createIfMissing == right.createIfMissing && left.delete == right.delete
            && left.removals == right.removals
            && left.fieldRemovals == right.fieldRemovals && left.assignments == right.assignments
            && left.setChanges == right.setChanges && left.increments == right.increments
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(create)
        hasher.combine(createIfMissing)
        hasher.combine(delete)
        hasher.combine(removals)
        hasher.combine(fieldRemovals)
        hasher.combine(assignments)
        hasher.combine(setChanges)
        hasher.combine(increments)
    }

    /// A change that does nothing.
    public init() {
        removals = [:]
        fieldRemovals = [:]
        assignments = [:]
        setChanges = [:]
        increments = [:]
    }

    /// Whether the change does nothing at all.
    public var isEmpty: Bool {
        create == nil && createIfMissing == nil && delete == nil && !hasFieldParts
    }

    /// Whether the change touches fields (or creates the document), as opposed to only deleting it.
    public var hasEdits: Bool {
        create != nil || createIfMissing != nil || hasFieldParts
    }

    private var hasFieldParts: Bool {
        !removals.isEmpty || !fieldRemovals.isEmpty || !assignments.isEmpty || !setChanges.isEmpty || !increments.isEmpty
    }

    /// The earliest base of any part (`Version.zero` for an empty change).
    public var earliestBase: Version {
        var earliest = earliestFieldBase
        if let create { earliest = min(earliest ?? create, create) }
        if let createIfMissing { earliest = min(earliest ?? createIfMissing, createIfMissing) }
        if let delete { earliest = min(earliest ?? delete, delete) }
        return earliest ?? .zero
    }

    /// The latest base of any part (`Version.zero` for an empty change).
    public var latestBase: Version {
        var latest = create ?? .zero
        if let createIfMissing { latest = max(latest, createIfMissing) }
        if let delete { latest = max(latest, delete) }
        for base in removals.values { latest = max(latest, base) }
        for base in fieldRemovals.values { latest = max(latest, base) }
        for assignment in assignments.values { latest = max(latest, assignment.base) }
        for change in setChanges.values { latest = max(latest, change.base) }
        for increment in increments.values { latest = max(latest, increment.base) }
        return latest
    }

    /// The earliest base of the field parts, or `nil` when there are none. (Asked for every pushed
    /// change, so it makes no arrays.)
    var earliestFieldBase: Version? {
        var earliest: Version?
        func consider(_ base: Version) { earliest = min(earliest ?? base, base) }
        for base in removals.values { consider(base) }
        for base in fieldRemovals.values { consider(base) }
        for assignment in assignments.values { consider(assignment.base) }
        for change in setChanges.values { consider(change.base) }
        for increment in increments.values { consider(increment.base) }
        return earliest
    }

    // MARK: Building deltas from an app's calls

    /// `setData` / `add(data:)`: the document with exactly these fields.
    ///
    /// - Throws: `ValueError` naming the field when a value cannot be stored.
    public static func create(_ data: [String: Value], base: Version) throws(ValueError) -> DocumentDelta {
        var delta = DocumentDelta()
        delta.create = base
        try delta.assignLeaves(of: data, base: base)
        return delta
    }

    /// Assigns every leaf of `data`, each at its path. Leaves of distinct top-level names never
    /// overlap, so they go straight in (composing them one by one would cost time quadratic in
    /// their number); only for a change with nothing else written yet.
    private mutating func assignLeaves(of data: [String: Value], base: Version) throws(ValueError) {
        for (key, value) in data {
            let path = try FieldPath(segments: [key])
            try value.validate(at: path, depth: 1)
            for (leafPath, leaf) in value.leaves(at: path) {
                assignments[leafPath] = Assignment(value: leaf, base: base)
                deepestPath = max(deepestPath, leafPath.depth)
            }
        }
    }

    /// `setData(_:merge: true)`: each leaf of `data` is assigned at its path (a map is merged into
    /// what is there, not replaced); the other fields stay. `documentExists` is whether the
    /// writer's view holds the document: when it does not, the change also creates the document
    /// where it is missing (`createIfMissing`), and leaves it as it is where it exists.
    ///
    /// - Throws: `ValueError` naming the field when a value cannot be stored.
    public static func setMerging(_ data: [String: Value], base: Version, documentExists: Bool) throws(ValueError) -> DocumentDelta {
        var delta = DocumentDelta()
        if !documentExists { delta.createIfMissing = base }
        try delta.assignLeaves(of: data, base: base)
        return delta
    }

    /// `setData(_:merge: true)` as a device makes it from its `view` of the document and whether
    /// a change of its own to the document is still unsent: merged into the document it shows;
    /// where it shows none and nothing of its own is pending there, also creating it where it is
    /// missing, which the server decides (another device may have created it); where its own
    /// pending change removed or hid it, a create. So a `createIfMissing` only ever starts a
    /// device's change to a document, and composing keeps it exact.
    ///
    /// - Throws: `ValueError` naming the field when a value cannot be stored.
    public static func setMerging(
        _ data: [String: Value], base: Version, view: DocumentState, hasPendingChange: Bool
    ) throws(ValueError) -> DocumentDelta {
        if view.exists || !hasPendingChange {
            return try setMerging(data, base: base, documentExists: view.exists)
        }
        return try create(data, base: base)
    }

    /// Whether the server writes its time somewhere in this change.
    public var hasServerTimestamps: Bool { assignments.values.contains(where: \.isServerTimestamp) }

    /// Marks the timestamps assigned at `paths` (the device's estimates) for the server to write
    /// its own time over. A path not assigned a timestamp here is left as it is.
    public mutating func markServerTimestamps(_ paths: some Sequence<FieldPath>) {
        for path in paths {
            guard let assignment = assignments[path], case .timestamp = assignment.value else { continue }
            assignments[path]?.isServerTimestamp = true
        }
    }

    /// This change with `now` written at every server timestamp, as the server applies it (still
    /// marked: the answer must carry the state, since the client holds its estimates).
    public func stampingServerTimestamps(with now: Timestamp) -> DocumentDelta {
        guard hasServerTimestamps else { return self }
        var result = self
        for (path, assignment) in assignments where assignment.isServerTimestamp {
            result.assignments[path]?.value = .timestamp(now)
        }
        return result
    }

    /// This change as it acts on a document that exists (`documentExists`) or not: without its
    /// `createIfMissing`, which is nothing where the document exists and a `create` where it does
    /// not.
    public func resolvingCreateIfMissing(documentExists: Bool) -> DocumentDelta {
        guard let base = createIfMissing else { return self }
        var result = self
        result.createIfMissing = nil
        if !documentExists { result.create = base }
        return result
    }

    /// `updateData`: assigns paths (a map replaces the subtree), removes paths, adds to and removes
    /// from sets. Parts apply in the order removals, assignments, set adds, set removes; within a
    /// part, in the order of the paths (`removals` as given), so a path comes before the paths
    /// under it, which then write over it: `set: ["a": ["x": 1], "a.y": 2]` leaves `a.x` and `a.y`.
    ///
    /// - Throws: `ValueError` naming the field when a path or value cannot be stored.
    ///
    /// `serverTimestamps` are assigned as the other values (a timestamp each, the device's
    /// estimate), and marked for the server to write its own time over (a path in both takes the
    /// server's time). `increments` (amounts, `.int` or `.double`) come last.
    public static func update(
        set assignments: [FieldPath: Value] = [:], remove removals: [FieldPath] = [],
        setAdd: [FieldPath: [Value]] = [:], setRemove: [FieldPath: [Value]] = [:],
        serverTimestamps: [FieldPath: Timestamp] = [:], increments: [FieldPath: Value] = [:],
        base: Version
    ) throws(ValueError) -> DocumentDelta {
        guard increments.isEmpty else {
            var delta = try update(
                set: assignments, remove: removals, setAdd: setAdd, setRemove: setRemove, serverTimestamps: serverTimestamps, base: base)
            try delta.increment(increments, base: base)
            return delta
        }
        guard serverTimestamps.isEmpty else {
            var values = assignments
            for (path, estimate) in serverTimestamps { values[path] = .timestamp(estimate) }
            var delta = try update(set: values, remove: removals, setAdd: setAdd, setRemove: setRemove, base: base)
            delta.markServerTimestamps(serverTimestamps.keys)
            return delta
        }
        var delta = DocumentDelta()
        // The commonest write, one leaf assigned, needs no ordering and no composing.
        if assignments.count == 1, removals.isEmpty, setAdd.isEmpty, setRemove.isEmpty, let (path, value) = assignments.first,
            Self.isLeaf(value)
        {
            try delta.assignLeaf(value, at: path, base: base)
            return delta
        }
        // The dictionaries are walked in path order: theirs varies from run to run (and between
        // equal dictionaries), and overlapping paths give different deltas in different orders.
        let assignments = Self.inPathOrder(assignments)
        // The common call, leaves at paths that do not overlap, needs no composing.
        if removals.isEmpty, setAdd.isEmpty, setRemove.isEmpty, Self.areSeparateLeaves(assignments) {
            for (path, value) in assignments { try delta.assignLeaf(value, at: path, base: base) }
            return delta
        }
        for path in removals {
            try path.checkNotRoot()
            delta.compose(with: DocumentDelta(removals: [path: base]))
        }
        for (path, value) in assignments {
            var part = DocumentDelta()
            try part.assign(value, at: path, base: base)
            delta.compose(with: part)
        }
        for (path, elements) in setAdd.sorted(by: { $0.key < $1.key }) {
            try path.checkNotRoot()
            for element in elements { try element.validate(at: path, depth: path.depth + 1) }
            delta.compose(with: DocumentDelta(setChanges: [path: SetChange(adds: Set(elements), base: base)]))
        }
        for (path, elements) in setRemove.sorted(by: { $0.key < $1.key }) {
            try path.checkNotRoot()
            for element in elements { try element.validate(at: path, depth: path.depth + 1) }
            delta.compose(with: DocumentDelta(setChanges: [path: SetChange(removes: Set(elements), base: base)]))
        }
        return delta
    }

    /// Assigns `value` at `path` as one leaf, in a change that touches no path overlapping it.
    private mutating func assignLeaf(_ value: Value, at path: FieldPath, base: Version) throws(ValueError) {
        try path.checkNotRoot()
        try value.validate(at: path, depth: path.depth)
        assignments[path] = Assignment(value: value, base: base)
        deepestPath = max(deepestPath, path.depth)
    }

    /// Whether `value` is assigned as one leaf: anything but a non-empty map.
    private static func isLeaf(_ value: Value) -> Bool {
        if case .map(let entries) = value, !entries.isEmpty { false } else { true }
    }

    /// Whether every value is a leaf (not a non-empty map) and no two paths overlap.
    private static func areSeparateLeaves(_ assignments: [(key: FieldPath, value: Value)]) -> Bool {
        guard assignments.count <= 8 else { return false }
        for (path, value) in assignments {
            if !isLeaf(value) { return false }
            if assignments.contains(where: { $0.key != path && $0.key.overlaps(path) }) { return false }
        }
        return true
    }

    /// `delete`.
    public static func delete(base: Version) -> DocumentDelta {
        var delta = DocumentDelta()
        delta.delete = base
        return delta
    }

    init(
        removals: [FieldPath: Version] = [:], assignments: [FieldPath: Assignment] = [:],
        setChanges: [FieldPath: SetChange] = [:], increments: [FieldPath: Increment] = [:]
    ) {
        self.removals = removals
        fieldRemovals = [:]
        self.assignments = assignments
        self.setChanges = setChanges
        self.increments = increments
        notePathDepths()
    }

    /// Assigns `value` at `path`: a non-empty map becomes a removal of the path and its leaves.
    private mutating func assign(_ value: Value, at path: FieldPath, base: Version) throws(ValueError) {
        try path.checkNotRoot()
        try value.validate(at: path, depth: path.depth)
        if case .map(let entries) = value, !entries.isEmpty {
            var part = DocumentDelta(removals: [path: base])
            for (leafPath, leaf) in value.leaves(at: path) {
                part.assignments[leafPath] = Assignment(value: leaf, base: base)
            }
            part.notePathDepths() // the leaves of a map lie under its path
            compose(with: part)
        } else {
            compose(with: DocumentDelta(assignments: [path: Assignment(value: value, base: base)]))
        }
    }

    // MARK: Composition

    /// Coalesces two changes of one document into one. See `compose(with:)`.
    public static func compose(_ earlier: DocumentDelta, _ later: DocumentDelta) -> DocumentDelta {
        var result = earlier
        result.compose(with: later)
        return result
    }

    /// Folds a later change into this one.
    ///
    /// Applied on a device the result equals applying both in order. Each path keeps the earliest
    /// base with which it was touched, and a part the later change overwrites stays behind as a
    /// removal with its own base, so the server still sees every conflict either change would have.
    /// The later change's paths are taken in path order within each part: one taken first can pass
    /// its base on to an overlapping one.
    public mutating func compose(with later: DocumentDelta) {
        var later = later
        if let base = later.createIfMissing {
            // After a create the document exists: the later one changes nothing. After a delete it
            // does not: the later one is a create. After edits alone, the earliest one stays.
            later.createIfMissing = nil
            if delete != nil {
                later.create = base
            } else if create == nil {
                createIfMissing = min(createIfMissing ?? base, base)
            }
        }
        deepestPath = max(deepestPath, later.deepestPath)
        if hasNestedPaths { notePrefixes(of: later) }
        if let createBase = later.create {
            let bases = [createBase, create, createIfMissing, delete].compactMap { $0 }
            createIfMissing = nil
            retire { _ in true }
            create = bases.min()
            delete = nil
        }
        Self.forEach(inPathOrder: later.removals) { path, base in
            let base = min(base, earliestBase(touching: path) ?? base)
            retire(overlapping: path, onlyWithin: true)
            removals[path] = base
        }
        Self.forEach(inPathOrder: later.fieldRemovals) { path, base in
            let base = min(base, earliestBase(touching: path) ?? base)
            retire(at: path)
            fieldRemovals[path] = base
        }
        Self.forEach(inPathOrder: later.assignments) { path, assignment in
            let base = min(assignment.base, earliestBase(touching: path) ?? assignment.base)
            // An assignment at the path is overwritten, not retired: its base lives on in `base`.
            retire(overlapping: path, keepingAssignment: true)
            assignments[path] = Assignment(value: assignment.value, base: base, isServerTimestamp: assignment.isServerTimestamp)
        }
        Self.forEach(inPathOrder: later.setChanges) { path, change in
            let base = min(change.base, earliestBase(touching: path) ?? change.base)
            if let index = setChanges.index(forKey: path) {
                // In place: the sets grow with every write composed, and a copy would copy them.
                setChanges.values[index].compose(with: change, base: base)
            } else {
                retire(overlapping: path)
                setChanges[path] = SetChange(adds: change.adds, removes: change.removes, base: base)
            }
        }
        Self.forEach(inPathOrder: later.increments) { path, increment in
            let base = min(increment.base, earliestBase(touching: path) ?? increment.base)
            // An assignment there stays: the increment adds to what it assigns.
            retire(overlapping: path, keepingAssignment: true, keepingIncrement: true)
            // Two increments as one (`canCompose` keeps apart integers that would leave Int64's range).
            let amount = increments[path].map { Value.adding(increment.amount, to: $0.amount) } ?? increment.amount
            increments[path] = Increment(amount: amount, base: base)
        }
        if let deleteBase = later.delete {
            delete = min(delete ?? deleteBase, deleteBase)
        }
    }

    /// The entries in the order of their paths: a dictionary's own order varies from run to run
    /// (and between equal dictionaries).
    private static func inPathOrder<Entry>(_ entries: [FieldPath: Entry]) -> [(key: FieldPath, value: Entry)] {
        entries.count < 2 ? Array(entries) : entries.sorted { $0.key < $1.key }
    }

    /// Calls `body` with the entries in the order of their paths (see `inPathOrder`), making no
    /// array for one entry, a composed write's usual part.
    private static func forEach<Entry>(inPathOrder entries: [FieldPath: Entry], _ body: (FieldPath, Entry) -> Void) {
        if entries.count < 2 {
            for (path, entry) in entries { body(path, entry) }
        } else {
            for (path, entry) in entries.sorted(by: { $0.key < $1.key }) { body(path, entry) }
        }
    }

    /// The earliest base with which this change touches `path` or anything overlapping it (a create
    /// or a delete touches everything): the base a later part at `path` keeps.
    private func earliestBase(touching path: FieldPath) -> Version? {
        var earliest: Version?
        func consider(_ base: Version) { earliest = min(earliest ?? base, base) }
        create.map(consider)
        createIfMissing.map(consider)
        delete.map(consider)
        var prefix = path
        while !prefix.isRoot {
            // A lookup hashes the path even in an empty dictionary.
            if !removals.isEmpty { removals[prefix].map(consider) }
            if !fieldRemovals.isEmpty { fieldRemovals[prefix].map(consider) }
            if !assignments.isEmpty { assignments[prefix].map { consider($0.base) } }
            if !setChanges.isEmpty { setChanges[prefix].map { consider($0.base) } }
            if !increments.isEmpty { increments[prefix].map { consider($0.base) } }
            prefix = prefix.parent ?? .root
        }
        if hasPaths(under: path) {
            for (other, base) in removals where other.isWithin(path) { consider(base) }
            for (other, base) in fieldRemovals where other.isWithin(path) { consider(base) }
            for (other, assignment) in assignments where other.isWithin(path) { consider(assignment.base) }
            for (other, change) in setChanges where other.isWithin(path) { consider(change.base) }
            for (other, increment) in increments where other.isWithin(path) { consider(increment.base) }
        }
        return earliest
    }

    /// Turns the assignments and set changes at matching paths into removals that keep their bases:
    /// on the device they are overwritten anyway; at the server they still probe for conflicts.
    /// A write had also replaced the fields at the prefixes of its path, and the later part that
    /// overwrites it may not: those stay replaced, as field removals.
    private mutating func retire(at path: FieldPath, keepingAssignment: Bool = false, keepingIncrement: Bool = false) {
        if !keepingAssignment, !assignments.isEmpty, let assignment = assignments.removeValue(forKey: path) {
            keepAsRemoval(path, base: assignment.base)
        }
        if !setChanges.isEmpty, let change = setChanges.removeValue(forKey: path) { keepAsRemoval(path, base: change.base) }
        if !keepingIncrement, !increments.isEmpty, let increment = increments.removeValue(forKey: path) {
            keepAsRemoval(path, base: increment.base)
        }
    }

    /// Retires what overlaps `path` (or, with `onlyWithin`, what lies within it); with
    /// `keepingAssignment` (`keepingIncrement`), not an assignment (an increment) at `path` itself.
    private mutating func retire(
        overlapping path: FieldPath, onlyWithin: Bool = false, keepingAssignment: Bool = false, keepingIncrement: Bool = false
    ) {
        retire(at: path, keepingAssignment: keepingAssignment, keepingIncrement: keepingIncrement)
        if !onlyWithin {
            var prefix = path.parent ?? .root
            while !prefix.isRoot {
                retire(at: prefix)
                prefix = prefix.parent ?? .root
            }
        }
        if hasPaths(under: path) { retire { $0 != path && $0.isWithin(path) } }
    }

    /// Whether a path under `path` (not `path` itself) may be here.
    private func hasPaths(under path: FieldPath) -> Bool {
        deepestPath > path.depth && prefixesOfPaths?.contains(path) ?? true
    }

    /// Adds the prefixes of `later`'s paths to `prefixesOfPaths`, first made from this change's own.
    private mutating func notePrefixes(of later: DocumentDelta) {
        var prefixes: Set<FieldPath> = []
        if let kept = prefixesOfPaths {
            prefixes = kept
            prefixesOfPaths = nil // the only copy now: it grows in place
        } else {
            Self.addPrefixes(of: self, to: &prefixes)
        }
        if later.hasNestedPaths { Self.addPrefixes(of: later, to: &prefixes) }
        prefixesOfPaths = prefixes
    }

    private static func addPrefixes(of delta: DocumentDelta, to prefixes: inout Set<FieldPath>) {
        func note(_ path: FieldPath) {
            var prefix = path.parent ?? .root
            while !prefix.isRoot, prefixes.insert(prefix).inserted { prefix = prefix.parent ?? .root }
        }
        for path in delta.removals.keys { note(path) }
        for path in delta.fieldRemovals.keys { note(path) }
        for path in delta.assignments.keys { note(path) }
        for path in delta.setChanges.keys { note(path) }
        for path in delta.increments.keys { note(path) }
    }

    private mutating func retire(where matches: (FieldPath) -> Bool) {
        var retired: [(FieldPath, Version)] = []
        for (path, assignment) in assignments where matches(path) {
            assignments[path] = nil
            retired.append((path, assignment.base))
        }
        for (path, change) in setChanges where matches(path) {
            setChanges[path] = nil
            retired.append((path, change.base))
        }
        for (path, increment) in increments where matches(path) {
            increments[path] = nil
            retired.append((path, increment.base))
        }
        keepAsRemovals(retired)
    }

    private mutating func keepAsRemovals(_ retired: [(FieldPath, Version)]) {
        for (path, base) in retired { keepAsRemoval(path, base: base) }
    }

    private mutating func keepAsRemoval(_ path: FieldPath, base: Version) {
        removals[path] = min(removals[path] ?? base, base)
        var prefix = path
        while let parent = prefix.parent, !parent.isRoot {
            fieldRemovals[parent] = min(fieldRemovals[parent] ?? base, base)
            prefix = parent
        }
    }

    /// Drops removes of set elements that `confirmed` does not hold: under observed-remove semantics
    /// they take nothing, so an add and a remove of one element before sync cancel out. A set change
    /// left with nothing to do is dropped when the set it acts on stays (the change neither creates
    /// the document again nor removes the set first, either of which leaves a new, empty set).
    public func droppingUnobservedRemoves(confirmed: DocumentState) -> DocumentDelta {
        droppingUnobservedRemoves { path in
            guard case .set(let set)? = confirmed[path] else { return nil }
            return { set.elements[$0] != nil }
        }
    }

    /// `droppingUnobservedRemoves(confirmed:)` against the sets a batch's earlier changes left.
    package func droppingUnobservedRemoves(observed: ObservedSets) -> DocumentDelta {
        droppingUnobservedRemoves { path in observed.sets[path].map { set in { set.contains($0) } } }
    }

    /// Prunes against `setAt(path)`: whether the set at a path holds an element, `nil` where no
    /// set is.
    private func droppingUnobservedRemoves(setAt: (FieldPath) -> ((Value) -> Bool)?) -> DocumentDelta {
        var result = self
        for (path, change) in setChanges {
            guard let holds = setAt(path) else { continue }
            // Only a change with something to prune is touched: writing the result's dictionary
            // would copy it.
            guard change.removes.contains(where: { !holds($0) }) || (change.adds.isEmpty && change.removes.isEmpty)
            else { continue }
            var pruned = change
            pruned.removes = change.removes.filter(holds)
            let setStays =
                create == nil && createIfMissing == nil && fieldRemovals[path] == nil && !removals.keys.contains { path.isWithin($0) }
            result.setChanges[path] = pruned.adds.isEmpty && pruned.removes.isEmpty && setStays ? nil : pruned
        }
        return result
    }
}

extension DocumentState {
    /// Applies a change unconditionally, as the device does for its own view: every part takes
    /// effect, written at `version` (the increments too, unless `includingIncrements` is false:
    /// the server's join adds them after it settled the other parts).
    public mutating func applyLocally(_ delta: DocumentDelta, at version: Version, includingIncrements: Bool = true) {
        let delta = delta.resolvingCreateIfMissing(documentExists: exists)
        if delta.create != nil {
            setExistence(true, at: version)
            removeSubtree(.root, at: version)
        }
        for path in delta.removals.keys { removeSubtree(path, at: version) }
        for path in delta.fieldRemovals.keys where fields[path]?.isLive == true { remove(path, at: version) }
        for (path, assignment) in delta.assignments { assign(assignment.value, at: path, version: version) }
        for (path, change) in delta.setChanges {
            changeSet(at: path, adding: change.adds, removing: change.removes, version: version)
        }
        if includingIncrements { applyIncrements(of: delta, at: version) }
        if delta.delete != nil { setExistence(false, at: version) }
    }

    /// Applies the change's increments alone, written at `version`.
    mutating func applyIncrements(of delta: DocumentDelta, at version: Version) {
        guard !delta.increments.isEmpty else { return }
        for (path, increment) in delta.increments.sorted(by: { $0.key < $1.key }) {
            self.increment(path, by: increment.amount, at: version)
        }
    }

    /// This state with a change applied unconditionally. See `applyLocally(_:at:)`.
    public func applyingLocally(_ delta: DocumentDelta, at version: Version, includingIncrements: Bool = true) -> DocumentState {
        var result = self
        result.applyLocally(delta, at: version, includingIncrements: includingIncrements)
        return result
    }
}
