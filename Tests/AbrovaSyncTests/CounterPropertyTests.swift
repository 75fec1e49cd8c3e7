import AbrovaCore
import AbrovaTestSupport
import Foundation
import Testing

@testable import AbrovaSync

/// Issue 20's counter property: two devices of one user increment the counters of two carts
/// (and write another field beside them), online and offline, under a random strategy, against
/// the real server through a proxy per device that cuts answers and requests or resets; a device
/// may also be closed and opened again from its file (a kill between its calls). When quiet,
/// every counter on the server is the sum of every increment made, and both devices show the
/// server's carts.
@Suite struct CounterPropertyTests {
    enum Step: CustomStringConvertible {
        case increment(device: Int, cart: Int, item: String, amount: Int)
        case note(device: Int, cart: Int, text: String)
        case disconnect(device: Int)
        case reconnect(device: Int)
        case sync(device: Int)
        case restart(device: Int)
        case fault(device: Int, FaultProxy.Fault)

        var description: String {
            switch self {
            case .increment(let device, let cart, let item, let amount): "d\(device) c\(cart).\(item) += \(amount)"
            case .note(let device, let cart, let text): "d\(device) c\(cart).note = \(text)"
            case .disconnect(let device): "d\(device) disconnect"
            case .reconnect(let device): "d\(device) reconnect"
            case .sync(let device): "d\(device) sync"
            case .restart(let device): "d\(device) restart"
            case .fault(let device, let fault): "d\(device) fault \(fault)"
            }
        }
    }

    struct Script: CustomStringConvertible {
        var strategy: ConflictStrategy
        var steps: [Step]
        var description: String { "\(strategy): " + steps.map(\.description).joined(separator: "; ") }
    }

    static let carts = ["c0", "c1"]
    static let items = ["milk", "eggs"]

    static func generate(_ choices: inout Choices) -> Script {
        let steps: [Step] = (0..<choices.int(in: 1...16)).map { _ in
            let device = choices.below(2)
            switch choices.below(12) {
            case 0..<5:
                return .increment(
                    device: device, cart: choices.below(2), item: choices.element(of: items), amount: choices.int(in: -2...3))
            case 5: return .note(device: device, cart: choices.below(2), text: choices.element(of: ["a", "b"]))
            case 6: return .disconnect(device: device)
            case 7: return .reconnect(device: device)
            case 8: return .sync(device: device)
            case 9: return .restart(device: device)
            default:
                let fault: FaultProxy.Fault =
                    switch choices.below(4) {
                    case 0: .cutResponse(afterBytes: choices.below(300))
                    case 1: .cutRequest(afterBytes: choices.below(500))
                    case 2: .reset
                    default: .none
                    }
                return .fault(device: device, fault)
            }
        }
        return Script(strategy: choices.element(of: ConflictStrategy.allCases), steps: steps)
    }

    static func device(_ folder: TemporaryFolder, _ index: Int, _ proxy: FaultProxy, _ strategy: ConflictStrategy) throws -> AbrovaSync {
        try AbrovaSync(
            config: try AbrovaSyncConfigBuilder(apiKey: LiveSyncServer.apiKey)
                .serverURL(URL(string: "http://127.0.0.1:\(proxy.port)")!)
                .storePath(folder.path("device\(index).sqlite"))
                .authToken(LiveSyncServer.token(of: "ana"))
                .conflictStrategy(strategy)
                .conflictResolver { _ in .useServer }
                .requestTimeout(.seconds(2))
                .retryPolicy(RetryPolicy(initialDelay: .milliseconds(5), maximumDelay: .milliseconds(40)))
                .build())
    }

    static func run(_ script: Script) async throws -> String? {
        let folder = TemporaryFolder()
        let live = try LiveSyncServer()
        let proxies = try (0..<2).map { _ in try FaultProxy(upstreamPort: live.server.port) }
        var devices = try (0..<2).map { try device(folder, $0, proxies[$0], script.strategy) }
        let problem = try await run(script, devices: &devices, proxies: proxies, live: live, folder: folder)
        for device in devices { await device.close() }
        for proxy in proxies { proxy.stop() }
        await live.stop()
        return problem
    }

    static func run(
        _ script: Script, devices: inout [AbrovaSync], proxies: [FaultProxy], live: LiveSyncServer, folder: TemporaryFolder
    ) async throws -> String? {
        for cart in carts { try await devices[0].collection("carts").document(cart).setData(["note": "x", "milk": 0, "eggs": 0]) }
        await devices[0].syncNow()
        await devices[1].syncNow()

        var sums: [String: Int64] = [:] // "c0.milk" -> the increments made
        for step in script.steps {
            switch step {
            case .increment(let device, let cart, let item, let amount):
                try await devices[device].collection("carts").document(carts[cart]).updateData([item: .increment(amount)])
                sums["\(carts[cart]).\(item)", default: 0] += Int64(amount)
            case .note(let device, let cart, let text):
                try await devices[device].collection("carts").document(carts[cart]).updateData(["note": text])
            case .disconnect(let device): await devices[device].disconnect()
            case .reconnect(let device): await devices[device].reconnect()
            case .sync(let device): await devices[device].syncNow()
            case .restart(let device):
                await devices[device].close()
                devices[device] = try Self.device(folder, device, proxies[device], script.strategy)
            case .fault(let device, let fault): proxies[device].fault = fault
            }
        }

        // Quiet: the network heals, and both devices sync until nothing is pending, then pull.
        for proxy in proxies { proxy.fault = .none }
        for device in devices { await device.reconnect() }
        var quiet = false
        for _ in 0..<100 {
            for device in devices { await device.syncNow() }
            if await devices[0].pendingCount == 0, await devices[1].pendingCount == 0 {
                quiet = true
                break
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        for device in devices { await device.syncNow() }
        guard quiet else {
            return "still \(await devices[0].pendingCount) and \(await devices[1].pendingCount) writes pending"
        }
        for cart in carts {
            let onServer = try live.service.document(DocumentKey(collection: "carts", id: cart), caller: .user("ana")).state.document
            for item in items {
                let counted = onServer?.mapValue?[item]
                if counted != .int(sums["\(cart).\(item)", default: 0]) {
                    return
                        "\(cart).\(item) is \(counted?.description ?? "nothing") on the server; the increments add to \(sums["\(cart).\(item)", default: 0])"
                }
            }
            for (index, device) in devices.enumerated() {
                let shown = try await device.collection("carts").document(cart).getDocument(source: .cache)
                if shown.data != onServer {
                    return
                        "device \(index) shows \(cart) as \(shown.data?.description ?? "nothing"); the server has \(onServer?.description ?? "nothing")"
                }
            }
        }
        return nil
    }

    @Test func everyIncrementCountsOnceThroughCutAnswersRetriesAndRestarts() async {
        let failure = await Property.checkCatching("increments count once", cases: 300, generate: Self.generate) { script in
            try await Self.run(script)
        }
        if let failure { Issue.record(Comment(rawValue: failure.description)) }
    }
}
