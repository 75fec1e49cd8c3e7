/// The set fields of a document as a device's own changes leave it: all that pruning the removes
/// of its next change reads (`DocumentDelta.droppingUnobservedRemoves(observed:)`). A freeze keeps
/// one a document of its batch instead of the whole state: registers never decide which removes a
/// change keeps, and each write of a register would cost a state's bookkeeping.
package struct ObservedSets: Equatable, Sendable {
    /// Each set's path and elements.
    package private(set) var sets: [FieldPath: Set<Value>]
    /// Whether the document exists: what a `createIfMissing` does depends on it.
    private var documentExists: Bool

    /// The sets of `state`, or `nil` when a set there overlaps another live field (one path within
    /// the other, as joined concurrent writes can leave them): a write to such a set starts it anew,
    /// which only the whole state can tell.
    package init?(_ state: DocumentState) {
        sets = [:]
        documentExists = state.exists
        for (path, field) in state.fields {
            guard case .set(let set) = field else { continue }
            if state.replacesLiveFields(path) { return nil }
            sets[path] = Set(set.elements.keys)
        }
    }

    /// Applies `delta` as `DocumentState.applyLocally(_:at:)` does, as far as sets go: a create
    /// (or a `createIfMissing` of a document that does not exist) removes every set; a removal,
    /// the sets within its path; a field removal, the set at its path; an assignment, the sets it
    /// overlaps; a set change changes its set in place, or starts it anew with its adds (after
    /// removing the sets it overlaps) where there is none; an increment, the sets it overlaps.
    package mutating func apply(_ delta: DocumentDelta) {
        if delta.create != nil || delta.createIfMissing != nil && !documentExists { sets.removeAll() }
        if delta.create != nil || delta.createIfMissing != nil { documentExists = true }
        for path in delta.removals.keys { removeSets { $0.isWithin(path) } }
        for path in delta.fieldRemovals.keys { sets[path] = nil }
        for path in delta.assignments.keys { removeSets { $0.overlaps(path) } }
        for (path, change) in delta.setChanges {
            if let index = sets.index(forKey: path) {
                sets.values[index].subtract(change.removes)
                sets.values[index].formUnion(change.adds)
            } else {
                removeSets { $0.overlaps(path) }
                sets[path] = change.adds
            }
        }
        for path in delta.increments.keys { removeSets { $0.overlaps(path) } }
        if delta.delete != nil { documentExists = false }
    }

    private mutating func removeSets(where matches: (FieldPath) -> Bool) {
        guard !sets.isEmpty else { return }
        for path in sets.keys where matches(path) { sets[path] = nil }
    }
}
