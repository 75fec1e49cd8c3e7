import AbrovaSync
import Foundation
import Testing

#if canImport(Combine)
    import Combine
#endif

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

    /// The getting-started article, "Write and read": the app's own values as fields.
    static func writeAndRead(item: String) async throws {
        let cart = AbrovaSync.shared.collection("carts").document("ana:groceries")
        try await cart.setData(["owner": "ana"])
        try await cart.updateData(["items": .arrayUnion(["milk"]), "qty.milk": 2])
        let snapshot = try await cart.getDocument()
        let milk = snapshot.get("qty.milk")?.intValue ?? 0
        try await cart.updateData(["note": "\(milk) milk", "items": .arrayUnion([item])])
        try await cart.updateData(["qty.milk": .increment(1)])
    }

    /// The getting-started article, "Query".
    static func query(budget: Double) async throws -> [AbrovaSync.DocumentSnapshot] {
        let items = AbrovaSync.shared.collection("items")
        let cheap = try await items.whereField("price", isLessThan: budget)
            .whereField("tags", arrayContains: "fruit")
            .order(by: "price")
            .limit(to: 10)
            .getDocuments()
        return cheap
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
            .liveUpdates(true)
            .build()
    }

    /// The getting-started article, "Show live data", and the builder's `liveUpdates(_:)`.
    static func showingLiveData() async throws {
        let registration = await AbrovaSync.shared.collection("carts").document("c1").addSnapshotListener { snapshot in
            print(snapshot.data ?? "deleted")
        }
        for await state in AbrovaSync.shared.connectionStateChanges where state == .live {
            print("live")
        }
        registration.remove()
        let config = try AbrovaSyncConfigBuilder(apiKey: "YOUR_API_KEY").liveUpdates(false).build()
        _ = config.liveUpdates
    }

    /// The seed's iOS sample, pasted into an app's async function with its `collection` (and, where
    /// Combine is, `cancellables`): only the `try`s Spec/client.md explains are added, and `doc`
    /// is used, as an app would.
    static func seedSample(collection: AbrovaSync.CollectionReference) async throws {
        #if canImport(Combine)
            var cancellables = Set<AnyCancellable>()
        #endif

        // Enable offline persistence in configuration
        let config = try AbrovaSyncConfigBuilder(apiKey: "YOUR_API_KEY")
            .offlineEnabled(true)
            .build()

        try AbrovaSync.initialize(config: config)

        #if canImport(Combine)
            // Observe sync state with Combine
            AbrovaSync.shared.syncStatePublisher?
                .receive(on: DispatchQueue.main)
                .sink { state in
                    switch state {
                    case .idle: print("All synced")
                    case .syncing: print("Syncing...")
                    case .offline: print("Working offline")
                    case .error: print("Sync error")
                    }
                }
                .store(in: &cancellables)
        #endif

        // Queued writes the server refused when they were sent.
        // The other SyncListener methods are optional.
        final class RejectedWrites: SyncEngine.SyncListener {
            func onDocumentRejected(documentId: String, operation: OperationType, error: Error) {
                let status = (error as? AbrovaSyncError)?.statusCode
                print("\(operation) of \(documentId) refused (\(String(describing: status))): \(error.localizedDescription)")
            }
        }
        let rejectedWrites = RejectedWrites() // keep a reference
        AbrovaSync.shared.addSyncListener(rejectedWrites)

        // All CRUD operations work offline automatically!
        let doc = try await collection.add(data: ["task": "Buy milk"])
        // Offline: saved locally and returned at once, synced when back online

        // Force sync when needed
        AbrovaSync.shared.forceSyncNow()
        _ = doc
    }

    /// The seed's listener, by the seed's name for it.
    final class RejectedWrites: SyncEngine.SyncListener {
        func onDocumentRejected(documentId: String, operation: OperationType, error: Error) {
            print("rejected \(documentId): \(error)")
        }
    }

    /// The seed's iOS sample and the DocC article's "Hear what sync did": the setters are called
    /// without `await`, from code that need not be async.
    static func listening() {
        let rejectedWrites = RejectedWrites() // keep a reference
        AbrovaSync.shared.addSyncListener(rejectedWrites)
        AbrovaSync.shared.onDocumentRejected { documentId, operation, error in
            print("\(operation) of \(documentId) refused (\(error.statusCode ?? 0))")
        }
        AbrovaSync.shared.onPendingCount { count in print("\(count) waiting") }
        AbrovaSync.shared.onSyncState { state in print(state) }
        AbrovaSync.shared.removeSyncListener(rejectedWrites)
    }

    @Test func theExamplesConfigurationsBuildAndARefusedOneSaysWhy() throws {
        _ = try Self.makingOne(token: "t")
        let refused = #expect(throws: AbrovaSyncError.self) {
            try AbrovaSyncConfigBuilder(apiKey: "").serverURL(URL(string: "https://sync.example.com")!).build()
        }
        #expect(refused?.message.isEmpty == false)
    }
}
