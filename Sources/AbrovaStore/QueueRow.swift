import AbrovaCore
import AbrovaSQLite

/// A change as `pending` and `inflight` store it (Spec/storage.md, "Tables"); for an in-flight
/// change, `sequence` is its position in the batch.
struct QueueRow: Equatable {
    var sequence: Int64
    var key: DocumentKey
    /// The change in its stored (compact) encoding.
    var delta: [UInt8]
    /// How many app writes it holds.
    var writes: Int
    /// The app's view of the document after it; kept current only for the document's newest change.
    var view: String?
    /// Each write's change as it was made, while it holds several (`PendingChange.parts`).
    var parts: [UInt8]?
    /// Whether its writes were made while the server answered, to be saved as written.
    var isAsWritten: Bool
    /// The change's own id; `nil` for a change stored before schema 5.
    var origin: Int64?
    /// Whether it is a write sent again by itself after a refusal, or a write of an atomic
    /// group: never to compose with another.
    var isAlone: Bool
    /// The atomic group it belongs to, `nil` for none.
    var group: Int64?

    /// Whether a refusal of the change can be sent again write by write.
    var isSplittable: Bool { writes == 1 || parts != nil }
    /// Whether later changes of its document may compose into it, or it into an earlier one.
    var composes: Bool { !isAsWritten && !isAlone && isSplittable }

    /// The columns `init(_:)` reads, in its order, from `pending`.
    static let pendingColumns = "sequence, collection, id, delta, writes, view, parts, as_written, origin, alone, group_id"
    /// `pendingColumns` with no view (NULL in its place): a freeze reads many rows, and needs the
    /// view of only the last of each document (`FreezePlan.takeViews`).
    static let pendingColumnsWithoutView = "sequence, collection, id, delta, writes, NULL, parts, as_written, origin, alone, group_id"
    /// The columns `init(_:)` reads, in its order, from `inflight`.
    static let inflightColumns = "position, collection, id, delta, writes, view, parts, as_written, origin, alone, group_id"

    /// A row selected with `pendingColumns` or `inflightColumns`.
    init(_ row: Row) {
        sequence = row.integer(0)
        key = DocumentKey(collection: row.text(1) ?? "", id: row.text(2) ?? "")
        delta = row.blob(3) ?? []
        writes = Int(row.integer(4))
        view = row.text(5)
        parts = row.blob(6)
        isAsWritten = row.integer(7) != 0
        origin = row.isNull(8) ? nil : row.integer(8)
        isAlone = row.integer(9) != 0
        group = row.isNull(10) ? nil : row.integer(10)
    }

    init(
        sequence: Int64, key: DocumentKey, delta: [UInt8], writes: Int, view: String? = nil, parts: [UInt8]? = nil,
        isAsWritten: Bool = false, origin: Int64? = nil, isAlone: Bool = false
    ) {
        self.sequence = sequence
        self.key = key
        self.delta = delta
        self.writes = writes
        self.view = view
        self.parts = parts
        self.isAsWritten = isAsWritten
        self.origin = origin
        self.isAlone = isAlone
    }
}
