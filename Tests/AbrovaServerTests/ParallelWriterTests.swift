import AbrovaCore
import AbrovaPostgres
import AbrovaTestSupport
import AbrovaWire
import Dispatch
import Foundation
import Testing

@testable import AbrovaServer

extension ServerSuites {
    /// Writers on PostgreSQL run in parallel, in one process or several: a write holds only its
    /// client's and its documents' rows, and a pull reads only below the smallest ticket of a
    /// write in progress (Spec/storage.md, "No skipped changes").
    @Suite(.enabled(if: PostgresTestDatabase.isAvailable, Comment(rawValue: PostgresTestDatabase.skipReason)))
    struct ParallelWriterTests {
        let now = Date(timeIntervalSince1970: 1_800_000_000)

        func document(_ id: String, at version: Version) throws -> StoredDocument {
            var state = DocumentState()
            state.applyLocally(try .create(["id": .string(id)], base: .zero), at: version)
            return StoredDocument(key: DocumentKey(collection: "items", id: id), owner: "ana", version: version, state: state)
        }

        @Test func aWriteToAnotherDocumentCommitsWhileOneIsHeldAndAPullWaitsForTheHeldOne() async throws {
            let test = try TestStore(.postgres)
            let first = test.store
            let second = try test.reopened()
            let holding = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let held = Task {
                try await onNewThread {
                    try first.write { transaction in
                        let version = try transaction.nextVersion()
                        try transaction.saveDocument(try self.document("held", at: version), at: self.now)
                        holding.signal()
                        release.wait()
                        return version
                    }
                }
            }
            try await onNewThread { holding.wait() }
            // Another process writes another document: it does not wait for the held one.
            let other = try await onNewThread {
                try second.write { transaction in
                    let version = try transaction.nextVersion()
                    try transaction.saveDocument(try self.document("other", at: version), at: self.now)
                    return version
                }
            }
            // Committed, but above the held write's ticket: no pull shows it yet.
            #expect(try second.changes(after: .zero, limit: 100, collections: nil).isEmpty)
            #expect(try second.latestVersion() < other)
            release.signal()
            let heldVersion = try await held.value
            #expect(heldVersion < other)
            #expect(try second.changes(after: .zero, limit: 100, collections: nil).map(\.key.id) == ["held", "other"])
            #expect(try second.latestVersion() == other)
        }

        @Test func aVanishedWritersTicketHoldsPullsBackOnlyUntilItsLeaseEnds() async throws {
            let test = try TestStore(.postgres)
            let url = try #require(test.postgresURL)
            // A writer registered and vanished (its process died before it could remove its ticket).
            try PostgresConnection(url: url).execute(
                """
                INSERT INTO abrova_writing (id, ticket, expires_at)
                SELECT 42, CASE WHEN is_called THEN last_value + 1 ELSE last_value END,
                       clock_timestamp() + interval '400 milliseconds' FROM abrova_versions
                """)
            _ = try test.store.write { transaction in
                try transaction.saveDocument(try self.document("after", at: try transaction.nextVersion()), at: self.now)
            }
            #expect(try test.store.changes(after: .zero, limit: 100, collections: nil).isEmpty)
            try await Task.sleep(for: .milliseconds(600))
            _ = try test.store.changes(after: .zero, limit: 100, collections: nil) // removes the expired ticket
            #expect(try test.store.changes(after: .zero, limit: 100, collections: nil).map(\.key.id) == ["after"])
        }

        @Test func aWriteThatOutlivesItsLeaseDoesNotCommit() async throws {
            let test = try TestStore(.postgres)
            let url = try #require(test.postgresURL)
            let store = try PostgresServerStore(url: url, maximumConnections: 2, writerLease: .milliseconds(200))
            let attempts = Locked(0)
            let written = try await onNewThread {
                try store.write { transaction in
                    attempts.update { $0 += 1 }
                    let version = try transaction.nextVersion()
                    try transaction.saveDocument(try self.document("slow", at: version), at: self.now)
                    // The first try is slow: its ticket expires and a pull removes it.
                    if attempts.value == 1 {
                        Thread.sleep(forTimeInterval: 0.4)
                        _ = try store.changes(after: .zero, limit: 100, collections: nil)
                    }
                    return version
                }
            }
            #expect(attempts.value >= 2, "the first try committed after its lease") // a slow machine may need a third
            #expect(try store.changes(after: .zero, limit: 100, collections: nil).map(\.version) == [written])
        }

        @Test func aWriteWhoseTicketCannotBeRegisteredLeavesItsConnectionUsable() async throws {
            let test = try TestStore(.postgres)
            let url = try #require(test.postgresURL)
            let store = try PostgresServerStore(url: url, maximumConnections: 1)
            let admin = try PostgresConnection(url: url)
            try admin.execute("ALTER TABLE abrova_writing RENAME TO abrova_writing_away")
            #expect(throws: (any Error).self) {
                try store.write { transaction in
                    try transaction.saveDocument(try self.document("never", at: try transaction.nextVersion()), at: self.now)
                }
            }
            try admin.execute("ALTER TABLE abrova_writing_away RENAME TO abrova_writing")
            // The one connection serves on: it was not left in a failed transaction.
            _ = try store.write { transaction in
                try transaction.saveDocument(try self.document("after", at: try transaction.nextVersion()), at: self.now)
            }
            #expect(try store.changes(after: .zero, limit: 10, collections: nil).map(\.key.id) == ["after"])
        }

