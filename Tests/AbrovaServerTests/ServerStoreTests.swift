import AbrovaCore
@testable import AbrovaServer
import AbrovaTestSupport
import Dispatch
import Foundation
import Testing

/// What every server store promises, run against each store.
@Suite struct ServerStoreTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    func document(_ id: String, at version: Version) throws -> StoredDocument {
        var state = DocumentState()
        _ = try ConflictStrategy.merge.apply(try .create(["n": .int(1)], base: .zero), to: &state, version: version)
        return StoredDocument(key: DocumentKey(collection: "items", id: id), owner: "ana", version: version, state: state)
    }

    /// The late commit: a transaction holding a lower version commits after a higher one could
    /// have been pulled. The puller's next pull must still deliver it.
    @Test(arguments: StoreKind.available)
    func aLowerVersionThatCommitsLateIsNotSkipped(kind: StoreKind) async throws {
        let test = try TestStore(kind)
        let first = test.store
        let second = try test.reopened()  // another server process on the same database
        let holding = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let late = Task {
            try await onNewThread {
                try first.write { transaction in
                    let version = try transaction.nextVersion()
                    try transaction.saveDocument(try self.document("late", at: version), at: self.now)
                    holding.signal()
                    release.wait()  // holds its version, uncommitted
                    return version
                }
            }
        }
        try await onNewThread { holding.wait() }
        let early = Task {
            try await onNewThread {
                try second.write { transaction in
                    let version = try transaction.nextVersion()
                    try transaction.saveDocument(try self.document("early", at: version), at: self.now)
                    return version
                }
            }
        }
        try await Task.sleep(for: .milliseconds(300))  // time for the second write to commit, if it could
        let seenWhileHeld = try second.changes(after: .zero, limit: 100, collections: nil)
        release.signal()
        let lateVersion = try await late.value
        let earlyVersion = try await early.value
        #expect(lateVersion < earlyVersion, "versions follow the order in which writers took them")
        let cursor = seenWhileHeld.map(\.version).max() ?? .zero
        let afterward = try second.changes(after: cursor, limit: 100, collections: nil)
        let delivered = (seenWhileHeld + afterward).map(\.key.id)
        #expect(delivered.sorted() == ["early", "late"], "seen while the first was held: \(seenWhileHeld.map(\.key.id))")
    }
}
