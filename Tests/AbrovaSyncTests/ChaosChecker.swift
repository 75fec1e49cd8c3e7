import AbrovaCore
import AbrovaHTTP
import AbrovaSync
import AbrovaTestSupport
import AbrovaWire
import Foundation

/// Every push the server answered 200, as it crossed the wire: each batch with its answer.
final class PushLedger: Sendable {
    /// One answered push.
    struct Entry: Sendable {
        var request: PushRequest
        var answerBody: [UInt8]
        var answer: PushResponse
        var batchID: String { "\(request.batch.clientID)#\(request.batch.sequence)" }
    }

    private let recorded = Locked<[Entry]>([])
    private let unreadable = Locked<[String]>([])

    /// Every answered push so far, in the order the answers were made.
    var entries: [Entry] { recorded.value }
    /// Pushes the test could not read.
    var problems: [String] { unreadable.value }

    /// Records the exchange when it is an answered push (`LiveSyncServer`'s `observe`).
    func observe(_ request: HTTPRequest, _ response: HTTPResponse) {
        guard request.method == "POST", request.path == "/v1/push", response.status == 200 else { return }
        do {
            let body = request.headers["content-encoding"] == "zstd" ? try Zstd.decompress(request.body, limit: 64 << 20) : request.body
            let compressed = response.headers.contains { $0.name.lowercased() == "content-encoding" && $0.value == "zstd" }
            let answerBody = compressed ? try Zstd.decompress(response.body, limit: 64 << 20) : response.body
            let entry = Entry(request: try PushRequest(body: body), answerBody: answerBody, answer: try PushResponse(body: answerBody))
            recorded.update { $0.append(entry) }
        } catch {
            unreadable.update { $0.append("an answered push the test cannot read: \(error)") }
        }
    }
}

/// The server's document as the checker sees it.
struct ServerView: Sendable {
    var data: [String: Value]?
    var version: Version
}

/// What the long run must end with, from the clients' logs, the server's documents and the
/// answered pushes. Pure: the test also runs it on doctored copies, to show that it catches a
/// lost write, a write applied twice and a strategy broken.
struct ChaosChecker {
    /// Each client's log, in the order it was written.
    var logs: [String: [ChaosLogEntry]]
    /// The server's documents (deleted ones too, with `data == nil`).
    var server: [DocumentKey: ServerView]
    var ledger: [PushLedger.Entry]

    /// What the run's logs and answers hold, for the report.
    struct Counts {
        var writes = 0
        var returned = 0
        var refused = 0
        var rejectionsHeard = 0
        var conflictsReported = 0
        var batches = 0
        /// Conflicts the server settled, by outcome, over distinct batches.
        var settled: [String: Int] = [:]
    }

    /// A write as its client logged it.
    private struct Write {
        var client: String
        var begin: ChaosLogEntry
        var returned: Bool
        var refusal: String?
    }

    private var writes: [String: Write] {
        var writes: [String: Write] = [:]
        for (client, entries) in logs {
            for entry in entries {
                switch entry.event {
                case .begin: writes[entry.write] = Write(client: client, begin: entry, returned: false)
                case .done: writes[entry.write]?.returned = true
                case .rejected:
                    writes[entry.write]?.returned = true
                    writes[entry.write]?.refusal = entry.detail
                default: break
                }
            }
        }
        return writes
    }

    /// The notes whose creating call returned and that no write deletes: `checkWrites` finds any
    /// of them missing from the server.
    var notesThatMustBeThere: [String] {
        let writes = writes
        let deleted = Set(writes.values.filter { $0.begin.operation == .deleteNote }.map(\.begin.document))
        return writes.filter { id, write in write.begin.operation == .createNote && write.returned && !deleted.contains(id) }.keys.sorted()
    }

