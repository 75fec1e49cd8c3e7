import AbrovaSync
import AbrovaTestSupport
import Foundation
import Testing

/// `abrova inspect`: what a device store and a server database hold, read as an operator reads
/// them, without changing either file.
@Suite(.timeLimit(.minutes(2))) struct InspectTests {
    /// Runs `abrova` with `arguments`; its exit status, standard output and standard error.
    func abrova(_ arguments: [String], in folder: TemporaryFolder) async throws -> (status: Int32?, output: String, error: String) {
        guard let executable = BuiltExecutable.url(named: "abrova") else { throw ServeFailure("abrova is not built") }
        let (out, err) = (folder.path("out-\(UUID().uuidString).txt"), folder.path("err-\(UUID().uuidString).txt"))
        let child = try SpawnedProcess(
            executable.path, arguments, standardInput: .null, standardOutput: .append(toFile: out), standardError: .append(toFile: err))
        let ended = await child.exited(within: .seconds(60))
        let status: Int32? = if case .exited(let code)? = ended { code } else { nil }
        return (
            status, (try? String(contentsOfFile: out, encoding: .utf8)) ?? "", (try? String(contentsOfFile: err, encoding: .utf8)) ?? ""
        )
    }

    func object(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    @Test(arguments: ServedForApps.Store.available)
    func aStoreAndAServerAreReadAsTheyAreAndLeftUnchanged(store: ServedForApps.Store) async throws {
        let server = try await ServedForApps(store: store)
        let phone = server.folder.path("phone.sqlite")
        let sync = try AbrovaSync(
            config: try AbrovaSyncConfigBuilder(apiKey: "k").serverURL(server.url).authToken("t").storePath(phone).build())
        try await sync.collection("carts").document("c1").setData(["milk": 1])
        try await sync.collection("carts").document("c2").setData(["milk": 1])
        try await sync.collection("carts").document("c2").delete()
        try await sync.collection("lists").document("l1").setData(["n": 1])
        await sync.disconnect()
        try await sync.collection("carts").document("c3").setData(["milk": 2])
        try await sync.collection("carts").document("c3").updateData(["eggs": 6])
        await sync.close()
        let before = try Data(contentsOf: URL(fileURLWithPath: phone))

        let read = try await abrova(["inspect", "store", phone, "--json"], in: server.folder)
        #expect(read.status == 0, "\(read.error)")
        let inspection = try object(read.output)
        #expect(inspection["owner"] as? String == "ana")
        #expect((inspection["clientId"] as? String)?.isEmpty == false)
        #expect(inspection["cursor"] is String)
        let queue = try #require(inspection["queue"] as? [String: Any])
        #expect(queue["changes"] as? Int == 1 && queue["writes"] as? Int == 2)
        let collections = try #require(inspection["collections"] as? [[String: Any]])
        let carts = try #require(collections.first { $0["collection"] as? String == "carts" })
        #expect(carts["live"] as? Int == 1 && carts["deleted"] as? Int == 1)
        #expect((inspection["fileBytes"] as? Int ?? 0) > 0)
        let text = try await abrova(["inspect", "store", phone], in: server.folder)
        #expect(text.output.contains("unsent: 1 changes holding 2 writes"), "\(text.output)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: phone)) == before)

        let served = try await abrova(["inspect", "server"] + server.databaseArguments + ["--json"], in: server.folder)
        #expect(served.status == 0, "\(served.error)")
        let database = try object(served.output)
        let serverCollections = try #require(database["collections"] as? [[String: Any]])
        let serverCarts = try #require(serverCollections.first { $0["collection"] as? String == "carts" })
        #expect(serverCarts["live"] as? Int == 1 && serverCarts["tombstones"] as? Int == 1)
        #expect((database["latestVersion"] as? Int ?? 0) >= 4)
        #expect(database["clientCount"] as? Int == 1)
        let clients = try #require(database["clients"] as? [[String: Any]])
        #expect(clients.first?["user"] as? String == "ana")
        #expect(database["oldestTombstone"] is String)
        #expect(!(database["database"] as? String ?? "").contains("password="))
    }

    @Test func whatIsNotAStoreIsSaidInWords() async throws {
        let folder = TemporaryFolder()
        let text = folder.path("notes.txt")
        try Data("hello".utf8).write(to: URL(fileURLWithPath: text))
        let notDatabase = try await abrova(["inspect", "store", text], in: folder)
        #expect(notDatabase.status == 2 && notDatabase.error.contains("cannot be read as an SQLite database"), "\(notDatabase.error)")
        let missing = try await abrova(["inspect", "store", folder.path("nowhere.sqlite")], in: folder)
        #expect(missing.status == 2 && missing.error.contains("no file at"))
        #expect(!FileManager.default.fileExists(atPath: folder.path("nowhere.sqlite")))
        let server = try await abrova(["inspect", "server", "--database", folder.path("nowhere.sqlite")], in: folder)
        #expect(server.status == 2 && server.error.contains("no file at"))
        let wrong = try await abrova(["inspect", "server", "--json"], in: folder)
        #expect(wrong.status == 2 && wrong.error.contains("--database PATH or --postgres URL"))
        let unreachable = try await abrova(["inspect", "server", "--postgres", "postgresql://u:hunter2@127.0.0.1:1/db"], in: folder)
        #expect(unreachable.status == 2 && !unreachable.error.contains("hunter2") && unreachable.error.split(separator: "\n").count == 1)
    }
}
