import AbrovaPostgres
import AbrovaServer
import AbrovaSync
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

/// Several `abrova serve` processes on one PostgreSQL database, SDK clients on each: the
/// acceptance tests of the PostgreSQL store. Serialized: each runs three servers and six clients,
/// which is plenty for two cores.
@Suite(.serialized, .enabled(if: PostgresTestDatabase.isAvailable, Comment(rawValue: PostgresTestDatabase.skipReason)))
struct MultiServerTests {
    let folder = TemporaryFolder()

    /// Three servers on one database, two clients on each.
    struct Setup {
        let database: PostgresTestDatabase
        let servers: [ServerProcess]
        let clients: [MultiClient]
        let acknowledgements: Acknowledgements

        func close() async {
            for client in clients { await client.sync.close() }
            for server in servers { await server.stop() }
        }
    }

    func start(resendEvery: Int) async throws -> Setup {
        let database = try PostgresTestDatabase()
        // Started together: each opens its pool and checks the schema (under the schema lock).
        let servers = try await withThrowingTaskGroup(of: (Int, ServerProcess).self) { group in
            for index in 0..<3 {
                group.addTask { [folder] in
                    (index, try await ServerProcess.start(databaseURL: database.url, name: "server\(index)", folder: folder))
                }
            }
            var started: [(Int, ServerProcess)] = []
            for try await server in group { started.append(server) }
            return started.sorted { $0.0 < $1.0 }.map(\.1)
        }
        let acknowledgements = Acknowledgements()
        var clients: [MultiClient] = []
        for index in 0..<6 {
            let server = servers[index / 2]
            clients.append(
                try MultiClient(
                    name: "c\(index)", server: server, others: servers.filter { $0 !== server }, folder: folder,
                    acknowledgements: acknowledgements, resendEvery: resendEvery))
        }
        return Setup(database: database, servers: servers, clients: clients, acknowledgements: acknowledgements)
    }

    /// Runs `body` with the setup, which is closed afterwards whether `body` throws or not (the
    /// server processes die with their values in any case).
    func withSetup(resendEvery: Int, _ body: (Setup) async throws -> Void) async throws {
        let setup = try await start(resendEvery: resendEvery)
        do {
            try await body(setup)
        } catch {
            await setup.close()
            throw error
        }
        await setup.close()
    }

    /// Every client writes for a while; returns each one's log.
    func writeConcurrently(_ clients: [MultiClient], until stop: SharedFlag, offline: Set<String>) async throws -> [String: WriteLog] {
        try await withThrowingTaskGroup(of: (String, WriteLog).self) { group in
            for client in clients {
                group.addTask {
                    (client.name, try await MultiServer.write(client, until: stop, goesOffline: offline.contains(client.name)))
                }
            }
            var logs: [String: WriteLog] = [:]
            for try await (name, log) in group { logs[name] = log }
            return logs
        }
    }

