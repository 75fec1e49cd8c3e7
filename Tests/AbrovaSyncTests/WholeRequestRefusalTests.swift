import AbrovaHTTP
import AbrovaServer
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

@testable import AbrovaSync

/// A refusal of a whole request is not a refusal of its changes (DESIGN.md, lessons of the first
/// milestone): only the sync server's per-change answer rejects a change. Batches are cut by the
/// bytes the server announces, a batch refused for its size is split, and only a change that can
/// never fit is rejected, alone. Against the real server on loopback, with its limits set tiny.
@Suite struct WholeRequestRefusalTests {
    let folder = TemporaryFolder()

    /// A server that takes bodies of at most 64 KiB, as sent and after decompression.
    static func tinyServer(limits: WireLimits = WireLimits()) throws -> LiveSyncServer {
        try LiveSyncServer(
            limits: limits, bodyLimits: BodyLimits(maximumDecompressedBytes: 64 << 10, maximumBodyBytes: 64 << 10),
            http: HTTPServerConfiguration(port: 0, maximumBodyBytes: 64 << 10, loopbackOnly: true))
    }

    /// A note of about `bytes` bytes that zstd cannot shrink much (random letters).
    static func note(_ bytes: Int, seed: UInt64) -> [String: Value] {
        var generator = SplitMix64(seed: seed)
        let letters = Array("abcdefghijklmnopqrstuvwxyz0123456789")
        return ["text": .string(String((0..<bytes).map { _ in letters[Int.random(in: 0..<letters.count, using: &generator)] }))]
    }

    func serverIDs(_ live: LiveSyncServer, user: String = "ana") throws -> Set<String> {
        Set(try live.service.pull(cursor: nil, limit: 1_000, caller: .user(user)).documents.filter { $0.state.exists }.map(\.key.id))
    }

    func writeNotesOfflineThenReconnect(_ live: LiveSyncServer, announcesLimits: Bool, sizes: [Int]) async throws
        -> (device: Device, rejections: Locked<[DocumentRejection]>)
    {
        let device = try Device(live, folder: folder, startsOffline: true)
        device.transport.announcesLimits = announcesLimits
        let rejections = Locked<[DocumentRejection]>([])
        let stream = device.sync.documentRejections
        Task { for await rejection in stream { rejections.update { $0.append(rejection) } } }
        for (index, size) in sizes.enumerated() {
            try await device.sync.collection("notes").document("n\(index)").setData(Self.note(size, seed: UInt64(index)))
        }
        device.transport.isCut = false
        await device.sync.syncNow()
        return (device, rejections)
    }

    @Test(arguments: [true, false])
    func queuedWritesLargerTogetherThanTheServersBodyLimitAllArrive(announcesLimits: Bool) async throws {
        let live = try Self.tinyServer()
        // 20 notes of 10 KB: 200 KB in one batch of the SDK's 500 changes, over the 64 KiB limit.
        let (device, rejections) = try await writeNotesOfflineThenReconnect(
            live, announcesLimits: announcesLimits,
            sizes: Array(repeating: 10_000, count: 20))
        #expect(await eventually { await device.sync.pendingCount == 0 })
        #expect(try serverIDs(live) == Set((0..<20).map { "n\($0)" }))
        #expect(rejections.value.isEmpty)
        #expect(await eventually { device.sync.syncState == .idle })
        // Cut by the announced limit, no push is refused; without it, the first is, and is split.
        let refused = live.exchanges.filter { $0.path == "/v1/push" && $0.status == 413 }.count
        #expect(announcesLimits ? refused == 0 : refused >= 1)
        await live.stop()
    }

    @Test(arguments: [true, false])
    func onlyAChangeThatCanNeverFitIsRejectedAndTheOthersArrive(announcesLimits: Bool) async throws {
        let live = try Self.tinyServer()
        // The note n3 alone is over the server's limit on bodies.
        var sizes = Array(repeating: 5_000, count: 8)
        sizes[3] = 100_000
        let (device, rejections) = try await writeNotesOfflineThenReconnect(live, announcesLimits: announcesLimits, sizes: sizes)
        #expect(await eventually { await device.sync.pendingCount == 0 })
        #expect(try serverIDs(live) == Set((0..<8).filter { $0 != 3 }.map { "n\($0)" }))
        #expect(rejections.value.map(\.documentId) == ["n3"])
        #expect(rejections.value.first?.error.statusCode == 413)
        #expect(try await device.sync.collection("notes").document("n3").getDocument(source: .cache).data == nil)
        await live.stop()
    }

    @Test func aBatchOverTheServersChangeLimitIsSplitNotRejected() async throws {
        let live = try LiveSyncServer(limits: WireLimits(maximumChanges: 3))
        let device = try Device(live, folder: folder, startsOffline: true)
        device.transport.announcesLimits = false
        for index in 0..<10 { try await device.sync.collection("notes").document("n\(index)").setData(["n": .int(Int64(index))]) }
        device.transport.isCut = false
        await device.sync.syncNow()
        #expect(await eventually { await device.sync.pendingCount == 0 })
        #expect(try serverIDs(live).count == 10)
        await live.stop()
    }

