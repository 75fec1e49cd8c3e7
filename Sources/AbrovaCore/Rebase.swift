/// What a client's own changes of one document did on the server, as far as its later changes
/// are rebased past them (`DocumentDelta.rebased(onto:past:)`): the versions they were applied
/// at, and the counters they incremented over writes the client had not seen.
public struct OwnWrites: Hashable, Sendable {
    /// The versions the client's own changes were applied at.
    public private(set) var versions: Set<Version> = []
    /// Counters an own change incremented when the server answered it with its state (others had
    /// written the document since the change's base): the own version such a counter bears hides
    /// whether those writes were to it, so it still counts as others'.
    public private(set) var countedOverOthers: Set<FieldPath> = []

    /// Nothing yet.
    public init() {}

    /// Own writes applied at `versions`, none of them an increment over others' writes.
    public init(versions: Set<Version>) { self.versions = versions }

    /// Whether no own change was applied.
    public var isEmpty: Bool { versions.isEmpty }

    /// Notes the answer to one own change, `delta`.
    public mutating func note(_ result: ChangeResult, of delta: DocumentDelta) {
        guard case .applied(let version, let state, _) = result else { return }
        versions.insert(version)
        if state != nil { countedOverOthers.formUnion(delta.increments.keys) }
    }
}

extension DocumentDelta {
    /// A later unsent change, rebased after the server applied this client's earlier changes to
    /// the same document at `ownVersions`, leaving it as `confirmed`.
    public func rebased(onto confirmed: DocumentState, ownVersions: Set<Version>) -> DocumentDelta {
        rebased(onto: confirmed, past: OwnWrites(versions: ownVersions))
    }

    /// A later unsent change, rebased after the server applied this client's earlier changes to
    /// the same document (`own`), leaving it as `confirmed`.
    ///
    /// A part whose base is older than the client's own writes would otherwise count them as
    /// changes "on the server since the base". A part takes the newest own version as its new base
    /// when every field it touches that changed after its base was changed by this client's own
    /// writes (nobody else wrote them in between); otherwise it keeps its base, so a change it
    /// never saw still conflicts. Others' writes older than the client's own write of the part's
    /// very path do not count: that write was joined after them on the server (its conflicts with
    /// them are settled), and the part is its sequel. An own increment settles nothing (it adds
    /// to what others wrote): a counter `own` counted over others' writes counts as theirs.
    public func rebased(onto confirmed: DocumentState, past own: OwnWrites) -> DocumentDelta {
        let ownVersions = own.versions
        guard let newest = ownVersions.max(), earliestBase < newest else { return self }
        let counted = own.countedOverOthers
        func changedByOthers(_ version: Version, since base: Version, at path: FieldPath? = nil) -> Bool {
            guard version > base else { return false }
            if let path, counted.contains(path) { return true }
            return version < newest && !ownVersions.contains(version)
        }
        // The fields others may have written after some part's base: one pass over the document
        // for the whole change, not one for each of its parts.
        let earliest = earliestBase
        let candidates = confirmed.fields.filter { changedByOthers($0.value.version, since: earliest, at: $0.key) }
        func rebase(_ base: Version, _ path: FieldPath?) -> Version {
            guard base < newest else { return base }
            if path == nil, changedByOthers(confirmed.existence.version, since: base) { return base }
            var since = base
            if let path, !counted.contains(path), let own = confirmed[path]?.version, ownVersions.contains(own) {
                since = max(base, own)
            }
            let othersWrote = candidates.contains { fieldPath, field in
                changedByOthers(field.version, since: since, at: fieldPath) && (path.map { fieldPath.overlaps($0) } ?? true)
            }
            return othersWrote ? base : newest
        }
        var result = self
        result.create = create.map { rebase($0, nil) }
        result.createIfMissing = createIfMissing.map { rebase($0, nil) }
        result.delete = delete.map { rebase($0, nil) }
        for (path, base) in removals { result.removals[path] = rebase(base, path) }
        for (path, base) in fieldRemovals { result.fieldRemovals[path] = rebase(base, path) }
        for (path, assignment) in assignments {
            result.assignments[path]?.base = rebase(assignment.base, path)
        }
        for (path, change) in setChanges {
            result.setChanges[path] = SetChange(adds: change.adds, removes: change.removes, base: rebase(change.base, path))
        }
        for (path, increment) in increments {
            result.increments[path]?.base = rebase(increment.base, path)
        }
        return result
    }
}
