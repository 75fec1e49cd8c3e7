import AbrovaCore
import AbrovaServer
import AbrovaSync
import AbrovaTestSupport
import Foundation
import Testing

/// The seed's "set a device clock a day ahead and confirm sync still behaves": one device is an
/// `abrova-chaos-client` process under libfaketime (`faketime -f +1d`), the other an SDK instance
/// in the test with the machine's clock. The SDK reads no wall clock: versions come from the server,
/// so the order of arrival decides, and the device ahead gains nothing.
@Suite struct DeviceClockTests {
    let folder = TemporaryFolder()

    static let faketime = ["/usr/bin/faketime", "/usr/local/bin/faketime"].first { FileManager.default.isExecutableFile(atPath: $0) }
    static let isCI = ProcessInfo.processInfo.environment["CI"] == "true"

    func serverValue(_ live: LiveSyncServer, _ collection: String, _ id: String) throws -> (value: String?, version: Version) {
        let document = try live.service.document(DocumentKey(collection: collection, id: id), caller: .user("ana"))
        return (document.state.document?.mapValue?["x"]?.stringValue, document.version)
    }

    // In CI a missing faketime fails the test (below); elsewhere the test is skipped with the reason.
    @Test(.enabled(if: DeviceClockTests.faketime != nil || DeviceClockTests.isCI, "faketime is not installed (apt-get install faketime)"))
    func aDeviceWhoseClockIsADayAheadGetsNoAdvantageAndMissesNothing() async throws {
        let faketime = try #require(Self.faketime, "faketime is not installed: CI installs it (.ci/run)")
        let live = try LiveSyncServer()
        let ahead = try ChildProcess(
            "abrova-chaos-client",
            [
                "drive", "--store", folder.path("ahead.sqlite"), "--server", live.url.absoluteString, "--name", "ahead",
                "--api-key", LiveSyncServer.apiKey, "--token", LiveSyncServer.token(of: "ana"),
            ], logPath: folder.path("ahead.log"), launcher: [faketime, "-f", "+1d"], isDriven: true)
        defer { ahead.kill() }
        let normal = try Device(live, folder: folder, name: "normal") {
            $0.conflictStrategy(.clientWins, for: "cw").conflictStrategy(.serverWins, for: "sw")
        }

        // The fake clock took effect in the child: a day ahead of ours.
        let answer = try await ahead.command("now")
        let childNow = try #require(Double(answer.dropFirst("now ".count)), "the child said \(answer)")
        let ahead24h = childNow - Date().timeIntervalSince1970
        #expect(abs(ahead24h - 86_400) < 600, "the child's clock is \(ahead24h) s ahead, not a day")

        // Online, interleaved, one register under last-writer-wins (clientWins): each write that
        // arrives later wins, whichever device's clock says what; versions only grow.
        #expect(try await ahead.command("set cw t x ahead-0") == "ok confirmed")
        await normal.sync.syncNow()
        var versions: [Version] = []
        for round in 1...3 {
            #expect(try await ahead.command("update cw t x ahead-\(round)") == "ok confirmed")
            #expect(try serverValue(live, "cw", "t").value == "ahead-\(round)")
            versions.append(try serverValue(live, "cw", "t").version)
            try await normal.sync.collection("cw").document("t").updateData(["x": .value(.string("normal-\(round)"))])
            #expect(try serverValue(live, "cw", "t").value == "normal-\(round)", "the later write wins, though its clock is a day behind")
            versions.append(try serverValue(live, "cw", "t").version)
        }
        #expect(versions == versions.sorted() && Set(versions).count == versions.count, "versions follow arrival: \(versions)")

        // Offline edits of one register from the same base; the device behind arrives last.
        // clientWins: its write stands. serverWins: the first to arrive stands. Either way the
        // device ahead gains nothing from its clock.
        for collection in ["cw", "sw"] {
            #expect(try await ahead.command("set \(collection) race x start") == "ok confirmed")
        }
        await normal.sync.syncNow()
        #expect(try await ahead.command("disconnect") == "ok")
        await normal.sync.disconnect()
        for collection in ["cw", "sw"] {
            #expect(try await ahead.command("update \(collection) race x ahead") == "ok pending")
            try await normal.sync.collection(collection).document("race").updateData(["x": .value(.string("normal"))])
        }
        #expect(try await ahead.command("reconnect") == "ok")
        #expect(try await ahead.command("sync") == "ok 0")
        await normal.sync.reconnect()
        #expect(await eventually { await normal.sync.pendingCount == 0 })
        #expect(try serverValue(live, "cw", "race").value == "normal", "clientWins: the last to arrive wins")
        #expect(try serverValue(live, "sw", "race").value == "ahead", "serverWins: the first to arrive stands")

        // Pulls miss nothing either way: each device writes notes, the other pulls them all.
        for index in 0..<10 {
            #expect(try await ahead.command("set notes ahead-\(index) by ahead") == "ok confirmed")
            try await normal.sync.collection("notes").document("normal-\(index)").setData(["by": "normal"])
        }
        _ = try await ahead.command("sync")
        await normal.sync.syncNow()
        let server = try live.service.pull(cursor: nil, limit: 500, caller: .user("ana")).documents
            .compactMap { document in document.state.document.map { "\(document.key) \($0.canonicalJSON)" } }.sorted()
        #expect(server.count == 23, "three registers and twenty notes")
        let aheadDump = try await ahead.command("dump", until: "end").split(separator: "\n").map(String.init)
        #expect(aheadDump == ["pending 0"] + server, "the device ahead holds exactly the server's documents")
        var normalDocuments: [String] = []
        for collection in ["cw", "sw", "notes"] {
            for snapshot in try await normal.sync.collection(collection).getDocuments() {
                if let data = snapshot.data { normalDocuments.append("\(snapshot.key) \(data.canonicalJSON)") }
            }
        }
        #expect(normalDocuments.sorted() == server, "the device behind holds exactly the server's documents")
        _ = try await ahead.command("quit")
        #expect(await ahead.waitUntilExit() == 0, "\(ahead.log)")
        await live.stop()
    }
}
