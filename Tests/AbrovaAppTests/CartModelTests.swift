import AbrovaSync
import Foundation
import ShoppingCartExample
import Testing

/// The example app's model, driven as its screen drives it, on two devices against `abrova serve`.
@Suite(.timeLimit(.minutes(2))) struct CartModelTests {
    @MainActor func eventually(_ isDone: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(10)
        while !isDone() && ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(10)) }
        return isDone()
    }

    @MainActor @Test func twoDevicesShowOneCart() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        let tablet = try server.device("tablet")
        let onPhone = CartModel(sync: phone, cartID: "groceries")
        let onTablet = CartModel(sync: tablet, cartID: "groceries")
        try await onPhone.start()
        try await onPhone.add("milk")
        try await onPhone.add("milk")
        try await onPhone.add("eggs")
        #expect(await eventually { onPhone.lines == [.init(item: "eggs", quantity: 1), .init(item: "milk", quantity: 2)] })

        try await onTablet.start()
        await tablet.syncNow() as Void
        #expect(await eventually { onTablet.lines.map(\.item) == ["eggs", "milk"] })
        try await onTablet.setQuantity(0, of: "eggs")
        try await onTablet.setQuantity(5, of: "milk")
        await phone.syncNow() as Void
        #expect(await eventually { onPhone.lines == [.init(item: "milk", quantity: 5)] })
        #expect(onPhone.rejection == nil)
        onPhone.stop()
        onTablet.stop()
        await phone.close()
        await tablet.close()
    }

    /// The showcase: both devices add one milk offline at the same time; both count.
    @MainActor @Test func twoDevicesAddingOneMilkOfflineEndWithTwoMore() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        let tablet = try server.device("tablet")
        let onPhone = CartModel(sync: phone, cartID: "groceries")
        let onTablet = CartModel(sync: tablet, cartID: "groceries")
        try await onPhone.start()
        try await onPhone.add("milk")
        try await onTablet.start()
        await tablet.syncNow() as Void
        #expect(await eventually { onTablet.lines == [.init(item: "milk", quantity: 1)] })

        await phone.disconnect()
        await tablet.disconnect()
        try await onPhone.add("milk")
        try await onTablet.change("milk", by: 1)
        #expect(await eventually { onPhone.lines == [.init(item: "milk", quantity: 2)] })
        await phone.reconnect()
        await tablet.reconnect()
        await phone.syncNow() as Void
        await tablet.syncNow() as Void
        await phone.syncNow() as Void
        #expect(await eventually { onPhone.lines == [.init(item: "milk", quantity: 3)] })
        #expect(await eventually { onTablet.lines == [.init(item: "milk", quantity: 3)] })
        try await onTablet.change("milk", by: -3)
        #expect(await eventually { onTablet.lines.isEmpty })
        onPhone.stop()
        onTablet.stop()
        await phone.close()
        await tablet.close()
    }

    @MainActor @Test func offlineEditsWaitAndTheStatusBarCountsThem() async throws {
        let server = try await ServedForApps()
        let phone = try server.device("phone")
        let model = CartModel(sync: phone, cartID: "groceries")
        try await model.start()
        await phone.disconnect()
        try await model.add("bread")
        try await model.add("jam")
        #expect(await eventually { model.pendingCount == 2 && model.syncState == .offline })
        #expect(model.lines.map(\.item) == ["bread", "jam"])
        await phone.reconnect()
        await phone.syncNow() as Void
        #expect(await eventually { model.pendingCount == 0 })
        model.stop()
        await phone.close()
    }
}
