#if os(Linux)
    import AbrovaCore
    import AbrovaTestSupport
    import AbrovaWire
    import Foundation

    /// The server's peak memory while 1 and 8 clients pull documents near the 1 MiB limit at once, as
    /// an `abrova serve` process on SQLite: pages are cut at `maximumPageBytes` (8 MiB), so each pull
    /// in flight should cost a few pages' worth, whatever the data set. The baseline is that budget:
    /// the pulls in flight times one page.
    struct PullMemoryBenchmarks {
        let options: BenchmarkOptions
        static let documentBytes = 900_000
        static let pageBudget = 8 << 20

        func run(into report: inout BenchmarkReport) throws {
            guard let executable = ProcessBenchmarks.abrovaExecutable() else {
                print("pull memory: skipped, abrova is not built (swift build -c release)")
                return
            }
            let documents = options.isQuick ? 40 : 160
            let folder = TemporaryFolder()
            let database = folder.path("server.sqlite")
            let server = try ServeProcess(executable: executable, store: ["--database", database], log: folder.path("serve.log"))
            defer { server.stop() }
            let pid = try Self.serverProcess(using: database)
            try fill(server.port, documents: documents)
            let idle = InitialSyncDevice.residentKiB("VmRSS", of: "\(pid)")
            print("pull memory: \(documents) documents of \(Self.documentBytes / 1_000) kB, server idle at \(idle / 1024) MiB")
            for clients in [1, 8] {
                Self.resetPeak(pid)
                let port = server.port
                _ = try runConcurrently(clients) { _ in try Self.pullAll(port) }
                let growth = max(0, InitialSyncDevice.residentKiB("VmHWM", of: "\(pid)") - idle) * 1024
                let budget = clients * Self.pageBudget
                let ratio = Double(growth) / Double(budget)
                report.add(
                    BenchmarkRow(
                        name:
                            "server: peak memory over idle, \(clients) concurrent pull(s) of \(documents) × \(Self.documentBytes / 1_000) kB",
                        figure: "\(growth >> 20) MiB", baseline: "\(budget >> 20) MiB (pulls × 8 MiB page)", ratio: ratio,
                        goal: "≤ 6×", isGoalMet: ratio <= 6))
            }
        }

        /// Pushes the documents as one user, a few to a batch (a push body is at most 16 MiB).
        private func fill(_ port: UInt16, documents: Int) throws {
            let connection = try RawHTTPConnection(port: port)
            let note = String(repeating: "n", count: Self.documentBytes)
            var sequence: Int64 = 0
            for start in stride(from: 0, to: documents, by: 8) {
                sequence += 1
                let changes = try (start..<min(documents, start + 8)).map { index in
                    BatchChange(
                        key: DocumentKey(collection: "notes", id: "n\(index)"),
                        delta: try DocumentDelta.create(["text": .string(note), "n": .int(Int64(index))], base: .zero), writes: 1)
                }
                let request = PushRequest(batch: Batch(clientID: "filler", sequence: sequence, changes: changes), strategy: .serverWins)
                try ServerBenchmarks.push([request], as: 0, on: connection, level: 1)
            }
        }

        /// Pulls every page as the user who wrote them.
        private static func pullAll(_ port: UInt16) throws {
            let connection = try RawHTTPConnection(port: port, receiveTimeoutSeconds: 60)
            var cursor: String?
            repeat {
                let query =
                    "limit=1000" + (cursor.map { "&cursor=\($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $0)" } ?? "")
                try connection.send(
                    "GET /v1/pull?\(query) HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: bench\r\nAuthorization: Bearer user-0\r\n\r\n")
                let response = try connection.readResponse()
                guard response.status == 200 else { throw BenchmarkFailure("pull answered \(response.status)") }
                let page = try PullResponse(body: response.body)
                cursor = page.hasMore ? page.cursor : nil
            } while cursor != nil
        }

        /// The `abrova serve` process on `database` (the supervising shell's grandchild).
        private static func serverProcess(using database: String) throws -> Int32 {
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
            for entry in entries {
                guard let pid = Int32(entry), let raw = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline") else { continue }
                let arguments = raw.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
                if arguments.first?.hasSuffix("/abrova") == true, arguments.contains(database) { return pid }
            }
            throw BenchmarkFailure("the abrova serve process on \(database) was not found")
        }

        /// Starts VmHWM again from the current resident size (clear_refs 5).
        private static func resetPeak(_ pid: Int32) {
            try? "5".write(toFile: "/proc/\(pid)/clear_refs", atomically: false, encoding: .utf8)
        }
    }
#endif
