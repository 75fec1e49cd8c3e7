import AbrovaCore
import AbrovaServer
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

@testable import AbrovaSync

/// A transport over real HTTP that records which documents each pull brought.
final class PullRecordingTransport: SyncTransport {
    let inner: HTTPTransport
    private let pages = Locked<[[DocumentKey]]>([])

    init(_ inner: HTTPTransport) { self.inner = inner }

    /// Every document pulled so far, in order.
    var pulled: [DocumentKey] { pages.value.flatMap { $0 } }
    /// How many pages were pulled so far.
    var pulls: Int { pages.value.count }

    func push(body: [UInt8], pullCursor: String?) async throws(TransportFailure) -> PushResponse {
        try await inner.push(body: body, pullCursor: pullCursor)
    }

    func pull(cursor: String?, limit: Int, scope: SyncScope?) async throws(TransportFailure) -> PullResponse {
        let page = try await inner.pull(cursor: cursor, limit: limit, scope: scope)
        pages.update { $0.append(page.documents.map(\.key)) }
        return page
    }

    func document(_ key: DocumentKey) async throws(TransportFailure) -> ServerDocument? { try await inner.document(key) }
    func isReachable() async -> Bool { await inner.isReachable() }
    func serverLimits() async throws(TransportFailure) -> ServerLimits? { try await inner.serverLimits() }
    func sessionUser() async throws(TransportFailure) -> String?? { try await inner.sessionUser() }
    func watch(cursor: String?, scope: SyncScope?) async throws(TransportFailure) -> Bool {
        try await inner.watch(cursor: cursor, scope: scope)
    }
}

/// After a push, a device does not download its own changes again: the answer says when the pull
/// would bring nothing else (Spec/protocol.md, "POST /v1/push"). Against the real server over HTTP.
@Suite struct OwnChangesTests {
    let folder = TemporaryFolder()

    func device(_ live: LiveSyncServer, _ name: String, syncOnReconnect: Bool = true) throws -> (AbrovaSync, PullRecordingTransport) {
        let transport = PullRecordingTransport(live.makeTransport(as: "ana"))
        let sync = try AbrovaSync(
            config: try AbrovaSyncConfigBuilder(apiKey: LiveSyncServer.apiKey)
                .serverURL(live.url)
                .storePath(folder.path("\(name).sqlite"))
                .authToken(LiveSyncServer.token(of: "ana"))
                .syncOnReconnect(syncOnReconnect)
                .transport { _ in transport }
                .build())
        live.onStop { await sync.close() }
        return (sync, transport)
    }

    @Test func aDeviceDoesNotPullItsOwnChangesBack() async throws {
        let live = try LiveSyncServer()
        let (phone, transport) = try device(live, "phone")
        await phone.syncNow()
        await phone.disconnect()
        for index in 0..<3 { try await phone.collection("carts").document("c\(index)").setData(["n": .int(Int64(index))]) }
        await phone.reconnect()
        #expect(await eventually(30) { await phone.pendingCount == 0 })
        await phone.syncNow()
        try await phone.collection("carts").document("c0").updateData(["n": 10]) // online: pushed at once
        await phone.syncNow()
        #expect(transport.pulled.isEmpty, "pulled back: \(transport.pulled)")
        #expect(try live.service.document(DocumentKey(collection: "carts", id: "c0"), caller: .user("ana")).state.document == ["n": 10])
        await live.stop()
    }

    @Test func anotherDevicesChangeIsStillPulledAfterAPush() async throws {
        let live = try LiveSyncServer()
        let (phone, transport) = try device(live, "phone")
        let (laptop, _) = try device(live, "laptop")
        await phone.syncNow()
        await phone.disconnect()
        try await phone.collection("carts").document("mine").setData(["n": 1])
        try await laptop.collection("carts").document("theirs").setData(["n": 2])
        await phone.reconnect()
        #expect(await eventually(30) { await phone.pendingCount == 0 })
        await phone.syncNow()
        #expect(try await phone.collection("carts").document("theirs").getDocument(source: .cache).data == ["n": 2])
        #expect(transport.pulled.map(\.id).sorted() == ["mine", "theirs"], "the push's answer could not say the pull held only its own")
        await live.stop()
    }

    /// The push's answer says all the pull after it would: the run makes no pull request at all.
    /// A run with nothing to push still pulls.
    @Test func aRunWhosePushAnswerCarriesTheCursorMakesNoPull() async throws {
        let live = try LiveSyncServer()
        let (phone, transport) = try device(live, "phone", syncOnReconnect: false)
        await phone.syncNow()
        await phone.disconnect()
        for index in 0..<3 { try await phone.collection("carts").document("c\(index)").setData(["n": .int(Int64(index))]) }
        await phone.reconnect()
        let before = transport.pulls
        await phone.syncNow()
        #expect(await phone.pendingCount == 0)
        #expect(transport.pulls == before, "a pull after a push that carried the cursor")
        await phone.syncNow()
        #expect(transport.pulls == before + 1, "a run with nothing to push pulls")
        await live.stop()
    }
}
