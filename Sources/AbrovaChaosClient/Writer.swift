import AbrovaSync
import AbrovaTestSupport
import Foundation

/// The `run` mode: random writes from a seed until the process is killed. Each write is logged
/// `begin` before its call and `done` (or `rejected`) after it returned, before the next starts.
struct Writer {
    let sync: AbrovaSync
    let log: ChaosLogFile
    let name: String
    let restart: Int
    private var choices: Choices
    /// This client's notes that exist on the device.
    private var notes: [String] = []
    private var count = 0
    /// Writes left before going online again (0: online).
    private var offlineFor = 0

    init(sync: AbrovaSync, log: ChaosLogFile, options: ClientOptions) {
        self.sync = sync
        self.log = log
        name = options.name
        restart = options.restart
        // A stream of its own for each client and each restart, all fixed by the run's seed.
        var mixer = SplitMix64(seed: options.seed ^ UInt64(options.restart) &* 0x9E37_79B9)
        for byte in options.name.utf8 { mixer = SplitMix64(seed: mixer.next() ^ UInt64(byte)) }
        choices = Choices(seed: mixer.next())
    }

    /// Waits for the shared documents (a first start has none until it pulled them), then finds
    /// this client's notes on the device: a restarted client goes on where the last one stopped.
    mutating func prepare() async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while try await !hasSharedDocuments() {
            guard ContinuousClock.now < deadline else { throw ClientFailure("the shared documents never came") }
            await sync.syncNow()
            try await Task.sleep(for: .milliseconds(50))
        }
        notes = try await sync.collection(ChaosWorkload.notes).getDocuments()
            .filter { $0.data?.mapValue?["by"]?.stringValue == name }.map(\.key.id).sorted()
    }

    private func hasSharedDocuments() async throws -> Bool {
        for collection in ChaosWorkload.sharedStrategies.keys {
            for id in ChaosWorkload.sharedDocuments
            where try await sync.collection(collection).document(id).getDocument(source: .cache).data == nil {
                return false
            }
        }
        return true
    }

    /// Writes forever (paced), going offline now and then on purpose.
    mutating func run() async throws -> Never {
        let listener = ConflictLogger(log: log)
        sync.addSyncListener(listener)
        let log = log
        let rejections = sync.documentRejections
        Task {
            for await rejection in rejections {
                log.append(
                    ChaosLogEntry(
                        .rejectedLater, collection: rejection.collection, document: rejection.documentId,
                        detail: "\(rejection.error.statusCode ?? 0)"))
            }
        }
        while true {
            try await writeOnce()
            if offlineFor > 0 {
                offlineFor -= 1
                if offlineFor == 0 { await sync.reconnect() }
            } else if choices.chance(oneIn: 40) {
                offlineFor = choices.int(in: 3...20)
                await sync.disconnect()
            }
            if choices.chance(oneIn: 20) { await sync.syncNow() }
            try await Task.sleep(for: .milliseconds(choices.int(in: 2...30)))
            withExtendedLifetime(listener) {}
        }
    }

    /// One random write, logged.
    private mutating func writeOnce() async throws {
        let id = "\(name)-r\(restart)-\(count)"
        count += 1
        let shared = ChaosWorkload.sharedStrategies.keys.sorted()
        let roll = choices.below(100)
        var entry = ChaosLogEntry(.begin, write: id, value: id)
        let write: @Sendable () async throws(AbrovaSyncError) -> DocumentSnapshot
        switch roll {
        case 20..<30 where !notes.isEmpty, 30..<35 where !notes.isEmpty:
            let note = choices.element(of: notes)
            let reference = sync.collection(ChaosWorkload.notes).document(note)
            entry.collection = ChaosWorkload.notes
            entry.document = note
            if roll < 30 {
                entry.operation = .editNote
                entry.field = "meta.edit"
                write = { () async throws(AbrovaSyncError) in try await reference.updateData(["meta.edit": .value(.string(id))]) }
            } else {
                entry.operation = .deleteNote
                notes.removeAll { $0 == note }
                write = { () async throws(AbrovaSyncError) in try await reference.delete() }
            }
        case 35..<75:
            let collection = choices.element(of: shared)
            let document = choices.element(of: ChaosWorkload.sharedDocuments)
            let field = roll < 60 ? "x" : "own.\(name)"
            (entry.operation, entry.collection, entry.document, entry.field) = (.assign, collection, document, field)
            let reference = sync.collection(collection).document(document)
            write = { () async throws(AbrovaSyncError) in try await reference.updateData([field: .value(.string(id))]) }
        case 75..<95:
            let collection = choices.element(of: ChaosWorkload.setCollections)
            let document = choices.element(of: ChaosWorkload.sharedDocuments)
            let reference = sync.collection(collection).document(document)
            let mine =
                try await reference.getDocument(source: .cache).data?.mapValue?["items"]?.arrayValue?
                .compactMap(\.stringValue).filter { $0.hasPrefix("\(name)-") } ?? []
            (entry.collection, entry.document, entry.field) = (collection, document, "items")
            if roll >= 87, !mine.isEmpty {
                let element = choices.element(of: mine)
                (entry.operation, entry.value) = (.remove, element)
                write = { () async throws(AbrovaSyncError) in try await reference.updateData(["items": .arrayRemove([.string(element)])]) }
            } else {
                entry.operation = .add
                write = { () async throws(AbrovaSyncError) in try await reference.updateData(["items": .arrayUnion([.string(id)])]) }
            }
        case 95..<98:
            (entry.operation, entry.collection, entry.document) = (.createLocked, ChaosWorkload.locked, id)
            let reference = sync.collection(ChaosWorkload.locked).document(id)
            write = { () async throws(AbrovaSyncError) in try await reference.setData(["w": .string(id)]) }
        default:
            (entry.operation, entry.collection, entry.document) = (.createNote, ChaosWorkload.notes, id)
            notes.append(id)
            let reference = sync.collection(ChaosWorkload.notes).document(id)
            let name = name
            write = { () async throws(AbrovaSyncError) in
                try await reference.setData(["by": .string(name), "w": .string(id), "meta": .map(["made": .string(id)])])
            }
        }
        log.append(entry)
        do {
            let snapshot = try await write()
            log.append(ChaosLogEntry(.done, write: id, detail: snapshot.metadata.hasPendingWrites ? "pending" : ""))
        } catch {
            log.append(ChaosLogEntry(.rejected, write: id, detail: "\(error.statusCode ?? 0)"))
            if entry.operation == .createNote { notes.removeAll { $0 == id } }
        }
    }
}
