import AbrovaCore
import AbrovaServer
import AbrovaSync
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

/// The seed's first test: the app is killed between its local commit and the push. A writer
/// process (`abrova-store-writer`) writes to a device store and is killed with SIGKILL at random
/// moments, never having synced; then the SDK opens that store against the real server and must
/// send every write whose call returned, each applied once, nothing half written.
@Suite struct KillBeforePushTests {
    let folder = TemporaryFolder()

    @Test func writesCommittedBeforeAKillArePushedOnceWhenTheAppStartsAgain() async throws {
        let writer = try #require(
            BuiltExecutable.url(named: "abrova-store-writer"), "abrova-store-writer is not built; run swift build first")
        let live = try LiveSyncServer()
        let seed = UInt64.random(in: 0...UInt64.max)
        var generator = SplitMix64(seed: seed)
        print("kill before push: seed \(seed)")
        var acknowledged: Set<Int> = []
        var next = 0
        let rounds = 8
        for round in 0..<rounds {
            // The store the device below opens.
            let process = try SpawnedProcess(writer.path, [folder.path("device.sqlite"), String(next)], standardOutput: .pipe)
            let output = try #require(process.output)
            try await Task.sleep(for: .milliseconds(Int(30 + generator.next() % 120)))
            process.kill()
            let termination = await process.exited()
            #expect(termination == .signalled(SIGKILL), "round \(round): the writer stopped by itself (\(String(describing: termination)))")
            // Reads to the end (the pipe closes with the process), off the concurrency threads.
            let text = try await onNewThread { String(decoding: output.readDataToEndOfFile(), as: UTF8.self) }
            // Only whole lines: the kill may cut the last.
            let indices = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().compactMap { Int($0) }
            acknowledged.formUnion(indices)
            // A write may have committed without its line: the next round starts past the last
            // line, and writes the same document with the same data if so.
            next = (indices.max() ?? next - 1) + 1
        }
        #expect(acknowledged.count > 10, "the writer barely wrote: \(acknowledged.count) writes")

        let device = try Device(live, folder: folder) // starts a sync at once
        let sent = await eventually(60) { await device.sync.pendingCount == 0 }
        let pending = await device.sync.pendingCount
        #expect(sent, "writes still pending: \(pending)")

        var documents: [ServerDocument] = []
        var cursor: String?
        repeat {
            let page = try live.service.pull(cursor: cursor, limit: 1_000, caller: .user("ana"))
            documents += page.documents
            cursor = page.hasMore ? page.cursor : nil
        } while cursor != nil
        var present: Set<Int> = []
        for document in documents {
            let fields = document.state.document?.mapValue
            let a = fields?["a"]?.intValue
            #expect(
                document.key.collection == "kill" && a != nil && fields?["b"]?.intValue == a && document.key.id == "k\(a ?? -1)",
                "\(document.key) is not a whole write: \(String(describing: fields))")
            if let a { present.insert(Int(a)) }
        }
        let lost = acknowledged.subtracting(present).sorted()
        let noneLost = lost.isEmpty
        #expect(noneLost, "\(lost.count) acknowledged writes not on the server, first \(lost.prefix(10))")
        // Each applied once: the server's versions count its applied changes, one a document.
        let versions = documents.map(\.version)
        #expect(
            Set(versions).count == versions.count && versions.max() == Version(rawValue: UInt64(versions.count)),
            "\(versions.count) documents, versions up to \(String(describing: versions.max()))")
        // The device holds what the server holds.
        let onDevice = try await device.sync.collection("kill").getDocuments()
        #expect(onDevice.count == documents.count && onDevice.allSatisfy { !$0.metadata.hasPendingWrites })
        print("kill before push: \(rounds) kills, \(acknowledged.count) acknowledged writes, \(present.count) on the server")
        await live.stop()
    }
}