        /// A watch woken by a commit above a write in progress sees nothing yet; the end of that
        /// write wakes it again, even when it saved nothing.
        @Test func theEndOfAWriteThatSavedNothingWakesTheWatchesItHeldBack() async throws {
            let test = try TestStore(.postgres)
            var configuration = ServiceConfiguration()
            configuration.watchIdleTime = .seconds(20)
            let watching = try SyncService(
                store: try PostgresServerStore(url: try #require(test.postgresURL)), configuration: configuration)
            let start = try watching.pull(cursor: nil, caller: .user("ana")).cursor
            let answered = Locked<Bool?>(nil)
            let waiting = try watching.prepareWatch(cursor: start, caller: .user("ana")).wait { changed in answered.update { $0 = changed }
            }
            defer { waiting.cancel() }
            let holding = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let held = Task {
                try await onNewThread {
                    try test.store.write { transaction in
                        // A write that saves nothing (a retried batch, a refused one) but reads.
                        _ = try transaction.client("client-a", of: "ana")
                        holding.signal()
                        release.wait()
                    }
                }
            }
            try await onNewThread { holding.wait() }
            _ = try await onNewThread {
                try test.store.write { transaction in
                    try transaction.saveDocument(try self.document("above", at: try transaction.nextVersion()), at: self.now)
                }
            }
            try await Task.sleep(for: .milliseconds(500)) // the watch looked, and saw nothing readable yet
            #expect(answered.value == nil)
            release.signal()
            try await held.value
            let deadline = ContinuousClock.now + .seconds(10)
            while answered.value == nil && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            #expect(answered.value == true)
        }

        /// One client's batch sent to two processes at once (a retry on another server while the
        /// first try is still in flight) is applied once: the second waits on the client's record
        /// and is answered from it. An increment shows a double application.
        @Test func oneBatchSentToTwoProcessesAtOnceCountsOnce() async throws {
            let test = try TestStore(.postgres)
            let services = [try SyncService(store: test.store), try SyncService(store: try test.reopened())]
            let counter = DocumentKey(collection: "items", id: "counter")
            let create = PushRequest(
                batch: Batch(
                    clientID: "setup", sequence: 1,
                    changes: [BatchChange(key: counter, delta: try .create(["n": 0], base: .zero), writes: 1)]),
                strategy: .merge)
            _ = try services[0].push(create, caller: .user("ana"))
            let rounds = 30
            for round in 0..<rounds {
                let request = PushRequest(
                    batch: Batch(
                        clientID: "phone-\(round)", sequence: 1,
                        changes: [
                            BatchChange(key: counter, delta: try .update(increments: [try FieldPath("n"): 1], base: Version(1)), writes: 1)
                        ]),
                    strategy: .merge)
                let answers = try await withThrowingTaskGroup(of: [UInt8].self) { group in
                    for service in services {
                        group.addTask { try await onNewThread { try service.push(request, caller: .user("ana")) } }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                #expect(answers[0] == answers[1], "round \(round): both tries get the same answer")
            }
            let saved = try #require(try test.store.document(counter))
            #expect(saved.state.document?.mapValue?["n"] == .int(Int64(rounds)))
        }

        @Test func aVersionSequenceThatCachesIsRefused() throws {
            let test = try TestStore(.postgres)
            try PostgresConnection(url: try #require(test.postgresURL)).execute("ALTER SEQUENCE abrova_versions CACHE 50")
            let error = #expect(throws: ServerStoreError.self) { try test.reopened() }
            #expect(error?.message.contains("must be CACHE 1") == true, "\(String(describing: error))")
        }

        @Test func twoProcessesCreatingOneDocumentJoinBothWrites() async throws {
            let test = try TestStore(.postgres)
            let stores = [test.store, try test.reopened()]
            let key = DocumentKey(collection: "items", id: "shared")
            let ready = DispatchSemaphore(value: 0)
            let go = DispatchSemaphore(value: 0)
            // Both read the document as missing, then both create it: one commits, the other
            // meets it and runs again on what the first wrote.
            let writes = (0..<2).map { index in
                Task {
                    try await onNewThread {
                        var isFirstTry = true
                        return try stores[index].write { transaction in
                            _ = try transaction.client("writer-\(index)", of: "tester", preparing: [key], forBatch: 1)
                            let before = try transaction.document(key)
                            if isFirstTry {
                                isFirstTry = false
                                ready.signal()
                                go.wait()
                            }
                            var state = before?.state ?? DocumentState()
                            let version = try transaction.nextVersion()
                            let field = "by\(index)"
                            let delta: DocumentDelta =
                                if let before {
                                    try .update(set: [try FieldPath(field): true], base: before.version)
                                } else {
                                    try .create([field: true], base: .zero)
                                }
                            state.applyLocally(delta, at: version)
                            try transaction.saveDocument(
                                StoredDocument(key: key, owner: "ana", version: version, state: state), at: self.now)
                        }
                    }
                }
            }
            try await onNewThread {
                ready.wait()
                ready.wait()
                go.signal()
                go.signal()
            }
            for write in writes { try await write.value }
            let saved = try #require(try test.store.document(key))
            #expect(saved.state.document == ["by0": true, "by1": true])
        }
    }
}

extension ServerSuites.ParallelWriterTests {
    /// Three server stores on one database, one of them through a proxy that delays every chunk
    /// (so its commits come late), write new documents from several threads each while pullers on
    /// every store follow from their cursors: every puller ends with every document, so none
    /// passed one that committed late.
    @Test func pullersFollowingSlowAndFastWritersMissNothing() async throws {
        let test = try TestStore(.postgres)
        let url = try #require(test.postgresURL)
        let slow = try Self.delayingProxy(to: url, each: .milliseconds(3))
        defer { slow.stop() }
        let slowURL = try #require(Self.url(url, through: slow.port))
        let stores: [any ServerStore] = [
            test.store, try test.reopened(), try PostgresServerStore(url: slowURL, maximumConnections: 4),
        ]
        let writersPerStore = 3
        let documentsPerWriter = 40
        let writing = Locked(true)
        let pullers = (0..<stores.count).map { index in
            Task {
                try await onNewThread {
                    var cursor = Version.zero
                    var seen = Set<String>()
                    var pulls = 0
                    func pullAll() throws {
                        while true {
                            let page = try stores[index].changes(after: cursor, limit: 50, collections: nil)
                            for document in page { seen.insert(document.key.id) }
                            pulls += 1
                            guard let last = page.last?.version else { return }
                            cursor = last
                        }
                    }
                    while writing.value { try pullAll() }
                    try pullAll()
                    return (seen, pulls)
                }
            }
        }
        let writers = (0..<(stores.count * writersPerStore)).map { writer in
            Task {
                try await onNewThread {
                    for number in 0..<documentsPerWriter {
                        _ = try stores[writer % stores.count].write { transaction in
                            let version = try transaction.nextVersion()
                            try transaction.saveDocument(try self.document("w\(writer)-\(number)", at: version), at: self.now)
                        }
                    }
                }
            }
        }
        for writer in writers { try await writer.value }
        writing.update { $0 = false }
        let expected = Set((0..<(stores.count * writersPerStore)).flatMap { writer in (0..<documentsPerWriter).map { "w\(writer)-\($0)" } })
        for (index, puller) in pullers.enumerated() {
            let (seen, pulls) = try await puller.value
            #expect(seen == expected, "puller \(index) after \(pulls) pulls misses \(expected.subtracting(seen).sorted().prefix(5))")
        }
    }

    /// A write whose connection is lost once its ticket is registered (the network drops, the
    /// database restarts) runs again on a new connection and removes the lost try's ticket, which
    /// would otherwise hold every pull back for its whole lease.
    @Test func aWriteWhoseConnectionIsLostLeavesNoTicketHoldingPullsBack() async throws {
        let test = try TestStore(.postgres)
        let url = try #require(test.postgresURL)
        let proxy = try Self.delayingProxy(to: url, each: .zero)
        defer { proxy.stop() }
        let store = try PostgresServerStore(url: try #require(Self.url(url, through: proxy.port)), maximumConnections: 2)
        let holding = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let tries = Locked(0)
        let written = Task {
            try await onNewThread {
                try store.write { transaction in
                    let isFirst = tries.update { count in
                        count += 1
                        return count == 1
                    }
                    _ = try transaction.client("client-a", of: "ana") // the ticket is registered with it
                    if isFirst {
                        holding.signal()
                        release.wait()
                    }
                    let version = try transaction.nextVersion()
                    try transaction.saveDocument(try self.document("after", at: version), at: self.now)
                    return version
                }
            }
        }
        try await onNewThread { holding.wait() }
        proxy.resetConnections() // the first try's connection is gone, its ticket committed
        release.signal()
        let version = try await written.value
        #expect(tries.value == 2)
        let tickets = try PostgresConnection(url: url).run(
            PostgresStatement("count_tickets", "SELECT count(*)::bigint FROM abrova_writing"))
        #expect(tickets.integer(0, 0) == 0)
        #expect(try test.store.latestVersion() == version)
        #expect(try test.store.changes(after: .zero, limit: 10, collections: nil).map(\.key.id) == ["after"])
    }

    /// A proxy to the PostgreSQL server `url` names that delays every chunk `each` way.
    static func delayingProxy(to url: String, each delay: Duration) throws -> FaultProxy {
        let port = try #require(URLComponents(string: url)?.port.flatMap(UInt16.init(exactly:)))
        let proxy = try FaultProxy(upstreamPort: port)
        proxy.fault = .latency(delay)
        return proxy
    }

    /// `url` with its host and port those of a local proxy.
    static func url(_ url: String, through port: UInt16) -> String? {
        guard var components = URLComponents(string: url) else { return nil }
        components.host = "127.0.0.1"
        components.port = Int(port)
        return components.string
    }
}
