import AbrovaCore
import AbrovaTestSupport
import Testing

/// `setData(_:merge: true)` as deltas: what the device decides from what it has seen, how a
/// `createIfMissing` composes, and how the server settles it against the document it has.
@Suite struct MergingSetDeltaTests {
    let data: [String: Value] = ["qty": ["milk": 2], "note": "x"]

    func state(_ delta: DocumentDelta, on state: DocumentState = DocumentState(), at version: UInt64 = 1) throws -> DocumentState {
        try ConflictStrategy.serverWins.apply(delta, to: state, version: Version(version)).state
    }

    @Test func theDeviceDecidesFromWhatItHasSeen() throws {
        let cart = try state(DocumentDelta.create(["owner": "ana"], base: .zero))
        let shown = try DocumentDelta.setMerging(data, base: cart.version, view: cart, hasPendingChange: false)
        #expect(shown.createIfMissing == nil && shown.create == nil)
        #expect(Set(shown.assignments.keys.map(\.dotted)) == ["qty.milk", "note"])

        let never = try DocumentDelta.setMerging(data, base: .zero, view: DocumentState(), hasPendingChange: false)
        #expect(never.createIfMissing == .zero && never.create == nil)

        let deleted = try state(DocumentDelta.delete(base: cart.version), on: cart, at: 2)
        let seenDeleted = try DocumentDelta.setMerging(data, base: deleted.version, view: deleted, hasPendingChange: false)
        #expect(seenDeleted.createIfMissing == deleted.version)

        // Its own pending delete: the document is created anew.
        let view = cart.applyingLocally(DocumentDelta.delete(base: cart.version), at: Version(9))
        let afterOwnDelete = try DocumentDelta.setMerging(data, base: cart.version, view: view, hasPendingChange: true)
        #expect(afterOwnDelete.create == cart.version && afterOwnDelete.createIfMissing == nil)

        #expect(throws: ValueError.self) {
            try DocumentDelta.setMerging(["a": ["$x": 1]], base: .zero, view: DocumentState(), hasPendingChange: false)
        }
    }

    @Test func theServerCreatesAMissingDocumentAndMergesIntoOneThatExists() throws {
        let change = try DocumentDelta.setMerging(data, base: .zero, documentExists: false)
        let created = try state(change)
        #expect(created.document == ["qty": ["milk": 2], "note": "x"])

        let cart = try state(DocumentDelta.create(["owner": "ana", "qty": ["eggs": 6]], base: .zero))
        for strategy in ConflictStrategy.allCases where strategy != .manual {
            let merged = try strategy.apply(change, to: cart, version: Version(2)).state
            #expect(merged.document?[try FieldPath("owner")] == "ana", "\(strategy)")
            #expect(merged.document?[try FieldPath("qty.eggs")] == 6, "\(strategy)")
            #expect(merged.document?[try FieldPath("note")] == "x", "\(strategy)")
        }
    }

    @Test func composingKeepsWhatApplyingInOrderDoes() throws {
        let merging = try DocumentDelta.setMerging(data, base: Version(3), documentExists: false)
        var afterCreate = try DocumentDelta.create(["a": 1], base: Version(2))
        afterCreate.compose(with: merging)
        #expect(afterCreate.createIfMissing == nil && afterCreate.create == Version(2))

        var afterDelete = DocumentDelta.delete(base: Version(2))
        afterDelete.compose(with: merging)
        #expect(afterDelete.createIfMissing == nil && afterDelete.create == Version(2) && afterDelete.delete == nil)

        var twice = merging
        twice.compose(with: try DocumentDelta.setMerging(["b": 1], base: Version(1), documentExists: false))
        #expect(twice.createIfMissing == Version(1))

        var thenCreate = merging
        thenCreate.compose(with: try DocumentDelta.create(["b": 1], base: Version(5)))
        #expect(thenCreate.createIfMissing == nil && thenCreate.create == Version(3))
        #expect(thenCreate.removals.keys.contains(try FieldPath("note")))
    }

    @Test func bothCreatesInOneChangeAreRefused() throws {
        var both = try DocumentDelta.setMerging(data, base: .zero, documentExists: false)
        both.create = .zero
        let text = both.encoded.canonicalJSON
        #expect(throws: ValueError.self) { try DocumentDelta(encoded: Value(json: text)) }
        var reader = JSONReader(bytes: Array(text.utf8))
        guard case .invalid(let error) = try DocumentDelta.read(from: &reader) else {
            Issue.record("the one-pass reader took \(text)")
            return
        }
        #expect(error.description.contains("create or createIfMissing, not both"))
    }
}