    @Test func aProxysHTMLRefusalNeverRollsBackAQueuedWrite() async throws {
        // A captive portal or a proxy in front of the server answers every request with its own
        // 404 page for the push; the sync server never sees it.
        let portal = try ScriptedServer { request in
            request.path == "/v1/health"
                ? .json(status: 200, HealthResponse(limits: nil).body)
                : request.path == "/v1/session"
                    ? .json(status: 200, SessionResponse(user: "ana").body)
                    : HTTPResponse(
                        status: 404, headers: [("Content-Type", "text/html")], body: Array("<html><body>Not Found</body></html>".utf8))
        }
        let path = folder.path("device.sqlite")
        let rejections = Locked<[DocumentRejection]>([])
        do {
            let sync = try AbrovaSync(
                config: try AbrovaSyncConfigBuilder(apiKey: LiveSyncServer.apiKey)
                    .serverURL(portal.url).storePath(path).authToken(LiveSyncServer.token(of: "ana"))
                    .retryPolicy(RetryPolicy(initialDelay: .milliseconds(20), maximumDelay: .milliseconds(100)))
                    .build())
            let stream = sync.documentRejections
            Task { for await rejection in stream { rejections.update { $0.append(rejection) } } }
            let snapshot = try await sync.collection("carts").document("c1").setData(["items": ["milk"]])
            #expect(snapshot.metadata.hasPendingWrites)
            await sync.syncNow()
            #expect(await sync.pendingCount == 1)
            #expect(try await sync.collection("carts").document("c1").getDocument(source: .cache).data == ["items": ["milk"]])
            #expect(portal.requests.contains { $0.path == "/v1/push" })
            await sync.close()
        }
        #expect(rejections.value.isEmpty)
        await portal.stop()
        // The same device, once the real server is reached, sends the write.
        let live = try LiveSyncServer()
        let sync = try AbrovaSync(
            config: try AbrovaSyncConfigBuilder(apiKey: LiveSyncServer.apiKey)
                .serverURL(live.url).storePath(path).authToken(LiveSyncServer.token(of: "ana")).build())
        live.onStop { await sync.close() }
        await sync.syncNow()
        #expect(
            try live.service.document(DocumentKey(collection: "carts", id: "c1"), caller: .user("ana")).state.document == [
                "items": ["milk"]
            ])
        await live.stop()
    }

    @Test func aPageOfLargeDocumentsIsCutByBytesSoADeviceWithASmallAnswerLimitSyncsThemAll() async throws {
        let live = try LiveSyncServer(limits: WireLimits(maximumPageBytes: 100_000))
        let writer = try Device(live, user: "ana", folder: folder, name: "writer")
        for index in 0..<12 {
            try await writer.sync.collection("notes").document("n\(index)").setData(Self.note(40_000, seed: UInt64(index)))
        }
        // A page of 500 would be about 1 MB (each note as data and as state); this device takes
        // answers of 300 kB at most.
        let reader = try AbrovaSync(
            config: try AbrovaSyncConfigBuilder(apiKey: LiveSyncServer.apiKey)
                .serverURL(live.url).storePath(folder.path("reader.sqlite")).authToken(LiveSyncServer.token(of: "ana"))
                .transport { token in live.makeTransport(as: nil, token: token, maximumAnswerBytes: 300_000) }
                .build())
        live.onStop { await reader.close() }
        await reader.syncNow()
        #expect(try await reader.collection("notes").getDocuments().count == 12)
        #expect(reader.syncState == .idle)
        await live.stop()
    }
}

/// A refused write takes no earlier valid write of its document with it, whether the two composed
/// offline or an online write composed into a queued one (issue 14, finding 3).
@Suite struct ComposedWriteRefusalTests {
    let folder = TemporaryFolder()
    let shirt = DocumentKey(collection: "shirts", id: "s1")

    func server() throws -> LiveSyncServer {
        try LiveSyncServer(rules: RuleBook(collections: ["shirts": SwitchableRules()]))
    }

    @Test func offlineAValidWriteThenARefusedOneOfTheSameDocumentTheValidOneArrives() async throws {
        let live = try server()
        let device = try Device(live, folder: folder, startsOffline: true)
        let rejections = Locked<[DocumentRejection]>([])
        let stream = device.sync.documentRejections
        Task { for await rejection in stream { rejections.update { $0.append(rejection) } } }
        let document = device.sync.collection("shirts").document("s1")
        try await document.setData(["jersey": 2])
        try await document.updateData(["invalid": true]) // the server's validation refuses it
        device.transport.isCut = false
        await device.sync.syncNow()
        #expect(await eventually { await device.sync.pendingCount == 0 })
        #expect(try live.service.document(shirt, caller: .user("ana")).state.document == ["jersey": 2])
        #expect(try await document.getDocument(source: .cache).data == ["jersey": 2])
        #expect(await eventually { rejections.value.count == 1 })
        #expect(rejections.value.first?.operation == .update && rejections.value.first?.error.statusCode == 400)
        await live.stop()
    }

    @Test func anOnlineWriteRefusedWhileAnEarlierCreateIsQueuedFailsAloneAndTheCreateArrives() async throws {
        let live = try server()
        let device = try Device(live, folder: folder) { $0.syncOnReconnect(false) }
        await device.sync.syncNow()
        await device.sync.disconnect()
        let document = device.sync.collection("shirts").document("s1")
        try await document.setData(["jersey": 7]) // queued
        await device.sync.reconnect() // the queue waits for a sync
        do {
            try await document.updateData(["invalid": true])
            Issue.record("the refused update did not throw")
        } catch {
            #expect(error.statusCode == 400)
        }
        #expect(try live.service.document(shirt, caller: .user("ana")).state.document == ["jersey": 7])
        #expect(try await document.getDocument(source: .cache).data == ["jersey": 7])
        #expect(await device.sync.pendingCount == 0)
        await live.stop()
    }
}
