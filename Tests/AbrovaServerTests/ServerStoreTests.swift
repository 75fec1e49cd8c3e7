import AbrovaCore
import AbrovaPostgres
import AbrovaTestSupport
import AbrovaWire
import Dispatch
import Foundation
import Testing

@testable import AbrovaServer

extension ServerSuites {
    /// What every server store promises, run against each store.
    @Suite struct ServerStoreTests {
        let now = Date(timeIntervalSince1970: 1_800_000_000)

        func document(_ id: String, at version: Version) throws -> StoredDocument {
            var state = DocumentState()
            _ = try ConflictStrategy.merge.apply(try .create(["n": .int(1)], base: .zero), to: &state, version: version)
            return StoredDocument(key: DocumentKey(collection: "items", id: id), owner: "ana", version: version, state: state)
        }

        /// Joins `delta` into the stored document at a new version, in one write, as a push does.
        @discardableResult
        func save(
            _ delta: DocumentDelta, to key: DocumentKey, owner: String = "ana", at time: Date? = nil,
            in store: any ServerStore
        ) throws -> StoredDocument {
            try store.write { transaction in
                let before = try transaction.document(key)
                let version = try transaction.nextVersion()
                let state = (before?.state ?? DocumentState()).applyingLocally(delta, at: version)
                let after = StoredDocument(key: key, owner: before?.owner ?? owner, version: version, state: state)
                try transaction.saveDocument(after, at: time ?? now)
                return after
            }
        }

        /// A document written several times in one transaction reads back as last written inside
        /// it, and is committed once, at its last version (the stores keep the writes until the
        /// commit); one whose transaction fails is not written at all.
        @Test(arguments: StoreKind.available)
        func aDocumentWrittenSeveralTimesInATransactionCommitsAsLastWritten(kind: StoreKind) throws {
            let test = try TestStore(kind)
            let key = DocumentKey(collection: "items", id: "cart")
            let last = try test.store.write { transaction in
                var written: StoredDocument?
                for step in 1...3 {
                    let before = try transaction.document(key)
                    #expect(before == written, "the transaction sees its own writes")
                    let version = try transaction.nextVersion()
                    let delta: DocumentDelta =
                        if let before {
                            try .update(set: [try FieldPath("n"): .int(Int64(step))], base: before.version)
                        } else {
                            try .create(["n": .int(Int64(step))], base: .zero)
                        }
                    let state = (before?.state ?? DocumentState()).applyingLocally(delta, at: version)
                    let document = StoredDocument(key: key, owner: "ana", version: version, state: state)
                    try transaction.saveDocument(document, at: now)
                    written = document
                }
                return try #require(written)
            }
            #expect(try test.store.document(key) == last)
            #expect(try test.store.document(key)?.state.document == ["n": 3])
            #expect(try test.store.changes(after: .zero, limit: 10, collections: nil) == [last])

            struct Abandoned: Error {}
            #expect(throws: Abandoned.self) {
                try test.store.write { transaction in
                    let version = try transaction.nextVersion()
                    try transaction.saveDocument(try self.document("abandoned", at: version), at: self.now)
                    throw Abandoned()
                }
            }
            #expect(try test.store.document(DocumentKey(collection: "items", id: "abandoned")) == nil)
        }

