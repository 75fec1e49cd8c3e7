import AbrovaLocking
import AbrovaServer
import AbrovaSync
import Foundation

/// A conflict a device was told of while its queued writes were settled.
public struct ReportedConflict: Hashable, Sendable {
    /// The device that sent the conflicting change.
    public var device: String
    /// The document's collection.
    public var collection: String
    /// The document's id.
    public var documentId: String
    /// The field, both values and how it was settled.
    public var conflict: Conflict
}

/// A queued write the server refused when it was finally sent.
public struct ReportedRejection: Hashable, Sendable {
    /// The device whose write it was.
    public var device: String
    /// The document's id.
    public var documentId: String
    /// What the write did.
    public var operation: OperationType
    /// The server's status (403 when the rules refused).
    public var statusCode: Int?
    /// The server's reason.
    public var message: String
}

/// How the story ended.
public struct ShoppingCartDemoSummary: Sendable {
    /// The cart as Ana's phone has it at the end.
    public var phoneCart: [String: Value]?
    /// The cart as Ben's laptop has it at the end.
    public var laptopCart: [String: Value]?
    /// The cart as the server keeps it.
    public var serverCart: [String: Value]?
    /// The conflicts the devices were told of, in order.
    public var conflicts: [ReportedConflict]
    /// The refused writes the devices were told of, in order.
    public var rejections: [ReportedRejection]
    /// Whether the refused document is gone from the device that wrote it (rolled back).
    public var isRefusedDocumentRolledBack: Bool
    /// Where the server's database and the devices' stores were; removed by the end.
    public var folder: String
    /// How long after Ana's phone wrote the laptop's listener showed it, with nobody touching the
    /// laptop (live updates); `nil` when it never did.
    public var liveUpdateLatency: Duration?
    /// The cart and saved-for-later as Ben's laptop shows them after Ana's phone moved the apples
    /// from one to the other in one batch.
    public var movedCart: [String: Value]?
    public var savedForLater: [String: Value]?

    /// Whether both devices and the server ended with the same cart.
    public var devicesAgree: Bool { phoneCart != nil && phoneCart == laptopCart && laptopCart == serverCart }
}

/// The shopping-cart story of `abrova demo`, on a real server and two real SDK instances.
///
/// A server starts on a free loopback port with a temporary SQLite database. Ana's phone creates
/// the household's cart online; Ben's laptop syncs and sees it. Both go offline: each adds one
/// milk (a counter: both count), the phone adds eggs and changes bread's quantity, the laptop adds
/// apples, removes bread and writes a coupon that the rules do not let devices write. The phone
/// reconnects, then the laptop: the cart merges, one field conflicts, the coupon is refused and
/// rolled back. Both devices end with the same cart. Last, live: a listener on the laptop shows
/// the phone's next write as it happens, with nobody touching the laptop.
///
///     let summary = try await ShoppingCartDemo.run(output: { print($0) })
///     precondition(summary.devicesAgree)
public enum ShoppingCartDemo {
    /// The cart's collection and id.
    static let cart = "household"