    var counts: Counts {
        let writes = writes.values
        let entries = logs.values.flatMap { $0 }
        var settled: [String: Int] = [:]
        var seen: Set<String> = []
        for entry in ledger where seen.insert(entry.batchID).inserted {
            for result in entry.answer.results {
                switch result {
                case .applied(_, _, let conflicts), .unresolved(_, let conflicts):
                    for conflict in conflicts { settled[conflict.outcome.rawValue, default: 0] += 1 }
                case .rejected: settled["rejected", default: 0] += 1
                }
            }
        }
        return Counts(
            writes: writes.count, returned: writes.filter(\.returned).count, refused: writes.filter { $0.refusal != nil }.count,
            rejectionsHeard: entries.filter { $0.event == .rejectedLater }.count,
            conflictsReported: entries.filter { $0.event == .conflict }.count,
            batches: seen.count, settled: settled)
    }

    /// Every mismatch found.
    func check() -> [String] {
        checkWrites() + checkRegisters() + checkSets() + checkAnswers()
    }

    private func document(_ collection: String, _ id: String) -> [String: Value]? {
        server[DocumentKey(collection: collection, id: id)]?.data
    }

    /// Notes and refused writes: every note whose create returned is there (unless its delete
    /// returned) as written, none is there that nobody began, nothing refused is there, and
    /// only writes to `locked` are refused.
    private func checkWrites() -> [String] {
        var mismatches: [String] = []
        let writes = writes
        var deletes: [String: [Write]] = [:]
        for write in writes.values where write.begin.operation == .deleteNote { deletes[write.begin.document, default: []].append(write) }
        for (id, write) in writes {
            let operation = write.begin.operation
            if let refusal = write.refusal, operation != .createLocked {
                mismatches.append(
                    "\(id) (\(operation?.rawValue ?? "?") of \(write.begin.collection)/\(write.begin.document)) was refused: \(refusal)")
            }
            guard operation == .createNote else { continue }
            let note = document(ChaosWorkload.notes, id)
            let deleted = deletes[id] ?? []
            if note == nil && write.returned && deleted.isEmpty {
                mismatches.append("note \(id) returned but is not on the server")
            }
            if note != nil && deleted.contains(where: \.returned) {
                mismatches.append("note \(id) was deleted (the call returned) but is on the server")
            }
            if let note,
                note["by"]?.stringValue != write.client || note["w"]?.stringValue != id
                    || note["meta"]?.mapValue?["made"]?.stringValue != id
            {
                mismatches.append("note \(id) holds \(note)")
            }
        }
        for (key, view) in server where view.data != nil {
            if key.collection == ChaosWorkload.notes, writes[key.id]?.begin.operation != .createNote {
                mismatches.append("note \(key.id) on the server was never written")
            }
            if key.collection == ChaosWorkload.locked { mismatches.append("\(key) was refused, yet it is on the server") }
        }
        return mismatches
    }

    /// Registers. Written by one client only (`own.<client>`, a note's `meta.edit`): the value of
    /// the last write whose call returned, or of a later one that was in flight when the client was
    /// killed. Contested (`x`): a value somebody wrote.
    private func checkRegisters() -> [String] {
        var mismatches: [String] = []
        var sequences: [String: [(value: String, returned: Bool)]] = [:]
        var contested: [String: Set<String>] = [:]
        for (client, entries) in logs {
            let returned = Set(entries.filter { $0.event == .done }.map(\.write))
            for entry in entries where entry.event == .begin && [.assign, .editNote].contains(entry.operation) {
                let place = "\(entry.collection)/\(entry.document).\(entry.field)"
                if entry.field == "x" {
                    contested[place, default: [ChaosWorkload.initialValue]].insert(entry.value)
                } else {
                    precondition(entry.field == "meta.edit" || entry.field == "own.\(client)", "a register two clients write")
                    sequences[place, default: []].append((entry.value, returned.contains(entry.write)))
                }
            }
        }
        for (place, writes) in sequences {
            let key = DocumentKey(
                collection: String(place.prefix { $0 != "/" }),
                id: String(place.drop { $0 != "/" }.dropFirst().prefix { $0 != "." }))
            guard let data = server[key]?.data else {
                if key.collection != ChaosWorkload.notes { mismatches.append("\(key) is not on the server") }
                continue // a deleted note
            }
            let path = String(place.drop { $0 != "." }.dropFirst())
            let value = Value.map(data)[try! FieldPath(path)]?.stringValue
            let lastReturned = writes.lastIndex { $0.returned }
            var allowed = Set(writes[(lastReturned ?? -1) + 1..<writes.count].map { Optional($0.value) })
            allowed.insert(lastReturned.map { writes[$0].value } ?? nil)
            if !allowed.contains(value) {
                mismatches.append(
                    "\(place) is \(value ?? "absent"); its client last wrote \(lastReturned.map { writes[$0].value } ?? "nothing")"
                        + " (\(writes.count) writes, allowed \(allowed.map { $0 ?? "absent" }.sorted()))")
            }
        }
        for (place, values) in contested {
            let parts = place.split(separator: "/")
            let value = document(String(parts[0]), String(parts[1].prefix { $0 != "." }))?["x"]?.stringValue
            if !values.contains(value ?? "") { mismatches.append("\(place) is \(value ?? "absent"), which nobody wrote") }
        }
        return mismatches
    }