    /// Three server processes on one database, six clients (two per server) pushing and pulling
    /// concurrently for three seconds: new notes of their own, and edits of two shared carts
    /// (elements added to and removed from an observed-remove set, each client's own quantity);
    /// half of them go offline now and then and queue. Then every client syncs until quiet and:
    ///
    /// - holds exactly the database's documents (read directly with `PostgresServerStore`);
    /// - every write is in the database as its client last wrote it (`MultiServer.check`);
    /// - exactly once: each note is written once by one client, so the database must hold it at
    ///   the very version its push was acknowledged with (a batch applied again would have moved
    ///   it), and every third answered batch is sent again as is to the two other server processes,
    ///   which must answer it byte for byte as the first one did.
    @Test func threeServersSixClientsConvergeAndEveryAcknowledgedWriteIsThereOnce() async throws {
        let started = ContinuousClock.now
        try await withSetup(resendEvery: 3) { setup in
            try await MultiServer.makeCarts(setup.clients)
            let ready = ContinuousClock.now
            let stop = SharedFlag()
            let stopper = Task {
                try? await Task.sleep(for: .seconds(3))
                stop.value = true
            }
            // Half the clients go offline now and then, so batches of several changes queue up.
            let logs = try await writeConcurrently(setup.clients, until: stop, offline: ["c1", "c3", "c5"])
            _ = await stopper.value
            let written = ContinuousClock.now
            let differences = try await MultiServer.converge(setup.clients, databaseURL: setup.database.url)
            print(
                "multi-server: ready after \(ready - started), wrote for \(written - ready), converged in \(ContinuousClock.now - written)")
            #expect(differences.isEmpty, "\(differences)")
            let stored = try await MultiServer.database(setup.database.url)
            let mismatches = MultiServer.check(logs, database: stored, acknowledgements: setup.acknowledgements)
            #expect(mismatches.isEmpty, "\(mismatches.prefix(10))")
            let writes = logs.values.map(\.notes.count).reduce(0, +)
            let acknowledgements = setup.acknowledgements
            print(
                "multi-server: \(writes) notes, \(acknowledgements.answered.value) pushes answered, "
                    + "\(acknowledgements.resent.value) sent again to the other servers, \(stored.count) documents")
            #expect(acknowledgements.resent.value >= 6, "too few batches were sent again to other servers")
            // Every server process took pushes (its own clients', and batches sent again).
            for server in setup.servers { #expect(server.answers(200, to: "POST /v1/push") > 0, "port \(server.port) took no push") }
        }
        print("multi-server test: \(ContinuousClock.now - started)")
    }

    /// PostgreSQL restarts while three servers serve and clients write. While it is down the
    /// servers answer 503 to the requests that meet the outage (if any do) and the SDK keeps the
    /// writes queued and retries; afterwards the servers
    /// reconnect by themselves (a server that was idle through the restart answers its first
    /// request, although its pooled connections all died), and everything converges.
    ///
    /// The restart is `ABROVA_POSTGRES_RESTART` (CI: `.ci/postgres restart`), run once no other
    /// test of this process holds a database. Without it, the outage is made with
    /// `pg_terminate_backend` over a `PostgresConnection`, again and again for a second: not on
    /// every other backend of the database, which other tests running meanwhile use, but on the
    /// three servers' (found by their `application_name`). New connections are then not refused,
    /// only cut, so fewer requests fail.
    @Test func postgresRestartsMidRunAndClientsKeepTheirQueuesAndEverythingConverges() async throws {
        let started = ContinuousClock.now
        try await withSetup(resendEvery: 0) { setup in
            try await MultiServer.makeCarts(setup.clients)
            let idleServer = setup.servers[2]
            // The clients of servers 0 and 1 write through the outage; those of server 2 are
            // offline on purpose meanwhile, and queue.
            let queueingClients = Array(setup.clients.suffix(2))
            let stop = SharedFlag()
            let writers = Task { try await writeConcurrently(setup.clients, until: stop, offline: []) }
            defer { writers.cancel() }
            try await Task.sleep(for: .milliseconds(500))

            // Server 2 goes idle with several pooled connections (concurrent pushes open them),
            // all of which the restart will cut.
            for client in queueingClients { await client.sync.disconnect() }
            try await Task.sleep(for: .milliseconds(300)) // a run in flight ends
            var pooled = 0
            for _ in 0..<10 where pooled < 2 {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<8 {
                        group.addTask {
                            let body = #"{"batchSeq":1,"changes":[],"clientId":"warm-\#(UUID().uuidString)","strategy":"merge"}"#
                            _ = try await idleServer.send("POST", "/v1/push", body: Array(body.utf8))
                        }
                    }
                    try await group.waitForAll()
                }
                pooled = try await backends(of: idleServer)
            }
            #expect(pooled >= 2, "server 2 holds \(pooled) connections")
            let failedBefore = setup.acknowledgements.failed.value
            let probeStatuses = Locked<[Int]>([])

            if PostgresTestDatabase.restartCommand != nil {
                // Reads of server 0 throughout the restart: each must be answered 200 or 503.
                let probing = SharedFlag()
                probing.value = true
                let probe = Task { [server = setup.servers[0], probeStatuses] in
                    while probing.value {
                        if let answer = try? await server.send("GET", "/v1/pull?limit=1") {
                            probeStatuses.update { $0.append(answer.status) }
                        }
                        try? await Task.sleep(for: .milliseconds(20))
                    }
                }
                let took = try await setup.database.restartServer()
                probing.value = false
                await probe.value
                print("multi-server restart: PostgreSQL restarted in \(took)")
            } else {
                try await terminateBackends(of: setup.servers, for: .seconds(1))
            }

            // Server 2 was idle throughout: its first request after the restart must find the
            // database, not a pooled connection that died with the old server.
            let first = try await idleServer.send("GET", "/v1/pull?limit=1")
            #expect(first.status == 200, "server 2 answered \(first.status) \(String(decoding: first.body, as: UTF8.self))")

            var queued = 0
            for client in queueingClients { queued += await client.sync.pendingCount }
            try await Task.sleep(for: .milliseconds(700))
            for client in queueingClients { await client.sync.reconnect() }
            try await Task.sleep(for: .milliseconds(500))
            stop.value = true
            let logs = try await writers.value

            let differences = try await MultiServer.converge(setup.clients, databaseURL: setup.database.url)
            #expect(differences.isEmpty, "\(differences)")
            let stored = try await MultiServer.database(setup.database.url)
            let mismatches = MultiServer.check(logs, database: stored, acknowledgements: setup.acknowledgements)
            #expect(mismatches.isEmpty, "\(mismatches.prefix(10))")
            for client in setup.clients { #expect(await client.sync.pendingCount == 0, "\(client.name)") }

            let failed = setup.acknowledgements.failed.value - failedBefore
            let unavailable = setup.servers.map { $0.answers(503) }
            print(
                "multi-server restart: \(logs.values.map(\.notes.count).reduce(0, +)) notes; \(failed) pushes failed during the outage; "
                    + "503 answers by server \(unavailable); \(queued) writes queued by the clients of server 2")
            #expect(queued > 0, "the clients of server 2 queued nothing")
            // Whether a request met the outage is timing (in CI the restart can fall between
            // them); `aDatabaseThatCannotBeReachedIsA503UntilItIsBack` shows the 503 for sure. What
            // must hold here: no answer but 200 or 503, and nothing lost (checked above).
            let odd = probeStatuses.value.filter { $0 != 200 && $0 != 503 }
            #expect(odd.isEmpty, "server 0 answered \(odd) during the restart")
            print(
                "multi-server restart: server 0 answered \(probeStatuses.value.count) reads during it, "
                    + "\(probeStatuses.value.filter { $0 == 503 }.count) of them 503")
        }
        print("multi-server restart test: \(ContinuousClock.now - started)")
    }

    /// How many connections `server` holds to the database.
    func backends(of server: ServerProcess) async throws -> Int {
        guard let url = PostgresTestDatabase.serverURL else { throw Failure(PostgresTestDatabase.skipReason) }
        let name = server.applicationName
        return try await onNewThread {
            let statement = PostgresStatement(
                "count_backends", "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                parameters: [.text])
            return Int(try PostgresConnection(url: url).run(statement, [.text(name)]).integer(0, 0))
        }
    }

    /// Terminates the servers' backends, again and again for `duration`.
    func terminateBackends(of servers: [ServerProcess], for duration: Duration) async throws {
        guard let url = PostgresTestDatabase.serverURL else { throw Failure(PostgresTestDatabase.skipReason) }
        let names = servers.map(\.applicationName)
        let terminated = try await onNewThread {
            let connection = try PostgresConnection(url: url)
            let statement = PostgresStatement(
                "terminate",
                """
                SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                WHERE application_name = ANY($1) AND pid <> pg_backend_pid()
                """, parameters: [.texts])
            var terminated = 0
            let end = ContinuousClock.now + duration
            while ContinuousClock.now < end {
                terminated += Int(try connection.run(statement, [.texts(names)]).integer(0, 0))
                Thread.sleep(forTimeInterval: 0.01)
            }
            return terminated
        }
        print("multi-server restart: terminated \(terminated) backends of the servers (no ABROVA_POSTGRES_RESTART)")
    }
}
