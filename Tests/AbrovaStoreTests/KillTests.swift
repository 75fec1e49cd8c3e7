import AbrovaCore
import AbrovaSQLite
import AbrovaTestSupport
import Foundation
import Testing

@testable import AbrovaStore

/// A writer process is killed with SIGKILL at random moments; after each kill, every write whose
/// call had returned must be in the store with its pending change, each transaction whole, and
/// SQLite's integrity check must pass.
@Suite struct KillTests {
    let folder = TemporaryFolder()

    @Test func everyAcknowledgedWriteSurvivesSIGKILL() async throws {
        let writer = try #require(
            BuiltExecutable.url(named: "abrova-store-writer"), "abrova-store-writer is not built; run swift build first")
        let file = folder.path("store.sqlite")
        var generator = SplitMix64(seed: UInt64.random(in: 0...UInt64.max))
        var acknowledged: Set<Int> = []
        var next = 0
        let rounds = 50
        print("kill test: \(rounds) rounds")
        for round in 0..<rounds {
            let process = try SpawnedProcess(writer.path, [file, String(next)], standardOutput: .pipe)
            let output = try #require(process.output)
            // Let it open the store and write for a random while, then kill it mid-flight.
            try await Task.sleep(for: .milliseconds(Int(20 + generator.next() % 80)))
            process.kill()
            let termination = await process.exited()
            #expect(termination == .signalled(SIGKILL), "round \(round): the writer stopped by itself (\(String(describing: termination)))")
            // It is gone, and it held the only write end: the read ends at once.
            let text = String(decoding: output.readDataToEndOfFile(), as: UTF8.self)
            // A line without its newline may have been cut by the kill: only whole lines count.
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
            for line in lines { if let index = Int(line) { acknowledged.insert(index) } }

            // SQLite's own check first: the store keeps the file to itself while it is open.
            let integrity = try Database(path: file).queryFirst("PRAGMA integrity_check") { $0.text(0) }
            #expect(integrity == "ok", "round \(round): \(String(describing: integrity))")
            let store = try LocalStore(path: file)
            let documents = try await store.documents(matching: DocumentQuery(collection: "kill"))
            for document in documents {
                let a = document.data?[path("a")]
                #expect(a != nil && a == document.data?[path("b")], "round \(round): \(document.key) is half written")
                #expect(document.metadata.hasPendingWrites)
            }
            let present = Set(documents.compactMap { $0.data?[path("a")]?.intValue }.map { Int($0) })
            let missing = acknowledged.subtracting(present)
            #expect(missing.isEmpty, "round \(round): acknowledged writes lost: \(missing.sorted().prefix(10))")
            #expect(await store.unsentWriteCount == documents.count, "round \(round): pending count")
            next = (present.max() ?? -1) + 1
        }
        // Every write made it into a pending change: one batch holds them all, in order.
        let store = try LocalStore(path: file)
        let batch = try #require(try await store.freezeBatch())
        #expect(batch.batch.changes.count == next)
        #expect(batch.batch.changes.map(\.key.id) == (0..<next).map { "k\($0)" })
        print("kill test: \(acknowledged.count) acknowledged writes, \(next) in the store")
        // Enough writes that kills land mid-write; the bound is loose for a loaded machine.
        #expect(acknowledged.count > 10, "the writer barely wrote: \(acknowledged.count) writes")
    }
}
