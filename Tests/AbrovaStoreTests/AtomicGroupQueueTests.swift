import AbrovaCore
import AbrovaTestSupport
import Testing

@testable import AbrovaStore

/// Atomic groups in the device's queue: saved together or not at all, never composed with another
/// change, never split across batches whatever the limits, and refused whole.
@Suite struct AtomicGroupQueueTests {
    let folder = TemporaryFolder()
    let cart = DocumentKey(collection: "carts", id: "c1")
    let saved = DocumentKey(collection: "saved", id: "s1")

    func row(_ sequence: Int64, group: Int64? = nil) -> QueueRow {
        var row = QueueRow(
            sequence: sequence, key: DocumentKey(collection: "c", id: "d\(sequence)"), delta: Array(repeating: 0, count: 10), writes: 1)
        row.group = group
        row.isAlone = group != nil
        return row
    }

    @Test func aBatchIsCutBeforeAGroupNeverWithinIt() {
        let rows = [row(1), row(2, group: 7), row(3, group: 7), row(4, group: 7), row(5)]
        #expect(FreezePlan.rowsFitting(rows, maximumChanges: 2, maximumBytes: .max).map(\.sequence) == [1])
        #expect(FreezePlan.rowsFitting(rows, maximumChanges: 4, maximumBytes: .max).map(\.sequence) == [1, 2, 3, 4])
        // A group first goes whole, whatever the limits.
        #expect(FreezePlan.rowsFitting(Array(rows.dropFirst()), maximumChanges: 1, maximumBytes: 1).map(\.sequence) == [2, 3, 4])
        let bytes = Batch.encodedOverhead + 3 * (Batch.encodedOverhead(of: rows[0].key) + 10)
        #expect(FreezePlan.rowsFitting(rows, maximumChanges: .max, maximumBytes: bytes).map(\.sequence) == [1])
    }

    @Test func aGroupIsSavedWholeSentWholeAndNeverComposed() async throws {
        let store = try LocalStore(path: folder.path("device.sqlite"))
        try await store.setData(["qty": ["eggs": 6]], for: cart)
        // An update of a document the device does not have: nothing of the group is saved.
        await #expect(throws: StoreError.self) {
            try await store.writeGroup([
                (.set(["eggs": 6]), saved),
                (
                    .update(set: [try FieldPath("n"): 1], remove: [], setAdd: [:], setRemove: [:]),
                    DocumentKey(collection: "x", id: "missing")
                ),
            ])
        }
        #expect(try await store.document(saved).exists == false)
        #expect(await store.unsentWriteCount == 1)

        _ = try await store.writeGroup([
            (.update(set: [:], remove: [try FieldPath("qty.eggs")], setAdd: [:], setRemove: [:]), cart),
            (.set(["eggs": 6]), saved),
        ])
        // A later write of the cart composes into neither.
        try await store.updateData(for: cart, set: [try FieldPath("note"): "x"])
        #expect(try await store.document(cart).data == ["note": "x"])
        let first = try #require(try await store.freezeBatch(maximumChanges: 1))
        #expect(first.batch.changes.map(\.key) == [cart])
        _ = try await store.settle(batch: first.batch.sequence, results: [.applied(version: Version(1), state: nil, conflicts: [])])
        // The group goes whole, over the limit of one change.
        let frozen = try #require(try await store.freezeBatch(maximumChanges: 1))
        #expect(frozen.batch.changes.map(\.key) == [cart, saved])
        #expect(frozen.batch.changes[0].group != nil && frozen.batch.changes[0].group == frozen.batch.changes[1].group)

        // Refused whole: the write at fault reported, both rolled back; the later write stays.
        let report = try await store.settle(
            batch: frozen.batch.sequence,
            results: [.rejected(reason: .groupFailed, message: "not applied"), .rejected(reason: .forbidden, message: "no")])
        #expect(report.rejections.map(\.key) == [saved])
        #expect(try await store.document(saved).exists == false)
        #expect(try await store.document(cart).data == ["qty": ["eggs": 6], "note": "x"])
        #expect(await store.unsentWriteCount == 1)
    }
}
