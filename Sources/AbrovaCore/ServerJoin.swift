extension ConflictStrategy {
    /// Joins a client's change into the server's state of a document, as this strategy says.
    ///
    /// Conflicts are judged against `state` as it was before the change; everything applied is
    /// written at `version`, which must be newer than every version in `state`. Under `manual`, a
    /// document with any conflict is left as it was. The work is proportional to what the change
    /// touches, not to the size of the document.
    ///
    ///     var cart = serverState
    ///     let report = try ConflictStrategy.merge.apply(delta, to: &cart, version: next)
    ///     for conflict in report.conflicts { print(conflict.path, conflict.outcome) }
    ///
    /// - Throws: `ValueError` with code `documentNotFound` for a change to a document that
    ///   does not exist and that the change does not create; `tooLarge` when the result would
    ///   exceed `maximumBytes` (and the document before: a change may shrink an oversized one).
    ///   When it throws, `state` is unchanged. A server that must check its rules before the size
    ///   (so that the answer tells nothing of a document the caller may not read) passes `.max`
    ///   and checks the size itself.
    package func apply(
        _ delta: DocumentDelta, to state: inout DocumentState, version: Version,
        maximumBytes: Int = ValueLimits.maximumDocumentBytes
    ) throws(ValueError) -> JoinReport {
        // A `createIfMissing` is decided by the document as the server has it.
        let delta = delta.resolvingCreateIfMissing(documentExists: state.exists)
        if state.isPristine { return try Self.applyToNew(delta, state: &state, version: version, maximumBytes: maximumBytes) }
        return try applyInFull(delta, to: &state, version: version, maximumBytes: maximumBytes)
    }

    /// The join without the shortcut for new documents; the tests compare the two.
    func applyInFull(
        _ delta: DocumentDelta, to state: inout DocumentState, version: Version,
        maximumBytes: Int = ValueLimits.maximumDocumentBytes
    ) throws(ValueError) -> JoinReport {
        var join = ServerJoin(
            delta: delta.resolvingCreateIfMissing(documentExists: state.exists), strategy: self, version: version,
            maximumBytes: maximumBytes)
        return try join.run(on: &state)
    }

    /// The join into a document nobody has written, the common case of a push: there is nothing to
    /// conflict with, so every strategy applies the change as it is, and everything it wrote is new.
    private static func applyToNew(
        _ delta: DocumentDelta, state: inout DocumentState, version: Version,
        maximumBytes: Int
    ) throws(ValueError) -> JoinReport {
        guard delta.hasEdits else { return JoinReport() } // deleting what is not there changes nothing
        guard delta.create != nil else { throw ValueError(.documentNotFound, field: "", detail: "the document does not exist") }
        var result = state
        if let created = DocumentState(creating: delta, at: version) {
            result = created
        } else {
            result.applyLocally(delta, at: version)
        }
        guard result.byteSize <= maximumBytes else {
            throw ValueError(.tooLarge, field: "", detail: "the document would hold \(result.byteSize) bytes; the limit is \(maximumBytes)")
        }
        state = result
        return JoinReport(changes: result)
    }

    /// The join of a client's change into a copy of `state`. See `apply(_:to:version:)`.
    package func apply(_ delta: DocumentDelta, to state: DocumentState, version: Version) throws(ValueError) -> ApplyResult {
        var result = state
        let report = try apply(delta, to: &result, version: version)
        return ApplyResult(state: result, changes: report.changes, conflicts: report.conflicts)
    }
}

/// One join of a delta into a server state. See Spec/conflicts.md, "The server join".
///
/// The client's intent is the delta applied unconditionally. Every field the delta touches gets the
/// earliest base of the parts touching it; a field the server changed since that base, whose value
/// the intent would change, is a conflict. Fields that overlap (a path and what lies under it) are
/// settled together, so a document never ends up with a leaf and a map at one path. The state is
/// changed in place; the touched fields are saved first so that any of them can be put back.
private struct ServerJoin {
    let delta: DocumentDelta
    let strategy: ConflictStrategy
    let version: Version
    let maximumBytes: Int
    /// The touched fields as they were before the change (`nil`: there was none).
    private var saved: [FieldPath: Field?] = [:]

    init(delta: DocumentDelta, strategy: ConflictStrategy, version: Version, maximumBytes: Int) {
        self.maximumBytes = maximumBytes
        self.delta = delta
        self.strategy = strategy
        self.version = version
    }

    private func before(_ path: FieldPath) -> Field? { saved[path] ?? nil }

