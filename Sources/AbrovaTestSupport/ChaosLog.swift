import AbrovaCore
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The long-run convergence workload: what `abrova-chaos-client` writes and what the checker
/// expects of it. Every write carries a write id (`<client>-r<restart>-<n>`) as its value or its
/// set element, so the end state says which writes it holds.
public enum ChaosWorkload {
    /// Notes: one document per create, named by its write id, edited and deleted only by the
    /// client that made it (merge, the default strategy).
    public static let notes = "notes"
    /// A collection every write to is refused (403): rejected writes.
    public static let locked = "locked"
    /// The shared documents' collections and their strategies. Each document has a register `x`
    /// every client writes (contested), a register `own.<client>` per client (never contested), and,
    /// except under manual, an observed-remove set `items` of write ids.
    public static let sharedStrategies: [String: ConflictStrategy] = [
        "sw": .serverWins, "cw": .clientWins, "mw": .merge, "man": .manual,
    ]
    /// The shared documents' ids, in each shared collection.
    public static let sharedDocuments = ["d0", "d1"]
    /// The value `x` starts with.
    public static let initialValue = "init"
    /// Every collection the workload writes, in a fixed order.
    public static var collections: [String] { [notes, locked] + sharedStrategies.keys.sorted() }
    /// The shared collections that hold a set `items`.
    public static var setCollections: [String] { sharedStrategies.filter { $0.value != .manual }.keys.sorted() }

    /// The strategy that settles `collection`'s conflicts.
    public static func strategy(of collection: String) -> ConflictStrategy { sharedStrategies[collection] ?? .merge }
}

/// One line of a chaos client's log. A write is logged `begin` before its call and `done` (or
/// `rejected`) after it returned, so a write whose call returned always has its `done` line, and a
/// write in flight when the process was killed has only its `begin`.
public struct ChaosLogEntry: Hashable, Sendable {
    /// What happened.
    public enum Event: String, Sendable {
        /// A process started (`detail`: its restart number).
        case start
        /// A write is about to be made.
        case begin
        /// The write's call returned (`detail`: "pending" when it was queued, "" when confirmed).
        case done
        /// The write's call threw (`detail`: the status code).
        case rejected
        /// A queued write was refused when sent (`detail`: the status code).
        case rejectedLater
        /// A conflict the server settled, as the SDK reported it (`field`: path, `detail`: outcome).
        case conflict
    }

    /// What a write does.
    public enum Operation: String, Sendable {
        /// `setData` of a new note `notes/<write id>`.
        case createNote
        /// `updateData` of the note's `meta.edit` to the write id.
        case editNote
        /// `delete` of the note.
        case deleteNote
        /// `updateData` of a register (`field`) of a shared document to the write id.
        case assign
        /// `arrayUnion` of the write id to the shared document's `items`.
        case add
        /// `arrayRemove` of an element (`value`) from `items`.
        case remove
        /// `setData` of `locked/<write id>`, which the server refuses.
        case createLocked
    }

    /// What happened.
    public var event: Event
    /// The write id (empty for events that are not about one write).
    public var write: String
    /// What the write does (`begin` only).
    public var operation: Operation?
    /// The document's collection.
    public var collection: String
    /// The document's id.
    public var document: String
    /// The register's dotted path, or the set's.
    public var field: String
    /// The value written or the element added or removed.
    public var value: String
    /// What the event adds: a restart number, a status code, "pending", an outcome.
    public var detail: String

    /// An entry; unused parts stay empty.
    public init(
        _ event: Event, write: String = "", operation: Operation? = nil, collection: String = "", document: String = "",
        field: String = "", value: String = "", detail: String = ""
    ) {
        self.event = event
        self.write = write
        self.operation = operation
        self.collection = collection
        self.document = document
        self.field = field
        self.value = value
        self.detail = detail
    }

    /// The entry as one line of canonical JSON.
    public var line: String {
        var fields: [String: Value] = ["e": .string(event.rawValue)]
        for (name, part) in [("w", write), ("c", collection), ("d", document), ("f", field), ("v", value), ("x", detail)]
        where !part.isEmpty {
            fields[name] = .string(part)
        }
        if let operation { fields["op"] = .string(operation.rawValue) }
        return Value.map(fields).canonicalJSON
    }

    /// Reads a line written by `line`; `nil` for anything else (a line cut short by a kill).
    public init?(line: some StringProtocol) {
        guard let value = try? Value(json: String(line)), case .map(let fields) = value,
            let event = fields["e"]?.stringValue.flatMap(Event.init(rawValue:))
        else { return nil }
        func part(_ name: String) -> String { fields[name]?.stringValue ?? "" }
        self.init(
            event, write: part("w"), operation: fields["op"]?.stringValue.flatMap(Operation.init(rawValue:)), collection: part("c"),
            document: part("d"), field: part("f"), value: part("v"), detail: part("x"))
    }

    /// Every entry of a log file, in order (a last line cut short by a kill is skipped).
    public static func read(_ path: String) -> [ChaosLogEntry] {
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { ChaosLogEntry(line: $0) }
    }
}

/// A log file appended to with one `write(2)` per line (`O_APPEND`): a line is in the kernel
/// before `append` returns, so a process killed with SIGKILL right after keeps it. (It is not
/// synced to the disk: the test kills processes, not the machine.)
public final class ChaosLogFile: Sendable {
    private let descriptor: Int32

    /// Opens (creating) the file for appending.
    ///
    /// - Throws: `RawHTTPConnection.Failure` when it cannot be opened.
    public init(path: String) throws {
        descriptor = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw RawHTTPConnection.Failure(description: "cannot open \(path): errno \(errno)") }
    }

    deinit { _ = close(descriptor) }

    /// Appends the entry as one line.
    public func append(_ entry: ChaosLogEntry) {
        let bytes = Array((entry.line + "\n").utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return }
            offset += written
        }
    }
}
