import AbrovaServer
import AbrovaSync
import AbrovaTestSupport
import Foundation
import Testing

/// An app killed while its manual resolver decides (the user is choosing; the system ends the app)
/// must not lose the device's change: the next start asks the resolver again.
@Suite struct ResolverCrashTests {
    let folder = TemporaryFolder()

    func victim(_ live: LiveSyncServer, resolverDelay: Int?) throws -> ChildProcess {
        try ChildProcess(
            "abrova-chaos-client",
            [
                "drive", "--store", folder.path("victim.sqlite"), "--server", live.url.absoluteString, "--name", "victim",
                "--api-key", LiveSyncServer.apiKey, "--token", LiveSyncServer.token(of: "ana"),
            ], logPath: folder.path("victim-\(resolverDelay == nil ? "after" : "before").log"),
            environment: resolverDelay.map { ["ABROVA_CHAOS_RESOLVER_DELAY_MS": String($0)] } ?? [:], isDriven: true)
    }

    @Test func aDeviceKilledWhileItsResolverDecidesAsksItAgainAtTheNextStart() async throws {
        let live = try LiveSyncServer()
        let other = try Device(live, folder: folder, name: "other") { $0.conflictStrategy(.manual).conflictResolver { _ in .useServer } }
        let first = try victim(live, resolverDelay: 600_000)
        defer { first.kill() }
        let created = try await first.command("set man d x start")
        #expect(created == "ok confirmed", "\(first.log)")
        // Under a loaded run one sync may time out before it pulls: sync until the document is there.
        let pulled = await eventually(30) {
            await other.sync.syncNow()
            return (try? await other.sync.collection("man").document("d").getDocument(source: .cache).data) != nil
        }
        #expect(pulled, "the other device never pulled man/d")
        #expect(try await first.command("disconnect") == "ok")
        #expect(try await first.command("update man d x zz-victim") == "ok pending")
        try await other.sync.collection("man").document("d").updateData(["x": .value(.string("other"))])
        #expect(try await first.command("reconnect") == "ok")
        // The push is answered unresolved; the resolver is deciding when the process dies.
        #expect(await eventually(20) { first.log.contains("resolving man/d") }, "\(first.log)")
        await first.stop()

        let second = try victim(live, resolverDelay: nil)
        defer { second.kill() }
        let key = DocumentKey(collection: "man", id: "d")
        @Sendable func x() -> String? { try? live.service.document(key, caller: .user("ana")).state.document?.mapValue?["x"]?.stringValue }
        let resolved = await eventually(20) {
            _ = try? await second.command("sync")
            return x() == "zz-victim"
        }
        // The resolver keeps the greater x: the device's, had it been asked.
        #expect(resolved, "the server holds x = \(x() ?? "nothing"): the device's change was lost without its resolver deciding")
        _ = try await second.command("quit")
        await live.stop()
    }
}
