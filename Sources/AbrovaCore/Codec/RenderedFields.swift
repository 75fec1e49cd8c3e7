/// A flat document's canonical JSON (`DocumentState.documentJSON`) kept member by member, in path
/// order, so that after a change only the fields it wrote are rendered again: a local write of one
/// field of a ten-field document renders one value, not ten, and sorts nothing.
///
/// It covers states whose fields are all top-level and changes that write only top-level paths
/// without creating or deleting the document; `update(after:in:)` says when it cannot follow a
/// change, and the caller renders the whole document again (`init?(_:)`).
public struct RenderedFields: Sendable {
    /// The live fields' paths, in path order.
    private var paths: [FieldPath] = []
    /// The document's JSON: `{`, the members (`"path":value`) of `paths` separated by commas, `}`.
    private var text: [UInt8] = [UInt8(ascii: "{"), UInt8(ascii: "}")]
    /// Where each member ends in `text` (it starts after the `{` or the comma before it).
    private var ends: [Int] = []

    /// The rendering of `state`, or `nil` when it does not exist or has a nested path (live or not).
    public init?(_ state: DocumentState) {
        guard state.exists, state.isFlat else { return nil }
        var live = state.fields.filter { $0.value.isLive }.map { ($0.key, $0.value) }
        live.sort { $0.0 < $1.0 }
        paths.reserveCapacity(live.count)
        ends.reserveCapacity(live.count)
        text.removeLast()
        text.reserveCapacity(state.byteSize + 4 * live.count + 2)
        for (path, field) in live {
            if !paths.isEmpty { text.append(UInt8(ascii: ",")) }
            paths.append(path)
            DocumentState.writeMember(path, field, to: &text)
            ends.append(text.count)
        }
        text.append(UInt8(ascii: "}"))
    }

    /// Follows `change`, which made `state` from the state this rendering is of. Returns `false`,
    /// leaving the rendering unusable, when the change creates or deletes the document or writes
    /// a nested path.
    public mutating func update(after change: DocumentDelta, in state: DocumentState) -> Bool {
        guard change.create == nil, change.createIfMissing == nil, change.delete == nil, !change.hasNestedPaths, state.exists, state.isFlat
        else { return false }
        for path in change.removals.keys { rerender(path, in: state) }
        for path in change.fieldRemovals.keys { rerender(path, in: state) }
        for (path, assignment) in change.assignments {
            // A top-level leaf of a flat document holds what was assigned (no need to look it up).
            rerender(path, as: .register(Register(value: assignment.value, version: .zero)))
        }
        for path in change.setChanges.keys { rerender(path, in: state) }
        // After the assignments: an increment adds to what the change assigned.
        for path in change.increments.keys { rerender(path, in: state) }
        return true
    }

    /// The document's canonical JSON.
    public var json: String { String(decoding: text, as: UTF8.self) }

    /// Renders the field at `path` as `state` holds it: replaced, added in order, or taken out.
    private mutating func rerender(_ path: FieldPath, in state: DocumentState) {
        rerender(path, as: state.fields[path])
    }

    /// Renders `field` (none: taken out) at `path`: replaced, added in order, or taken out.
    private mutating func rerender(_ path: FieldPath, as field: Field?) {
        // A write mostly changes a field the document has: found by equality, cheaper than order.
        let listed = paths.firstIndex(of: path)
        let isListed = listed != nil
        let position = listed ?? firstPosition(notBefore: path)
        let start = position == 0 ? 1 : ends[position - 1] + 1 // past the `{` or the comma
        if let field, field.isLive {
            var member: [UInt8] = []
            member.reserveCapacity(path.dotted.utf8.count + 16)
            DocumentState.writeMember(path, field, to: &member)
            if isListed {
                text.replaceSubrange(start..<ends[position], with: member)
                shiftEnds(from: position, by: member.count - (ends[position] - start))
            } else if position < paths.count {
                member.append(UInt8(ascii: ","))
                text.insert(contentsOf: member, at: start)
                paths.insert(path, at: position)
                ends.insert(start + member.count - 1, at: position)
                shiftEnds(from: position + 1, by: member.count)
            } else {
                // Last: after a comma, unless it is the only member.
                if !paths.isEmpty { member.insert(UInt8(ascii: ","), at: 0) }
                text.insert(contentsOf: member, at: text.count - 1)
                paths.append(path)
                ends.append(text.count - 1)
            }
        } else if isListed {
            // The member goes with the comma after it, or, when it is last, the comma before it.
            let removed = position + 1 < paths.count ? start..<ends[position] + 1 : (position == 0 ? start : start - 1)..<ends[position]
            text.removeSubrange(removed)
            paths.remove(at: position)
            ends.remove(at: position)
            shiftEnds(from: position, by: -removed.count)
        }
    }

    /// Moves the ends of the members from `position` on by `offset` bytes.
    private mutating func shiftEnds(from position: Int, by offset: Int) {
        guard offset != 0 else { return }
        for index in position..<ends.count { ends[index] += offset }
    }

    /// The position of the first listed path not before `path` (binary search).
    private func firstPosition(notBefore path: FieldPath) -> Int {
        var low = 0
        var high = paths.count
        while low < high {
            let middle = (low + high) / 2
            if paths[middle] < path { low = middle + 1 } else { high = middle }
        }
        return low
    }
}