        /// The late commit: a transaction holding a lower version commits after a higher one could
        /// have been pulled. The puller's next pull must still deliver it.
        @Test(arguments: StoreKind.available)
        func aLowerVersionThatCommitsLateIsNotSkipped(kind: StoreKind) async throws {
            let test = try TestStore(kind)
            let first = test.store
            let second = try test.reopened() // another server process on the same database
            let holding = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let late = Task {
                try await onNewThread {
                    try first.write { transaction in
                        let version = try transaction.nextVersion()
                        try transaction.saveDocument(try self.document("late", at: version), at: self.now)
                        holding.signal()
                        release.wait() // holds its version, uncommitted
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
            try await Task.sleep(for: .milliseconds(300)) // time for the second write to commit, if it could
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

        struct DeliberateFailure: Error {}

        /// Nothing of a write that throws is kept: not its documents, not its dedupe record. A
        /// statement that fails takes its whole transaction with it, and the connection serves on.
        @Test(arguments: StoreKind.available)
        func aWriteThatThrowsLeavesNothingBehind(kind: StoreKind) throws {
            let test = try TestStore(kind, connections: 1) // the connection that rolled back serves what follows
            let store = test.store
            let kept = try save(try .create(["n": 1], base: .zero), to: DocumentKey(collection: "items", id: "kept"), in: store)
            let key = DocumentKey(collection: "items", id: "rolled-back")
            var taken: Version?
            do {
                try store.write { transaction in
                    try transaction.saveClient(ClientRecord(clientID: "client-a", userID: "ana", sequence: 1, digest: [1], answer: [2]))
                    let version = try transaction.nextVersion()
                    taken = version
                    try transaction.saveDocument(try document("rolled-back", at: version), at: now)
                    #expect(try transaction.document(key)?.version == version, "a transaction reads its own writes")
                    #expect(try transaction.client("client-a", of: "ana")?.answer == [2])
                    throw DeliberateFailure()
                }
                Issue.record("the write did not throw")
            } catch is DeliberateFailure {}
            // A statement the database refuses (a version already taken) after writes that succeeded.
            #expect(throws: (any Error).self) {
                try store.write { transaction in
                    try transaction.saveClient(ClientRecord(clientID: "client-b", userID: "ben", sequence: 1, digest: [1], answer: [2]))
                    try transaction.saveDocument(try document("rolled-back", at: try transaction.nextVersion()), at: now)
                    try transaction.saveDocument(try document("duplicate", at: kept.version), at: now)
                }
            }
            #expect(taken.map { $0 > kept.version } == true)
            #expect(try store.document(key) == nil)
            #expect(try store.changes(after: .zero, limit: 100, collections: nil) == [kept])
            let (clientA, clientB, next) = try store.write { transaction in
                (
                    try transaction.client("client-a", of: "ana"), try transaction.client("client-b", of: "ben"),
                    try transaction.nextVersion()
                )
            }
            #expect(clientA == nil && clientB == nil)
            #expect(next > kept.version)
            #expect(try test.reopened().changes(after: .zero, limit: 100, collections: nil) == [kept])
        }

        /// The schema is made once: a second store on the database (another server process) finds
        /// it, with its documents, its counter and the key that signs cursors.
        @Test(arguments: StoreKind.available)
        func aSecondStoreOnTheDatabaseSharesItsDocumentsCounterAndCursorKey(kind: StoreKind) throws {
            let test = try TestStore(kind)
            let first = test.store
            let key = DocumentKey(collection: "items", id: "shared")
            let created = try save(try .create(["n": 1], base: .zero), to: key, in: first)
            let second = try test.reopened()
            #expect(try second.cursorKey() == first.cursorKey())
            #expect(try second.cursorKey().count == 32)
            #expect(try second.document(key) == created)
            let updated = try save(try .update(set: [path("n"): 2], base: created.version), to: key, in: second)
            #expect(updated.version > created.version)
            #expect(try first.changes(after: .zero, limit: 100, collections: nil) == [updated])
            let third = try save(try .create(["n": 3], base: .zero), to: DocumentKey(collection: "items", id: "third"), in: first)
            #expect(third.version > updated.version)
            #expect(try test.reopened().changes(after: created.version, limit: 100, collections: nil) == [updated, third])
        }

        /// A server that starts while another is writing neither waits for the write nor sees it.
        @Test(arguments: StoreKind.available)
        func aStoreOpensWithoutWaitingForAWriteInProgress(kind: StoreKind) async throws {
            let test = try TestStore(kind)
            let store = test.store
            let holding = DispatchSemaphore(value: 0)
            let opened = DispatchSemaphore(value: 0)
            let writer = Task {
                try await onNewThread {
                    try store.write { transaction in
                        try transaction.saveDocument(try self.document("pending", at: try transaction.nextVersion()), at: self.now)
                        holding.signal()
                        // Long enough to tell an opening that waits for this commit from one that does not.
                        return opened.wait(timeout: .now() + 10) == .success
                    }
                }
            }
            _ = try await onNewThread { holding.wait(timeout: .now() + 30) } // not forever if the write fails
            let seen = try await onNewThread {
                let second = try test.reopened()
                let seen = try second.changes(after: .zero, limit: 100, collections: nil)
                opened.signal()
                return seen
            }
            #expect(try await writer.value, "the second store opened only after the write committed")
            #expect(seen.isEmpty)
            #expect(try store.changes(after: .zero, limit: 100, collections: nil).map(\.key.id) == ["pending"])
        }

        /// Stores of different databases (for PostgreSQL, different schemas of one database: apps,
        /// parallel tests) never wait for each other's writes.
        @Test(arguments: StoreKind.available)
        func storesOfDifferentDatabasesDoNotWaitForEachOthersWrites(kind: StoreKind) async throws {
            let held = try TestStore(kind).store
            let other = try TestStore(kind).store
            let holding = DispatchSemaphore(value: 0)
            let written = DispatchSemaphore(value: 0)
            let writer = Task {
                try await onNewThread {
                    try held.write { transaction in
                        try transaction.saveDocument(try self.document("held", at: try transaction.nextVersion()), at: self.now)
                        holding.signal()
                        return written.wait(timeout: .now() + 10) == .success
                    }
                }
            }
            _ = try await onNewThread { holding.wait(timeout: .now() + 30) } // not forever if the write fails
            let version = try await onNewThread {
                let version = try other.write { transaction in
                    let version = try transaction.nextVersion()
                    try transaction.saveDocument(try self.document("other", at: version), at: self.now)
                    return version
                }
                written.signal()
                return version
            }
            #expect(try await writer.value, "the other store's write waited for the held one")
            #expect(version == Version(1))
        }

        /// While the database cannot be reached (every connection to it reset, the pooled ones and
        /// the new one the retry opens), calls are answered 503; once it can, they succeed again
        /// on new connections.
        @Test(.enabled(if: PostgresTestDatabase.isAvailable, Comment(rawValue: PostgresTestDatabase.skipReason)))
        func aDatabaseThatCannotBeReachedIsA503UntilItIsBack() throws {
            let database = try PostgresTestDatabase()
            var address = try #require(URLComponents(string: database.url))
            let proxy = try FaultProxy(upstreamPort: UInt16(try #require(address.port)))
            defer { proxy.stop() }
            address.host = "127.0.0.1"
            address.port = Int(proxy.port)
            let service = try SyncService(store: try PostgresServerStore(url: try #require(address.string), maximumConnections: 2))
            _ = try service.pull(cursor: nil, caller: .user("ana"))

            proxy.fault = .reset
            proxy.resetConnections()
            let error = #expect(throws: Refusal.self) { try service.pull(cursor: nil, caller: .user("ana")) }
            #expect(error?.statusCode == 503, "\(String(describing: error))")

            proxy.fault = .none
            _ = try service.pull(cursor: nil, caller: .user("ana"))
        }

        /// A database of a newer schema is refused with a clear error, before anything is changed.
        @Test(.enabled(if: PostgresTestDatabase.isAvailable, Comment(rawValue: PostgresTestDatabase.skipReason)))
        func aPostgreSQLDatabaseOfANewerSchemaIsRefused() throws {
            let test = try TestStore(.postgres)
            try PostgresConnection(url: try #require(test.postgresURL)).execute("UPDATE abrova_meta SET number = 4 WHERE key = 'schema'")
            let error = #expect(throws: ServerStoreError.self) { try test.reopened() }
            #expect(error?.message == "the server database has schema version 4; this server reads up to 3")
            #expect(error?.isUnavailable == false)
        }

        /// A client record comes back as it was saved: its text whatever the characters, its answer
        /// byte for byte however large; another user's client of the same id is another record.
        @Test(arguments: StoreKind.available)
        func aClientRecordIsItsUsersAndKeepsItsAnswerByteForByte(kind: StoreKind) throws {
            let test = try TestStore(kind)
            // Every byte value, then 3 MiB of scrambled ones (cheap to make: a test must not hold its thread long).
            let answer = (0..<(3 << 20)).map { index in UInt8(truncatingIfNeeded: index < 256 ? index : (index &* 0x9E37_79B1) >> 16) }
            let digest = (0..<32).map { UInt8(255 - $0) }
            let record = ClientRecord(
                clientID: "Zoë's phone 📱", userID: "zoë-Ωμέγα-用户-👩🏽‍💻", sequence: Int64.max - 1, digest: digest,
                answer: answer)
            try test.store.write { try $0.saveClient(record) }
            #expect(try test.reopened().write { try $0.client(record.clientID, of: record.userID) } == record)
            let bens = ClientRecord(clientID: record.clientID, userID: "ben", sequence: 1, digest: [], answer: [])
            try test.store.write { try $0.saveClient(bens) }
            #expect(try test.store.write { try $0.client(record.clientID, of: "ben") } == bens)
            #expect(try test.store.write { try $0.client(record.clientID, of: record.userID) } == record)
            let next = ClientRecord(clientID: record.clientID, userID: record.userID, sequence: Int64.max, digest: [], answer: [])
            try test.store.write { try $0.saveClient(next) }
            #expect(try test.store.write { try $0.client(record.clientID, of: record.userID) } == next)
            #expect(try test.store.write { try $0.client("Zoe's phone 📱", of: record.userID) } == nil)
            #expect(try test.store.write { try $0.client(record.clientID, of: "zoe") } == nil)
        }

        /// A database of schema 1 (client records keyed by client id alone) is migrated when
        /// opened: its records stay, each its user's, and retries still get their stored answers.
        @Test(arguments: StoreKind.available)
        func aStoreOfSchema1KeepsItsClientRecordsEachItsUsers(kind: StoreKind) throws {
            let test = try TestStore(kind)
            let record = ClientRecord(clientID: "ana-phone", userID: "ana", sequence: 7, digest: [1, 2, 3], answer: Array("{}".utf8))
            try test.store.write { try $0.saveClient(record) }
            try SchemaOne.downgrade(test)
            let reopened = try test.reopened()
            #expect(try reopened.write { try $0.client("ana-phone", of: "ana") } == record)
            let bens = ClientRecord(clientID: "ana-phone", userID: "ben", sequence: 1, digest: [], answer: [])
            try reopened.write { try $0.saveClient(bens) }
            #expect(try reopened.write { try $0.client("ana-phone", of: "ben") } == bens)
            #expect(try reopened.write { try $0.client("ana-phone", of: "ana") } == record)
        }

        /// Changes come in version order, after a version, at most a limit, of the collections asked
        /// for (none when none are), whatever characters the names hold.
        @Test(arguments: StoreKind.available)
        func changesFollowVersionOrderWithinTheCollectionsAskedFor(kind: StoreKind) throws {
            let test = try TestStore(kind)
            let store = test.store
            let collections = ["carts", "orders", #"we"ird, {coll} \ 'name'"#, "NULL", "zoë"]
            var saved: [StoredDocument] = []
            for round in 0..<3 {
                for collection in collections {
                    let key = DocumentKey(collection: collection, id: "ïd \(round) 📦")
                    saved.append(
                        try save(
                            try .create(["name": .string("Zoë \u{0} 📦"), "n": .int(Int64(round))], base: .zero), to: key, owner: "zoë",
                            in: store))
                }
            }
            func changes(after version: Version = .zero, limit: Int = 100, _ collections: [String]?) throws -> [StoredDocument] {
                try store.changes(after: version, limit: limit, collections: collections)
            }
            #expect(saved.map(\.version) == saved.map(\.version).sorted())
            #expect(try changes(nil) == saved)
            #expect(try changes(limit: 4, nil) == Array(saved.prefix(4)))
            #expect(try changes(after: saved[6].version, limit: 3, nil) == Array(saved[7..<10]))
            #expect(try changes(["orders"]) == saved.filter { $0.key.collection == "orders" })
            let odd = [collections[2], collections[3], collections[4]]
            #expect(try changes(odd) == saved.filter { odd.contains($0.key.collection) })
            #expect(try changes(after: saved[5].version, limit: 2, ["carts", "zoë"]) == [saved[9], saved[10]])
            #expect(try changes([]).isEmpty)
            #expect(try changes(["cart", "Carts", "carts "]).isEmpty)
            #expect(try store.document(DocumentKey(collection: "zoë", id: "ïd 2 📦")) == saved.last)
        }

        /// Changes stop within a byte budget of stored state (but always one), so a pull of large
        /// documents reads only what a page can hold; collections still narrow them.
        @Test(arguments: StoreKind.available)
        func changesStopWithinTheirByteBudget(kind: StoreKind) throws {
            let test = try TestStore(kind)
            let store = test.store
            let text = String(repeating: "x", count: 100_000)
            var saved: [StoredDocument] = []
            for index in 0..<6 {
                let key = DocumentKey(collection: index.isMultiple(of: 2) ? "notes" : "other", id: "n\(index)")
                saved.append(try save(try .create(["text": .string(text)], base: .zero), to: key, in: store))
            }
            var stored: [UInt8] = []
            try #require(saved.first).state.writeEncoded(to: &stored)
            let size = stored.count
            #expect(try store.changes(after: .zero, limit: 100, collections: nil, maximumBytes: size * 2 + 1) == Array(saved.prefix(3)))
            #expect(try store.changes(after: .zero, limit: 100, collections: nil, maximumBytes: 1) == [saved[0]])
            #expect(try store.changes(after: saved[3].version, limit: 100, collections: nil, maximumBytes: size) == [saved[4]])
            #expect(try store.changes(after: .zero, limit: 100, collections: ["notes"], maximumBytes: size + 1) == [saved[0], saved[2]])
            #expect(try store.changes(after: .zero, limit: 2, collections: nil, maximumBytes: .max) == Array(saved.prefix(2)))
        }

        /// Purging removes the tombstones deleted before the cutoff, only those, and raises the
        /// horizon to the newest of them; the horizon never goes down.
        @Test(arguments: StoreKind.available)
        func purgingTombstonesRemovesOnlyExpiredOnesAndRaisesTheHorizon(kind: StoreKind) throws {
            let test = try TestStore(kind)
            let store = test.store
            let keys = (1...4).map { DocumentKey(collection: "items", id: "d\($0)") }
            for key in keys { try save(try .create(["n": 1], base: .zero), to: key, in: store) }
            let early = try save(.delete(base: .zero), to: keys[0], at: now, in: store)
            let late = try save(.delete(base: .zero), to: keys[1], at: now + 100, in: store)
            let revived = try save(.delete(base: .zero), to: keys[2], at: now, in: store)
            // Saved again as a live document: no longer a tombstone, whenever it was deleted.
            let live = try store.write { transaction in
                var document = try self.document("d3", at: try transaction.nextVersion())
                document.state = revived.state.applyingLocally(try .create(["n": 2], base: .zero), at: document.version)
                try transaction.saveDocument(document, at: now)
                return document
            }
            #expect(!early.state.exists && !late.state.exists && live.state.exists)
            #expect(try store.tombstoneHorizon() == .zero)
            #expect(try store.purgeTombstones(deletedBefore: now) == .zero, "the cutoff itself is kept")
            #expect(try store.purgeTombstones(deletedBefore: now + 50) == early.version)
            #expect(try store.document(keys[0]) == nil && store.document(keys[1]) == late)
            #expect(try store.purgeTombstones(deletedBefore: now) == early.version, "the horizon never goes down")
            #expect(try store.purgeTombstones(deletedBefore: now + 200) == late.version)
            #expect(try test.reopened().tombstoneHorizon() == late.version)
            #expect(try store.changes(after: .zero, limit: 100, collections: nil).map(\.key.id) == ["d4", "d3"])
            #expect(try store.document(keys[2]) == live)
        }
    }
}
