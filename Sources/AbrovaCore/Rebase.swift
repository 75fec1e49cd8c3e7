extension DocumentDelta {
    /// A later unsent change, rebased after the server applied this client's earlier change to the
    /// same document at `ownVersion`, leaving it as `confirmed`.
    ///
    /// A part whose base is older than `ownVersion` would otherwise count the client's own write as
    /// a change "on the server since the base". A part takes `ownVersion` as its new base when no
    /// field it touches has a version between its base and `ownVersion` (nobody else changed them
    /// in between); otherwise it keeps its base, so a change it never saw still conflicts.
    public func rebased(onto confirmed: DocumentState, ownVersion: Version) -> DocumentDelta {
        func changedByOthers(since base: Version, overlapping path: FieldPath?) -> Bool {
            if path == nil, confirmed.existence.version > base, confirmed.existence.version < ownVersion { return true }
            return confirmed.fields.contains { fieldPath, field in
                field.version > base && field.version < ownVersion && (path.map { fieldPath.overlaps($0) } ?? true)
            }
        }
        func rebase(_ base: Version, _ path: FieldPath?) -> Version {
            base < ownVersion && !changedByOthers(since: base, overlapping: path) ? ownVersion : base
        }
        var result = self
        result.create = create.map { rebase($0, nil) }
        result.delete = delete.map { rebase($0, nil) }
        for (path, base) in removals { result.removals[path] = rebase(base, path) }
        for (path, base) in fieldRemovals { result.fieldRemovals[path] = rebase(base, path) }
        for (path, assignment) in assignments {
            result.assignments[path] = Assignment(value: assignment.value, base: rebase(assignment.base, path))
        }
        for (path, change) in setChanges {
            result.setChanges[path] = SetChange(adds: change.adds, removes: change.removes, base: rebase(change.base, path))
        }
        return result
    }
}