    mutating func run(on state: inout DocumentState) throws(ValueError) -> JoinReport {
        let bases = touchedBases(in: state)
        saved.reserveCapacity(bases.count)
        for path in bases.keys { saved[path] = .some(state[path]) }
        let savedExistence = state.existence
        let savedVersion = state.version
        let savedBytes = state.byteSize
        var conflicts: [Conflict] = []
        var keepsExistence = false

        // Settle the document level before anything changes.
        if !savedExistence.exists {
            guard delta.hasEdits else { return JoinReport() } // deleting what is not there changes nothing
            let base = [delta.create, delta.earliestFieldBase].compactMap { $0 }.min() ?? .zero
            if savedExistence.version > base {
                // The client edited a document the server deleted since the client's base.
                let outcome: Conflict.Outcome =
                    switch strategy {
                    case .serverWins: .serverWon
                    case .clientWins, .merge: .clientWon
                    case .manual: .unresolved
                    }
                let intent = state.applyingLocally(delta, at: version).settingExistence(true, at: version)
                conflicts.append(Conflict(path: .root, serverValue: nil, clientValue: intent.document, outcome: outcome))
                if strategy == .serverWins { return JoinReport(conflicts: conflicts) }
            } else if delta.create == nil {
                throw ValueError(.documentNotFound, field: "", detail: "the document does not exist")
            }
        } else if let deleteBase = delta.delete, savedVersion > deleteBase {
            // The client deleted a document the server edited since the client's base.
            let outcome: Conflict.Outcome =
                switch strategy {
                case .serverWins, .merge: .serverWon
                case .clientWins: .clientWon
                case .manual: .unresolved
                }
            conflicts.append(Conflict(path: .root, serverValue: state.document, clientValue: nil, outcome: outcome))
            keepsExistence = outcome == .serverWon
        }

        state.applyLocally(delta, at: version, includingIncrements: false)
        if !savedExistence.exists, conflicts.first?.path.isRoot == true {
            state.setExistence(true, at: version) // the edit wins: the document comes back
        }

        // Settle the fields, one overlap group at a time. A field conflicts only when the server
        // changed it after the base that touches it; when none was (an uncontested change, the
        // common case), no group can have a conflict and the grouping is skipped.
        let mayConflict = bases.contains { path, base in (before(path)?.version ?? .zero) > base }
        var beforeState: DocumentState? // built only to describe conflicts
        for group in mayConflict ? Self.overlapGroups(of: bases.keys) : [] {
            let conflicting = group.filter { path in
                guard let server = before(path), let base = bases[path], server.version > base else { return false }
                return server.value != state[path]?.value
            }
            guard !conflicting.isEmpty else { continue }
            let mergesAsSet = strategy == .merge && group.count == 1 && mergesElementwise(at: group[0])
            let outcome: Conflict.Outcome =
                switch strategy {
                case .serverWins: .serverWon
                case .clientWins: .clientWon
                case .merge: mergesAsSet ? .merged : .serverWon
                case .manual: .unresolved
                }
            let described = beforeState ?? DocumentState(existence: savedExistence, fields: saved.compactMapValues { $0 })
            beforeState = described
            for path in Set(conflicting.flatMap(reportedPaths(for:))).sorted() {
                conflicts.append(
                    Conflict(
                        path: path, serverValue: described.liveValue(within: path),
                        clientValue: state.liveValue(within: path), outcome: outcome))
            }
            if mergesAsSet, let base = bases[group[0]] {
                state.restore(group[0], to: mergedSet(at: group[0], base: base).map(Field.set))
            } else if outcome == .serverWon {
                for path in group { state.restore(path, to: before(path)) }
            }
        }
        conflicts.sort { $0.path < $1.path }

        if strategy == .manual, !conflicts.isEmpty {
            putBack(&state, existence: savedExistence, version: savedVersion)
            // The rest waits for the resolver; the increments count now (they never conflict).
            guard !delta.increments.isEmpty, savedExistence.exists else { return JoinReport(conflicts: conflicts) }
            applyIncrements(to: &state)
            return JoinReport(changes: writtenChanges(in: &state, savedVersion: savedVersion), conflicts: conflicts)
        }
        if keepsExistence { state.restore(savedExistence) }
        applyIncrements(to: &state)
        if state.byteSize > maximumBytes, state.byteSize > savedBytes {
            let size = state.byteSize
            putBack(&state, existence: savedExistence, version: savedVersion)
            throw ValueError(.tooLarge, field: "", detail: "the document would hold \(size) bytes; the limit is \(maximumBytes)")
        }

        return JoinReport(changes: writtenChanges(in: &state, savedVersion: savedVersion), conflicts: conflicts)
    }

