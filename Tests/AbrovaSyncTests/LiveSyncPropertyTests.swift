import AbrovaCore
import AbrovaServer
import AbrovaSync
import AbrovaTestSupport
import Foundation
import Testing

/// Random writers and watchers, some going offline and back: once the writes are in, every
/// device's listeners show every document its user may read as the server has it, with no call
/// on the device, and never show one its user may not read.
@Suite struct LiveSyncPropertyTests {
    static let rules = RuleBook(collections: ["board": PresetRules.anyAuthenticatedUser], fallback: PresetRules.ownerOnly)
    static let users = ["ana", "ana", "ben"] // two devices of Ana's, one of Ben's

    enum Step: CustomStringConvertible {
        case write(device: Int, collection: String, id: String, value: Int)
        case disconnect(Int)
        case reconnect(Int)

        var description: String {
            switch self {
            case .write(let device, let collection, let id, let value): "\(device) writes \(collection)/\(id) = \(value)"
            case .disconnect(let device): "\(device) disconnects"
            case .reconnect(let device): "\(device) reconnects"
            }
        }
    }

    static func steps(_ choices: inout Choices) -> [Step] {
        (0..<choices.int(in: 1...12)).map { index in
            let device = choices.below(users.count)
            switch choices.below(6) {
            case 0: return .disconnect(device)
            case 1: return .reconnect(device)
            default:
                let collection = choices.chance(oneIn: 2) ? "board" : "diary"
                return .write(device: device, collection: collection, id: "d\(choices.below(3))", value: index)
            }
        }
    }

    @Test func everyWatcherEndsWithEveryReadableChangeAndNoOther() async throws {
        let cases = ProcessInfo.processInfo.environment["ABROVA_PROPERTY_CASES"].flatMap { Int($0) } ?? 25
        let failure = await Property.check(
            "live watchers see every readable change", cases: cases, generate: Self.steps,
            property: { steps in
                do {
                    return try await Self.play(steps)
                } catch {
                    return "failed: \(error)"
                }
            })
        #expect(failure == nil, "\(failure.map(String.init(describing:)) ?? "")")
    }

    static func play(_ steps: [Step]) async throws -> String? {
        let folder = TemporaryFolder()
        let live = try LiveSyncServer(rules: rules)
        var devices: [AbrovaSync] = []
        for (index, user) in users.enumerated() {
            devices.append(try appDevice(live.url, user: user, storePath: folder.path("device\(index).sqlite")))
        }
        var shown: [[String: ShownSnapshots]] = []
        var registrations: [ListenerRegistration] = []
        for device in devices {
            var byCollection: [String: ShownSnapshots] = [:]
            for collection in ["board", "diary"] {
                let record = ShownSnapshots()
                registrations.append(await device.collection(collection).addSnapshotListener { record.record($0) })
                byCollection[collection] = record
            }
            shown.append(byCollection)
        }
        defer { for registration in registrations { registration.remove() } }
        for step in steps {
            switch step {
            case .write(let device, let collection, let id, let value):
                // Online, another user's diary entry of the same id refuses the write (it reads as missing).
                do {
                    try await devices[device].collection(collection).document(id).setData([
                        "v": .int(Int64(value)), "by": .int(Int64(device)),
                    ])
                } catch {
                    guard error.kind == .refused else { throw error }
                }
            case .disconnect(let device): await devices[device].disconnect()
            case .reconnect(let device): await devices[device].reconnect()
            }
        }
        for device in devices { await device.reconnect() }
        // The queues drain; then nobody calls anything on any device.
        let all = devices
        guard await eventually(60, { await all.asyncAllSatisfy { await $0.pendingCount == 0 } }) else {
            return "the queues did not drain"
        }
        // One more write, online, once every device is back: only a live update brings it to the others.
        try await devices[users.count - 1].collection("board").document("last").setData(["v": .int(Int64(steps.count)), "by": 2])
        for (index, user) in users.enumerated() {
            let readable = try live.service.pull(cursor: nil, limit: 1_000, caller: .user(user)).documents
            for collection in ["board", "diary"] {
                let expected = Dictionary(
                    uniqueKeysWithValues: readable.filter { $0.key.collection == collection }.compactMap { document in
                        document.state.document.map { (document.key.id, $0) }
                    })
                let record = shown[index][collection]!
                guard await eventually(30, { record.latest == expected }) else {
                    return "device \(index) (\(user)) shows \(collection) \(record.latest), the server has \(expected) for it"
                }
            }
            // A diary listener shows only what its own user wrote (a refused write of one's own may
            // show until it is rolled back; another user's entry never).
            let leaked = shown[index]["diary"]!.all.joined().first { snapshot in
                guard let writer = snapshot.data?.mapValue?["by"]?.intValue else { return false }
                return users[Int(writer)] != user
            }
            if let leaked { return "device \(index) (\(user)) showed \(leaked.key): \(String(describing: leaked.data))" }
        }
        for device in devices { await device.close() }
        await live.stop()
        return nil
    }
}

extension Array {
    fileprivate func asyncAllSatisfy(_ predicate: (Element) async -> Bool) async -> Bool {
        for element in self where !(await predicate(element)) { return false }
        return true
    }
}
