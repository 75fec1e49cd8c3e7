import AbrovaCore

@testable import AbrovaStore

/// Inputs for the store's plans, made in memory: no file, no actor.
enum PlanFixtures {
    static let cart = DocumentKey(collection: "carts", id: "c1")
    static let list = DocumentKey(collection: "lists", id: "l1")

    /// The state a server holds after creating a document with `data` at `version`.
    static func serverState(_ data: [String: Value], at version: UInt64) throws -> DocumentState {
        var state = DocumentState()
        _ = try ConflictStrategy.merge.apply(try DocumentDelta.create(data, base: .zero), to: &state, version: Version(version))
        return state
    }

    /// The state of a document whose set `items` holds milk: created at version 1, milk added at 2.
    static func itemsHoldingMilk() throws -> DocumentState {
        var state = try serverState(["items": []], at: 1)
        _ = try ConflictStrategy.merge.apply(
            try DocumentDelta.update(setAdd: [try FieldPath("items"): ["milk"]], base: Version(1)), to: &state,
            version: Version(2))
        return state
    }

    /// A stored pending (or in-flight) change of `delta`.
    static func row(
        _ sequence: Int64, _ key: DocumentKey, _ delta: DocumentDelta, writes: Int = 1, view: String? = nil,
        parts: [DocumentDelta]? = nil, isAsWritten: Bool = false, origin: Int64? = nil
    ) -> QueueRow {
        QueueRow(
            sequence: sequence, key: key, delta: LocalStore.encode(delta), writes: writes, view: view,
            parts: parts.map(LocalStore.encodeParts), isAsWritten: isAsWritten, origin: origin ?? 100 + sequence)
    }

    /// Freezes `rows` (all of them fitting) as batch 1, every document under `merge`.
    static func freeze(_ rows: [QueueRow], confirmed: [DocumentKey: DocumentState] = [:]) throws -> FreezePlan {
        let fitting = FreezePlan.rowsFitting(rows, maximumBytes: .max)
        let deltas = try fitting.map { try LocalStore.decodeDelta($0.delta) }
        return FreezePlan(rows: fitting, deltas: deltas, confirmed: confirmed, clientID: "device", sequence: 1, strategyOf: { _ in .merge })
    }

    /// Memory holding `unsent` (the batch's changes, then the pending ones) and `cached` documents.
    static func memory(unsent: [UnsentRow], cached: [DocumentKey: LocalStore.CachedDocument] = [:]) -> StoreMemory {
        var memory = StoreMemory(unsentRows: unsent, tail: nil, nextBatch: 2, heldDocuments: [], isResyncing: false)
        for (key, document) in cached { memory.remember(document, for: key) }
        return memory
    }

    /// Origins counting up from 900, in place of random ones.
    final class Origins {
        var next: Int64 = 900
        func make() -> Int64 {
            next += 1
            return next
        }
    }
}
