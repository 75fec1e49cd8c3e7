import AbrovaSync
import Observation

/// One shopping cart as the example app's screen shows it: its lines, the sync state, the writes
/// waiting to be sent and the latest write the server refused. Main-actor isolated and
/// `@Observable`, so a SwiftUI view that reads it updates by itself; the SDK's listeners set it
/// without hopping by hand. (Built and tested on Linux; the SwiftUI view beside it is not.)
///
/// The cart is one document: `items`, a set of item names, and `qty`, a map from item to quantity.
/// (Observation needs iOS 17; an app for iOS 16 would make it an `ObservableObject`.)
@available(macOS 14, iOS 17, tvOS 17, watchOS 10, *)
@MainActor @Observable
public final class CartModel {
    /// One line of the cart.
    public struct Line: Equatable, Identifiable, Sendable {
        public let item: String
        public let quantity: Int64
        public var id: String { item }

        public init(item: String, quantity: Int64) {
            self.item = item
            self.quantity = quantity
        }
    }

    /// The cart's lines, by item.
    public private(set) var lines: [Line] = []
    /// The sync state, for the status bar.
    public private(set) var syncState: AbrovaSync.SyncState = .idle
    /// Writes not yet confirmed by the server.
    public private(set) var pendingCount = 0
    /// The banner's text when the server refused a queued write, until dismissed.
    public private(set) var rejection: String?

    @ObservationIgnored private let sync: AbrovaSync
    @ObservationIgnored private let cart: AbrovaSync.DocumentReference
    @ObservationIgnored private var registration: AbrovaSync.ListenerRegistration?
    @ObservationIgnored private var followers: [Task<Void, Never>] = []

    public init(sync: AbrovaSync, cartID: String) {
        self.sync = sync
        cart = sync.collection("carts").document(cartID)
    }

    /// Follows the cart and the SDK's status, after making the cart when the server says there is
    /// none. (Offline, a cart the device has never seen is not made: made blind, it would replace
    /// one another device made meanwhile. `add` then throws until the cart is pulled.)
    public func start() async throws(AbrovaSyncError) {
        if let onServer = try? await cart.getDocument(source: .server), !onServer.exists {
            try await cart.setData([:])
        }
        registration = await cart.addSnapshotListener { [weak self] snapshot in self?.show(snapshot) }
        let sync = sync
        followers = [
            Task { [weak self] in for await state in sync.syncStateChanges { self?.syncState = state } },
            Task { [weak self] in for await count in sync.pendingCountChanges { self?.pendingCount = count } },
            Task { [weak self] in
                for await refused in sync.documentRejections {
                    self?.rejection = "\(refused.operation) of \(refused.documentId) was refused: \(refused.error.message)"
                }
            },
        ]
    }

    /// Stops following.
    public func stop() {
        registration?.remove()
        followers.forEach { $0.cancel() }
        followers = []
    }

    /// Adds an item (one of it), or one more of an item already there. Quantities are counters:
    /// two devices that each add one milk, offline at once, end with two more.
    public func add(_ item: String) async throws(AbrovaSyncError) {
        try await cart.updateData(["items": .arrayUnion([item]), "qty.\(item)": .increment(1)])
    }

    /// Adds `amount` (negative: takes away) to an item's quantity; what would leave none takes the
    /// item out.
    public func change(_ item: String, by amount: Int) async throws(AbrovaSyncError) {
        let quantity = lines.first { $0.item == item }?.quantity ?? 0
        guard quantity + Int64(amount) > 0 else { return try await remove(item) }
        try await cart.updateData(["qty.\(item)": .increment(amount)])
    }

    /// Sets an item's quantity; zero or less takes it out.
    public func setQuantity(_ quantity: Int64, of item: String) async throws(AbrovaSyncError) {
        guard quantity > 0 else { return try await remove(item) }
        try await cart.updateData(["qty.\(item)": quantity])
    }

    /// Takes an item out.
    public func remove(_ item: String) async throws(AbrovaSyncError) {
        try await cart.updateData(["items": .arrayRemove([item]), "qty.\(item)": .delete()])
    }

    /// Hides the rejection banner.
    public func dismissRejection() { rejection = nil }

    private func show(_ snapshot: AbrovaSync.DocumentSnapshot) {
        let items = snapshot.get("items")?.arrayValue?.compactMap(\.stringValue) ?? []
        lines = items.sorted().map { Line(item: $0, quantity: snapshot.get("qty.\($0)")?.intValue ?? 0) }
    }
}