    /// Sets: every element there was added by someone; under merge and clientWins, an element
    /// whose add returned is there unless its client began removing it, and one whose remove
    /// returned is gone.
    private func checkSets() -> [String] {
        var mismatches: [String] = []
        var adds: [String: [String: Bool]] = [:] // place → element → its add returned
        var removes: [String: [String: Bool]] = [:]
        for entries in logs.values {
            let returned = Set(entries.filter { $0.event == .done }.map(\.write))
            for entry in entries where entry.event == .begin {
                let place = "\(entry.collection)/\(entry.document)"
                if entry.operation == .add { adds[place, default: [:]][entry.value] = returned.contains(entry.write) }
                if entry.operation == .remove {
                    removes[place, default: [:]][entry.value, default: false] =
                        removes[place]?[entry.value] == true || returned.contains(entry.write)
                }
            }
        }
        for collection in ChaosWorkload.setCollections {
            for id in ChaosWorkload.sharedDocuments {
                let place = "\(collection)/\(id)"
                let elements = Set(document(collection, id)?["items"]?.arrayValue?.compactMap(\.stringValue) ?? [])
                let added = adds[place] ?? [:]
                let unknown = elements.filter { added[$0] == nil }
                if !unknown.isEmpty { mismatches.append("\(place).items holds elements nobody added: \(unknown.sorted().prefix(5))") }
                guard ChaosWorkload.strategy(of: collection) != .serverWins else { continue }
                for (element, returned) in added {
                    let removed = removes[place]?[element]
                    if returned && removed == nil && !elements.contains(element) {
                        mismatches.append("\(place).items lost \(element), whose add returned")
                    }
                    if removed == true && elements.contains(element) {
                        mismatches.append("\(place).items holds \(element), whose remove returned")
                    }
                }
            }
        }
        return mismatches
    }