    /// Plays the story, printing each step and every sync event as it happens; removes the
    /// server's database and the devices' stores before it returns or throws.
    ///
    /// - Parameters:
    ///   - output: receives the story, a line at a time.
    ///   - waitLimit: the longest wait for any one step (a sync, the server's start).
    /// - Throws: `ShoppingCartDemoError` when a step takes longer than `waitLimit`; the SDK's or
    ///   the server's errors when a step fails.
    public static func run(output: @escaping @Sendable (String) -> Void, waitLimit: Duration = .seconds(10)) async throws
        -> ShoppingCartDemoSummary
    {
        let started = ContinuousClock.now
        let folder = try DemoFolder()
        let rules = RuleBook(collections: [
            "carts": PresetRules.anyAuthenticatedUser,
            "saved": PresetRules.anyAuthenticatedUser,
            // Coupons are issued by the shop (an admin tool), never by a device.
            "coupons": PresetRules(read: .authenticated, write: .nobody),
        ])
        let server: DemoServer
        do {
            server = try await onOwnThread { try DemoServer(databasePath: folder.path("server.sqlite"), rules: rules) }
        } catch {
            folder.remove()
            throw error
        }
        var devices: [DemoDevice] = []
        do {
            output("The server listens on \(server.url), on a temporary SQLite database.")
            output("  Rules: \"carts\" are shared by every signed-in user; \"coupons\" can be written by no device.")
            let phone = try DemoDevice(
                name: "Ana's phone", user: "ana", server: server.url,
                storePath: folder.path("ana-phone.sqlite"), output: output)
            devices.append(phone)
            let laptop = try DemoDevice(
                name: "Ben's laptop", user: "ben", server: server.url,
                storePath: folder.path("ben-laptop.sqlite"), output: output)
            devices.append(laptop)
            try await phone.settle(within: waitLimit)
            try await laptop.settle(within: waitLimit)
            output("  Two devices of one household, each with its own store and the merge conflict strategy:")
            output("  Ana's phone (user ana) and Ben's laptop (user ben). Their sync events are shown as \"device | event\".")
            let summary = try await play(
                phone: phone, laptop: laptop, server: server, folder: folder, output: output,
                waitLimit: waitLimit)
            for device in devices { await device.sync.close() }
            await server.stop()
            folder.remove()
            let elapsed = ContinuousClock.now - started
            output("")
            output(
                "Done in \(milliseconds(elapsed, digits: 0)) ms; "
                    + "the server and the temporary files are gone.")
            return summary
        } catch {
            for device in devices { await device.sync.close() }
            await server.stop()
            folder.remove()
            throw error
        }
    }

