import AbrovaCore
import AbrovaWire

/// How large the next batch may be: the SDK's setting, within the limits the server announces
/// (`GET /v1/health`), and halved while a run splits a batch the server refused as a whole. A
/// value with no I/O; `SyncRunner` asks the server and freezes batches by it.
struct BatchLimits: Equatable {
    /// The bytes a batch's body may take when the server announces no limit: half its default
    /// limit on bodies, so that a batch refused for its size is rare; splitting handles the rest.
    static let unannouncedBytes = 8 << 20

    /// The server's limits, when it announced them.
    private(set) var announced: ServerLimits?
    /// Whether to ask the server for its limits before the next push: at first, and after a
    /// refusal for size (the limits may have changed).
    private(set) var needsAnnouncement = true
    private var splitChanges: Int?
    private var splitBytes: Int?

    /// The server announced `limits` (`nil`: none).
    mutating func announce(_ limits: ServerLimits?) {
        announced = limits
        needsAnnouncement = false
    }

    /// The server refused a batch of `changes` changes and `bytes` bytes as a whole: the next
    /// batches of this run take at most half of each, so a refused batch is split until the change
    /// at fault stands alone.
    mutating func split(changes: Int, bytes: Int) {
        splitChanges = max(1, min(splitChanges ?? .max, changes / 2))
        splitBytes = max(1, min(splitBytes ?? .max, bytes / 2))
        needsAnnouncement = true
    }

    /// A new run starts from the full size again.
    mutating func endSplit() {
        splitChanges = nil
        splitBytes = nil
    }

    /// The most changes in a batch, given the SDK's setting.
    func changes(_ configured: Int) -> Int {
        max(1, min(configured, announced?.maximumChanges ?? .max, splitChanges ?? .max))
    }

    /// The most bytes of a batch's body.
    var bytes: Int {
        max(1, min(announced?.maximumPushBytes ?? Self.unannouncedBytes, splitBytes ?? .max))
    }
}

/// What a push refused as a whole means for its batch: only the sync server's per-change answer
/// rejects a change, so a refusal of the request never rolls back what it held.
enum BatchRefusal: Equatable {
    /// Not the changes' fault, or not a refusal at all (unreachable, unauthorized, a refused route,
    /// client id or batch number): the queue stays and the run ends as the failure says.
    case endRun
    /// Too large, or one of its changes unreadable, before anything was applied: send
    /// the changes again in smaller batches.
    case split
    /// A batch of one change (or one atomic group, which is never split) refused so: it can
    /// never be sent; reject it alone.
    case rejectChange(reason: Refusal.Reason, message: String)

    /// `units`: the batch's changes outside groups and its groups (`Batch.units`).
    init(_ failure: TransportFailure, units: Int) {
        guard case .refused(let reason, let message) = failure, reason == .invalid || reason == .tooLarge else {
            self = .endRun
            return
        }
        self = units > 1 ? .split : .rejectChange(reason: reason, message: message)
    }
}
