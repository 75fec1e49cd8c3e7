extension ConflictStrategy {
    /// Joins a client's change into the server's state of a document, as this strategy says.
    ///
    /// Conflicts are judged against `state` as it was before the change; everything applied is
    /// written at `version`, which must be newer than every version in `state`. Under `manual`, a
    /// document with any conflict is left as it was.
    ///
    ///     let result = try ConflictStrategy.merge.apply(delta, to: serverState, version: next)
    ///     for conflict in result.conflicts { print(conflict.path, conflict.outcome) }
    ///
    /// - Throws: `ValueError` with code `documentNotFound` (404) for a change to a document that
    ///   does not exist and that the change does not create; `tooLarge` (413) when the result would
    ///   exceed `ValueLimits.maximumDocumentBytes`.
    public func apply(_ delta: DocumentDelta, to state: DocumentState, version: Version) throws(ValueError) -> ApplyResult {
        try ServerJoin(before: state, delta: delta, strategy: self, version: version).run()
    }
}

/// One join of a delta into a server state. See Spec/conflicts.md, "The server join".
///
/// The client's intent is the delta applied unconditionally. Every field the delta touches gets the
/// earliest base of the parts touching it; a field the server changed since that base, whose value
/// the intent would change, is a conflict. Fields that overlap (a path and what lies under it) are
/// settled together, so a document never ends up with a leaf and a map at one path.
private struct ServerJoin {
    let before: DocumentState
    let delta: DocumentDelta
    let strategy: ConflictStrategy
    let version: Version

    func run() throws(ValueError) -> ApplyResult {
        let unchanged = ApplyResult(state: before, changes: DocumentState(), conflicts: [])
        var conflicts: [Conflict] = []
        var after = before.applyingLocally(delta, at: version)
        var keepsExistence = false

        if !before.exists {
            guard delta.hasEdits else { return unchanged }  // deleting what is not there changes nothing
            let base = [delta.create, delta.earliestFieldBase].compactMap { $0 }.min() ?? .zero
            if before.existence.version > base {
                // The client edited a document the server deleted since the client's base.
                let outcome: Conflict.Outcome = switch strategy {
                case .serverWins: .serverWon
                case .clientWins, .merge: .clientWon
                case .manual: .unresolved
                }
                conflicts.append(Conflict(path: .root, serverValue: nil, clientValue: after.document, outcome: outcome))
                if strategy == .serverWins { return ApplyResult(state: before, changes: DocumentState(), conflicts: conflicts) }
                // The edit wins: the document comes back with the fields it had, and the change.
                after.setExistence(true, at: version)
            } else if delta.create == nil {
                throw ValueError(.documentNotFound, field: "", detail: "the document does not exist")
            }
        } else if let deleteBase = delta.delete, before.version > deleteBase {
            // The client deleted a document the server edited since the client's base.
            let outcome: Conflict.Outcome = switch strategy {
            case .serverWins, .merge: .serverWon
            case .clientWins: .clientWon
            case .manual: .unresolved
            }
            conflicts.append(Conflict(path: .root, serverValue: before.document, clientValue: nil, outcome: outcome))
            keepsExistence = outcome == .serverWon
        }

        let bases = touchedBases()
        for group in Self.overlapGroups(of: bases.keys) {
            let conflicting = group.filter { path in
                guard let server = before[path], let base = bases[path], server.version > base else { return false }
                return server.value != after[path]?.value
            }
            guard !conflicting.isEmpty else { continue }
            let mergesAsSet = strategy == .merge && group.count == 1 && mergesElementwise(at: group[0])
            let outcome: Conflict.Outcome = switch strategy {
            case .serverWins: .serverWon
            case .clientWins: .clientWon
            case .merge: mergesAsSet ? .merged : .serverWon
            case .manual: .unresolved
            }
            for path in Set(conflicting.flatMap(reportedPaths(for:))).sorted() {
                conflicts.append(Conflict(path: path, serverValue: before.liveValue(within: path),
                                          clientValue: after.liveValue(within: path), outcome: outcome))
            }
            if mergesAsSet, let base = bases[group[0]] {
                after.restore(group[0], to: mergedSet(at: group[0], base: base).map(Field.set))
            } else if outcome == .serverWon {
                for path in group { after.restore(path, to: before[path]) }
            }
        }

        conflicts.sort { $0.path < $1.path }
        if strategy == .manual, !conflicts.isEmpty {
            return ApplyResult(state: before, changes: DocumentState(), conflicts: conflicts)
        }
        if keepsExistence { after.restore(before.existence) }
        after.recomputeVersion()
        if after.byteSize > ValueLimits.maximumDocumentBytes, after.byteSize > before.byteSize {
            try after.checkSize()
        }
        return ApplyResult(state: after, changes: after.changes(after: before.version), conflicts: conflicts)
    }

    /// Every field the delta touches, with the earliest base of the parts that touch it.
    private func touchedBases() -> [FieldPath: Version] {
        var bases: [FieldPath: Version] = [:]
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
            for live in before.livePaths(overlapping: path) { touch(live, assignment.base) }
        }
        for (path, change) in delta.setChanges {
            touch(path, change.base)
            for live in before.livePaths(overlapping: path) { touch(live, change.base) }
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
        let members = Set(paths)
        var groupOf: [FieldPath: FieldPath] = [:]  // path -> its topmost touched ancestor
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
              case .set? = before[path],
              !delta.removals.keys.contains(where: { path.isWithin($0) }) else { return false }
        return true
    }

    /// The server's set with the client's adds, and the client's removes of the adds it had
    /// observed (a concurrent add wins).
    private func mergedSet(at path: FieldPath, base: Version) -> ObservedRemoveSet? {
        guard case .set(var set)? = before[path], let change = delta.setChanges[path] else { return nil }
        for element in change.removes {
            if let added = set.elements[element], added <= base { set.elements[element] = nil }
        }
        for element in change.adds { set.elements[element] = version }
        set.version = version
        return set
    }
}