    private static func play(
        phone: DemoDevice, laptop: DemoDevice, server: DemoServer, folder: DemoFolder,
        output: @escaping @Sendable (String) -> Void, waitLimit: Duration
    ) async throws -> ShoppingCartDemoSummary {
        let phoneCart = phone.carts.document(cart)
        let laptopCart = laptop.carts.document(cart)

        output("")
        output("1. Online, Ana's phone creates the cart: milk and bread, one of each. Writes go to the server first.")
        output("   Quantities are counters: a device adds to them (FieldValue.increment), it does not overwrite them.")
        try await phoneCart.setData(["qty": ["milk": 1, "bread": 1]])
        try await phoneCart.updateData(["items": .arrayUnion(["milk", "bread"])])
        output("   Ben's laptop syncs:")
        await laptop.sync.syncNow()
        output("   Ben's laptop sees \(describe(try await laptop.cart(cart).map(Value.map)))")

        output("")
        output("2. Both go offline. Writes are saved on the device at once and queued.")
        await phone.sync.disconnect()
        await laptop.sync.disconnect()
        try await timed("Ana's phone  adds eggs (6) and one milk", output) {
            try await phoneCart.updateData(["items": .arrayUnion(["eggs"]), "qty.eggs": .increment(6)])
            try await phoneCart.updateData(["qty.milk": .increment(1)])
        }
        try await timed("Ben's laptop adds one milk too, adds apples (4), removes bread and its quantity", output) {
            try await laptopCart.updateData(["qty.milk": .increment(1)])
            try await laptopCart.updateData(["items": .arrayUnion(["apples"]), "qty.apples": .increment(4)])
            try await laptopCart.updateData(["items": .arrayRemove(["bread"]), "qty.bread": .delete()])
        }
        try await timed("Ana's phone  sets bread to 3, not knowing Ben removed it", output) {
            try await phoneCart.updateData(["qty.bread": 3])
        }
        try await timed("Ben's laptop adds the coupon FREESHIP (the rules will refuse it)", output) {
            try await laptop.sync.collection("coupons").document("freeship").setData(["code": "FREESHIP", "cart": .string(cart)])
        }
        output(
            "   Waiting to be sent: Ana's phone \(await phone.sync.pendingCount), Ben's laptop \(await laptop.sync.pendingCount) writes.")
        output("   Ana's phone  sees \(describe(try await phone.cart(cart).map(Value.map)))")
        output("   Ben's laptop sees \(describe(try await laptop.cart(cart).map(Value.map)))")

        output("")
        output("3. Ana's phone reconnects: its queued writes go first, and nothing conflicts.")
        let phoneRuns = phone.events.completedRuns
        await phone.sync.reconnect()
        try await phone.waitForSync(after: phoneRuns, within: waitLimit)

        output("")
        output("4. Ben's laptop reconnects: its writes meet Ana's on the server.")
        let laptopRuns = laptop.events.completedRuns
        await laptop.sync.reconnect()
        try await laptop.waitForSync(after: laptopRuns, within: waitLimit)
        output("   Ana's phone syncs to pull Ben's changes:")
        await phone.sync.syncNow()

        let coupon = try await laptop.sync.collection("coupons").document("freeship").getDocument(source: .cache)
        var summary = ShoppingCartDemoSummary(
            phoneCart: try await phone.cart(cart), laptopCart: try await laptop.cart(cart),
            serverCart: try await server.data(of: DocumentKey(collection: "carts", id: cart), as: "ana"),
            conflicts: phone.events.conflicts + laptop.events.conflicts,
            rejections: phone.events.rejections + laptop.events.rejections,
            isRefusedDocumentRolledBack: coupon.data == nil, folder: folder.url.path)
        output("")
        output("5. The merged cart")
        output("   Ana's phone  \(describe(summary.phoneCart.map(Value.map)))")
        output("   Ben's laptop \(describe(summary.laptopCart.map(Value.map)))")
        output("   the server   \(describe(summary.serverCart.map(Value.map)))")
        output(summary.devicesAgree ? "   Both devices and the server agree." : "   THEY DISAGREE: this is a bug.")
        output("")
        output("   Why each field ended as it did:")
        let counters = ["qty.milk": "1 in the cart, then +1 on each device, offline at the same time"]
        for line in explanations(of: summary.laptopCart ?? [:], conflicts: summary.conflicts, counters: counters) {
            output("   - \(line)")
        }
        let couponFate = summary.isRefusedDocumentRolledBack ? "it is gone from Ben's laptop too" : "BUT IT IS STILL ON BEN'S LAPTOP"
        for rejection in summary.rejections {
            output(
                "   - coupons/\(rejection.documentId): the rules refused its \(rejection.operation) (\(rejection.statusCode.map(String.init) ?? "?")) "
                    + "when it was sent; the SDK dropped the write and rolled the document back: \(couponFate).")
        }
        summary.liveUpdateLatency = try await showLiveUpdate(from: phone, to: laptop, output: output, waitLimit: waitLimit)
        (summary.movedCart, summary.savedForLater) = try await showMove(from: phone, to: laptop, output: output)
        return summary
    }

    /// Step 6: a listener on the laptop shows the phone's write as it happens, while nobody calls
    /// anything on the laptop: the SDK holds a watch on the server while a listener is there.
    private static func showLiveUpdate(
        from phone: DemoDevice, to laptop: DemoDevice, output: @escaping @Sendable (String) -> Void, waitLimit: Duration
    ) async throws -> Duration? {
        output("")
        output("6. Live: Ben's laptop shows the cart in a listener. Ana's phone adds one more milk; nobody touches the laptop.")
        let shownAt = Protected<ContinuousClock.Instant?>(nil)
        let registration = await laptop.carts.document(cart).addSnapshotListener { snapshot in
            guard snapshot.data?.mapValue?["qty"]?.mapValue?["milk"] == 4 else { return }
            shownAt.withLock { $0 = $0 ?? .now }
        }
        defer { registration.remove() }
        let states = laptop.sync.connectionStateChanges
        try await race("Ben's laptop starts watching the server", within: waitLimit) {
            for await state in states where state == .live { return true }
            return false
        }
        let written = ContinuousClock.now
        try await phone.carts.document(cart).updateData(["qty.milk": .increment(1)])
        try await waitUntil("Ben's laptop's listener shows milk 4", within: waitLimit) { shownAt.withLock { $0 } != nil }
        let latency = shownAt.withLock { $0 }.map { $0 - written }
        if let latency {
            output("   Ben's laptop's listener shows milk 4, \(milliseconds(latency, digits: 1)) ms after Ana's phone wrote it.")
        }
        return latency
    }