    /// What was written at the new version, the change's delta-state; the state's version is
    /// the new one when anything was.
    private func writtenChanges(in state: inout DocumentState, savedVersion: Version) -> DocumentState {
        var changes = DocumentState()
        for path in saved.keys {
            if let field = state[path], field.version == version { changes.store(field, at: path) }
        }
        if state.existence.version == version { changes.setExistence(state.existence.exists, at: version) }
        state.restoreVersion(changes.version == version ? version : savedVersion)
        return changes
    }

    /// Adds the change's increments to the fields as the join left them: an increment never
    /// conflicts, so it counts whatever happened to the change's other parts. What it replaces is
    /// saved first (a field the other parts touched was saved before they ran).
    private mutating func applyIncrements(to state: inout DocumentState) {
        guard !delta.increments.isEmpty else { return }
        for path in delta.increments.keys {
            if saved[path] == nil { saved[path] = .some(state[path]) }
            state.forEachLivePath(overlapping: path) { live in
                if saved[live] == nil { saved[live] = .some(state[live]) }
            }
        }
        state.applyIncrements(of: delta, at: version)
    }

    /// Puts every touched field, the existence register and the version back as they were.
    private func putBack(_ state: inout DocumentState, existence: Existence, version: Version) {
        for path in saved.keys { state.restore(path, to: before(path)) }
        state.restore(existence)
        state.restoreVersion(version)
    }

    /// Every field the delta touches, with the earliest base of the parts that touch it.
    private func touchedBases(in before: DocumentState) -> [FieldPath: Version] {
        var bases: [FieldPath: Version] = [:]
        bases.reserveCapacity(delta.removals.count + delta.fieldRemovals.count + delta.assignments.count + delta.setChanges.count)
        func touch(_ path: FieldPath, _ base: Version) { bases[path] = min(bases[path] ?? base, base) }
        if let createBase = delta.create {
            for path in before.livePaths(within: .root) { touch(path, createBase) }
        }
        for (path, base) in delta.removals {
            for live in before.livePaths(within: path) { touch(live, base) }
        }
        for (path, base) in delta.fieldRemovals where before[path]?.isLive == true { touch(path, base) }
        for (path, assignment) in delta.assignments {
            touch(path, assignment.base)
            before.forEachLivePath(overlapping: path) { touch($0, assignment.base) }
        }
        for (path, change) in delta.setChanges {
            touch(path, change.base)
            before.forEachLivePath(overlapping: path) { touch($0, change.base) }
        }
        return bases
    }

    /// Where a conflict on `field` is reported: at the paths of the assignments or set changes that
    /// overwrite it, or at the field's own path when a removal (or a create) takes it away.
    private func reportedPaths(for field: FieldPath) -> [FieldPath] {
        var candidate: FieldPath? = field
        while let path = candidate, !path.isRoot {
            if delta.assignments[path] != nil || delta.setChanges[path] != nil { return [path] }
            candidate = path.parent
        }
        let under = delta.assignments.keys.filter { $0.isWithin(field) } + delta.setChanges.keys.filter { $0.isWithin(field) }
        return under.isEmpty ? [field] : under
    }

    /// Groups paths so that a path and every path under it are in one group.
    private static func overlapGroups(of paths: some Collection<FieldPath>) -> [[FieldPath]] {
        if paths.count == 1, let only = paths.first { return [[only]] } // the common single-field change
        // Top-level paths cannot lie under one another: each is its own group.
        if paths.allSatisfy({ !$0.isNested }) { return paths.sorted().map { [$0] } }
        let members = Set(paths)
        var groupOf: [FieldPath: FieldPath] = [:] // path -> its topmost touched ancestor
        for path in members {
            var top = path
            var prefix = path
            while let parent = prefix.parent, !parent.isRoot {
                if members.contains(parent) { top = parent }
                prefix = parent
            }
            groupOf[path] = top
        }
        return Dictionary(grouping: members, by: { groupOf[$0] ?? $0 }).values.map { $0.sorted() }
    }

    /// Whether `path` is a set that both sides changed element by element (and the client did not
    /// replace it), so that merge combines elements rather than keeping the server's set.
    private func mergesElementwise(at path: FieldPath) -> Bool {
        guard delta.setChanges[path] != nil, delta.create == nil, delta.fieldRemovals[path] == nil,
            case .set? = before(path),
            !delta.removals.keys.contains(where: { path.isWithin($0) })
        else { return false }
        return true
    }

    /// The server's set with the client's adds, and the client's removes of the adds it had
    /// observed (a concurrent add wins).
    private func mergedSet(at path: FieldPath, base: Version) -> ObservedRemoveSet? {
        guard case .set(var set)? = before(path), let change = delta.setChanges[path] else { return nil }
        for element in change.removes {
            if let added = set.elements[element], added <= base { set.elements[element] = nil }
        }
        for element in change.adds { set.elements[element] = version }
        set.version = version
        return set
    }
}