    /// The answers: a batch answered more than once got the same answer each time; no two
    /// batches applied a change at one version; no value (a write id) was applied by two batches,
    /// outside the manual collection, whose resolver writes values again on purpose; every
    /// conflict was settled as its strategy says; and the contested registers end as the
    /// strategies say, replayed over the applied changes in version order.
    private func checkAnswers() -> [String] {
        var mismatches: [String] = []
        var answers: [String: [UInt8]] = [:]
        var versions: [Version: String] = [:]
        var values: [String: String] = [:]
        var assignments:
            [DocumentKey: [(
                version: Version, batch: String, base: Version, value: Value, conflicted: Bool,
                strategy: ConflictStrategy
            )]] = [:]
        var appliedVersions: [DocumentKey: Set<Version>] = [:]
        for entry in ledger {
            let batch = entry.batchID
            // A retry gets the stored answer, byte for byte: the first one without its cursor.
            let stored = entry.answer.cursor == nil ? entry.answerBody : PushResponse(results: entry.answer.results).body
            if let first = answers[batch] {
                if first != stored { mismatches.append("batch \(batch) was answered twice, differently") }
                continue
            }
            answers[batch] = stored
            guard entry.answer.results.count == entry.request.batch.changes.count else {
                mismatches.append("batch \(batch): \(entry.answer.results.count) results for \(entry.request.batch.changes.count) changes")
                continue
            }
            for (change, result) in zip(entry.request.batch.changes, entry.answer.results) {
                let strategy = change.strategy ?? entry.request.strategy
                let conflicts: [Conflict]
                switch result {
                case .applied(let version, _, let settled):
                    conflicts = settled
                    if let other = versions.updateValue(batch, forKey: version) {
                        mismatches.append("version \(version) was given to batches \(other) and \(batch)")
                    }
                    appliedVersions[change.key, default: []].insert(version)
                    if strategy == .manual && !settled.isEmpty {
                        mismatches.append("\(change.key) was applied with conflicts under manual")
                    }
                    if change.key.collection != "man" {
                        let written = change.delta.assignments.values.map(\.value) + change.delta.setChanges.values.flatMap(\.adds)
                        for case .string(let value) in Set(written) where value.contains("-r") {
                            if let other = values.updateValue(batch, forKey: value) {
                                mismatches.append("\(value) was applied twice: by batches \(other) and \(batch)")
                            }
                        }
                    }
                    if let x = change.delta.assignments[try! FieldPath("x")] {
                        assignments[change.key, default: []].append(
                            (
                                version, batch, x.base, x.value,
                                settled.contains { $0.path.dotted == "x" }, strategy
                            ))
                    }
                case .unresolved(_, let settled):
                    conflicts = settled
                    if strategy != .manual { mismatches.append("\(change.key) was left unresolved under \(strategy)") }
                case .rejected:
                    conflicts = []
                }
                let allowed: Set<Conflict.Outcome> =
                    switch strategy {
                    case .serverWins: [.serverWon]
                    case .clientWins: [.clientWon]
                    case .merge: [.serverWon, .merged, .clientWon]
                    case .manual: [.unresolved]
                    }
                for conflict in conflicts where !allowed.contains(conflict.outcome) {
                    mismatches.append("\(change.key).\(conflict.path.dotted): a conflict settled \(conflict.outcome) under \(strategy)")
                }
                if strategy == .merge, conflicts.contains(where: { $0.outcome == .clientWon && !$0.path.segments.isEmpty }) {
                    mismatches.append("\(change.key): merge let the client win a field")
                }
            }
        }
        for (key, view) in server where !(appliedVersions[key] ?? []).contains(view.version) {
            mismatches.append("\(key) is at version \(view.version), which no answered push gave it")
        }
        for (key, history) in assignments where ChaosWorkload.strategy(of: key.collection) != .manual {
            let sorted = history.sorted { $0.version < $1.version }
            let final = server[key]?.data?["x"]
            var current: (value: Value, version: Version, batch: String)?
            for change in sorted {
                // Each change under its own policy: an online write goes out as written (clientWins).
                if let held = current, change.strategy != .clientWins {
                    // Changed since the change's base by another batch, to another value: a conflict,
                    // which serverWins and merge settle by keeping the server's value.
                    let changedSinceBase = held.version > change.base && held.batch != change.batch && held.value != change.value
                    if changedSinceBase != change.conflicted {
                        mismatches.append(
                            "\(key).x: the change at \(change.version) (base \(change.base)) was \(change.conflicted ? "" : "not ")"
                                + "reported in conflict, but x was last changed at \(held.version)")
                    }
                    if change.conflicted { continue }
                }
                current = (change.value, change.version, change.batch)
            }
            if let current, current.value != final {
                mismatches.append(
                    "\(key).x is \(final.map(\.canonicalJSON) ?? "absent"), but under their strategies the changes applied "
                        + "in version order leave \(current.value.canonicalJSON)")
            }
        }
        return mismatches
    }
}
