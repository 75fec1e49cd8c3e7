import AbrovaDemo
import Foundation

let demoUsage = """
    usage: abrova demo

      The shopping-cart story, with no set-up: a sync server on a free loopback port with a
      temporary SQLite database, and two devices (Ana's phone, Ben's laptop) that edit one cart
      offline, reconnect and agree. The sync events, conflicts and refused writes are printed as
      they happen, then the merged cart and why each field ended as it did. Nothing is left behind.
      The exit status is 0 when both devices and the server end with the same cart.
    """

/// Plays the demo and returns the exit status: 0 when the devices agree.
///
/// The output callback lives here, outside `main.swift`, so that it is not main-actor isolated
/// (the SDK calls it from its own actors).
func runDemo() async -> Int32 {
    logLine("abrova demo: two devices, one shopping cart, offline edits, one sync server")
    logLine("")
    do {
        let summary = try await ShoppingCartDemo.run(output: logLine)
        return summary.devicesAgree ? 0 : 1
    } catch {
        FileHandle.standardError.write(Data("abrova demo: \(error)\n".utf8))
        return 1
    }
}
