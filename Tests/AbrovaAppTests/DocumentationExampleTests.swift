import AbrovaSync
import Foundation
import Testing

/// The examples of the README, Spec/client.md and the DocC article, as an app writes them: a plain
/// `import AbrovaSync`, nothing else of the package. They compile here; the test runs what needs
/// no server (the builders and the refusals they make).
@Suite struct DocumentationExampleTests {
    /// The README's "SDK in ten lines" and the getting-started article.
    static func readmeExample() async throws {
        let config = try AbrovaSyncConfigBuilder(apiKey: "YOUR_API_KEY")
            .serverURL(URL(string: "http://127.0.0.1:8080")!)
            .authToken("ana")
            .userId("ana")
            .conflictStrategy(.merge)
            .build()
        try AbrovaSync.initialize(config: config)

        let cart = AbrovaSync.shared.collection("carts").document("c1")
        try await cart.setData(["owner": "ana"])
        try await cart.updateData(["items": .arrayUnion(["milk"]), "qty.milk": 2])
        let snapshot = try await cart.getDocument()
        _ = snapshot.data
        for await state in AbrovaSync.shared.syncStateChanges { print(state) }
    }

    /// Spec/client.md, "Making one".
    static func makingOne(token: String) throws -> AbrovaSyncConfig {
        try AbrovaSyncConfigBuilder(apiKey: "YOUR_API_KEY")
            .serverURL(URL(string: "https://sync.example.com")!)
            .offlineEnabled(true)
            .syncOnReconnect(true)
            .conflictStrategy(.merge)
            .conflictStrategy(.serverWins, for: "orders")
            .authToken(token)
            .build()
    }

    /// The seed's listener, by the seed's name for it.
    final class RejectedWrites: SyncEngine.SyncListener {
        func onDocumentRejected(documentId: String, operation: OperationType, error: Error) {
            print("rejected \(documentId): \(error)")
        }
    }

    static func listening() async {
        let rejectedWrites = RejectedWrites()
        await AbrovaSync.shared.addSyncListener(rejectedWrites)
    }

    @Test func theExamplesConfigurationsBuildAndARefusedOneSaysWhy() throws {
        _ = try Self.makingOne(token: "t")
        let refused = #expect(throws: AbrovaSyncError.self) {
            try AbrovaSyncConfigBuilder(apiKey: "").serverURL(URL(string: "https://sync.example.com")!).build()
        }
        #expect(refused?.message.isEmpty == false)
    }
}
