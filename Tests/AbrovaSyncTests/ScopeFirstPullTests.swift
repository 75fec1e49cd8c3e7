import AbrovaCore
import AbrovaServer
import AbrovaTestSupport
import AbrovaWire
import Foundation
import Testing

@testable import AbrovaSync

/// A scope's pull from the beginning names in `left` only what changed since it started, so a
/// device that took documents before its first pull ends (a write it sent) follows that pull as a
/// resync: what the pull does not bring leaves.
@Suite struct ScopeFirstPullTests {
    let folder = TemporaryFolder()

    /// Pulls fail as unreachable while `pullsFail`; everything else goes through.
    final class PullGate: SyncTransport {
        let inner: HTTPTransport
        private let failing = SharedFlag()

        init(_ inner: HTTPTransport) {
            self.inner = inner
            failing.value = true
        }

        var pullsFail: Bool {
            get { failing.value }
            set { failing.value = newValue }
        }

        func push(body: [UInt8], pullCursor: String?) async throws(TransportFailure) -> PushResponse {
            try await inner.push(body: body, pullCursor: pullCursor)
        }

        func pull(cursor: String?, limit: Int, scope: SyncScope?) async throws(TransportFailure) -> PullResponse {
            if pullsFail { throw .unreachable("the test fails pulls") }
            return try await inner.pull(cursor: cursor, limit: limit, scope: scope)
        }

        func document(_ key: DocumentKey) async throws(TransportFailure) -> ServerDocument? { try await inner.document(key) }
        func isReachable() async -> Bool { await inner.isReachable() }
    }

    @Test func aDocumentTakenBeforeTheFirstPullThatLeftTheScopeMeanwhileLeaves() async throws {
        let live = try LiveSyncServer()
        let web = try Device(live, folder: folder, name: "web")
        try await web.carts.document("x").setData(["owner": "ana"])
        let gate = Locked<PullGate?>(nil)
        let phone = try AbrovaSync(
            config: try AbrovaSyncConfigBuilder(apiKey: LiveSyncServer.apiKey)
                .serverURL(live.url)
                .storePath(folder.path("phone.sqlite"))
                .authToken(LiveSyncServer.token(of: "ana"))
                .retryPolicy(RetryPolicy(initialDelay: .seconds(60), maximumDelay: .seconds(60)))
                .syncScope([SyncScopeQuery(collection: "carts").whereField("owner", isEqualTo: "ana")])
                .transport { token in
                    let transport = PullGate(live.makeTransport(as: nil, token: token))
                    gate.update { $0 = transport }
                    return transport
                }
                .build())
        live.onStop { await phone.close() }
        // Sent and settled; the pull after it fails.
        try await phone.collection("carts").document("y").setData(["owner": "ana"])
        #expect(await eventually { await phone.pendingCount == 0 })
        #expect(try await phone.collection("carts").document("y").getDocument(source: .cache).exists)
        // Meanwhile y leaves the scope, before the phone's first pull starts.
        await web.sync.syncNow()
        try await web.carts.document("y").updateData(["owner": "ben"])
        gate.value?.pullsFail = false
        await phone.syncNow()
        let kept = Set(try await phone.collection("carts").getDocuments(source: .cache).map(\.documentID))
        #expect(kept == ["x"])
    }
}