    /// Step 7: the phone moves the apples to saved-for-later in one batch of writes: the cart loses
    /// them and the list gains them together, or neither happens.
    private static func showMove(
        from phone: DemoDevice, to laptop: DemoDevice, output: @escaping @Sendable (String) -> Void
    ) async throws -> (cart: [String: Value]?, saved: [String: Value]?) {
        output("")
        output("7. Ana's phone moves the apples to saved-for-later in one batch: both writes, or neither.")
        let batch = phone.sync.batch()
        batch.updateData(["items": .arrayRemove(["apples"]), "qty.apples": .delete()], forDocument: phone.carts.document(cart))
        batch.setData(["apples": .increment(4)], forDocument: phone.sync.collection("saved").document(cart), merge: true)
        try await batch.commit()
        await laptop.sync.syncNow()
        let moved = try await laptop.cart(cart)
        let saved = try await laptop.sync.collection("saved").document(cart).getDocument(source: .cache).data?.mapValue
        output("   Ben's laptop sees the cart    \(describe(moved.map(Value.map)))")
        output("   and saved-for-later          \(describe(saved.map(Value.map)))")
        return (moved, saved)
    }

    /// Runs offline writes and says how long they took (they never wait for the network).
    private static func timed(_ what: String, _ output: @Sendable (String) -> Void, _ writes: () async throws -> Void) async throws {
        let start = ContinuousClock.now
        try await writes()
        let elapsed = ContinuousClock.now - start
        output("   \(what): returned in \(milliseconds(elapsed, digits: 1)) ms")
    }

    /// A sentence per field of the final cart, from the conflicts reported on it; `counters` are
    /// the counters both devices added to, with how they got there.
    static func explanations(of cart: [String: Value], conflicts: [ReportedConflict], counters: [String: String] = [:]) -> [String] {
        leaves(of: cart).map { path, value in
            if let story = counters[path] {
                return "\(path) = \(value.canonicalJSON): a counter, \(story): every increment counts, none conflicts."
            }
            let reported = conflicts.filter { $0.conflict.path.dotted == path }
            guard let first = reported.first else {
                return "\(path) = \(value.canonicalJSON): no conflict, at most one device changed it, so it is as last written."
            }
            let conflict = first.conflict
            switch conflict.outcome {
            case .merged:
                return "\(path) = \(value.canonicalJSON): a set both devices changed, merged element by element: every add is kept, "
                    + "and a remove takes away only what its device had seen (the server had \(describe(conflict.serverValue)), "
                    + "\(first.device) wanted \(describe(conflict.clientValue)))."
            case .serverWon:
                guard let wanted = conflict.clientValue else {
                    return "\(path) = \(value.canonicalJSON): \(first.device) removed it, but the other device had changed it meanwhile "
                        + "and reached the server first. Under merge an edit is never undone by a removal that did not see it: "
                        + "the server's value stands."
                }
                return "\(path) = \(value.canonicalJSON): both devices changed it; \(first.device) wanted \(wanted.canonicalJSON), but the "
                    + "other device reached the server first. Under merge the server's value stands for a field changed on both sides."
            case .clientWon:
                return "\(path) = \(value.canonicalJSON): changed on both devices; \(first.device)'s value was applied."
            case .unresolved:
                return "\(path) = \(value.canonicalJSON): left to a resolver."
            }
        }
    }

    /// The leaves of nested maps by dotted path, sorted (sets and other values are leaves).
    private static func leaves(of map: [String: Value], under prefix: String = "") -> [(String, Value)] {
        map.sorted { $0.key < $1.key }.flatMap { key, value -> [(String, Value)] in
            let path = prefix.isEmpty ? key : "\(prefix).\(key)"
            if case .map(let inner) = value { return leaves(of: inner, under: path) }
            return [(path, value)]
        }
    }
}

/// A duration in milliseconds, with `digits` decimals.
func milliseconds(_ duration: Duration, digits: Int) -> String {
    let (seconds, attoseconds) = duration.components
    return String(format: "%.\(digits)f", Double(seconds) * 1_000 + Double(attoseconds) / 1e15)
}
