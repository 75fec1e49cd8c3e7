import AbrovaCore
import AbrovaLocking
import Dispatch
import Foundation

/// The watches waiting for a change their caller may read (`GET /v1/watch`, Spec/protocol.md).
///
/// One thread of its own checks them all: when a change commits (`changesCommitted()`, from this
/// process's pushes or from another process through the store), it scans the changes after the
/// smallest position once and checks each watch against the read rules (`WatchDecisions`). A
/// watch is answered `true` when a change it may read is there, `false` when its idle time runs
/// out or the hub closes. A waiting watch costs an entry here and nothing else: no thread, no
/// store call of its own.
final class WatchHub: Sendable {
    /// Answers a watch; called once, on the hub's thread (or the caller's, for `close`).
    typealias Answer = @Sendable (_ changed: Bool) -> Void

    private struct Waiter {
        var position: WatchPosition
        let deadline: ContinuousClock.Instant
        let answer: Answer
    }

    private struct State {
        var waiters: [UInt64: Waiter] = [:]
        var nextID: UInt64 = 0
        /// A change committed (or a watch arrived) since the last scan.
        var isDirty = false
        var isRunning = false
        var isClosed = false
        /// Times the thread has looked at the watches (tests check that it rests).
        var passes = 0
    }

    private let store: any ServerStore
    private let rules: RuleBook
    private let idleTime: Duration
    private let maximumWatches: Int
    private let pageBytes: Int
    private let log: @Sendable (String) -> Void
    private let state = Protected(State())
    /// Signalled when the hub has work: a change, a new watch, closing.
    private let wake = DispatchSemaphore(value: 0)

    init(
        store: any ServerStore, rules: RuleBook, idleTime: Duration, maximumWatches: Int, pageBytes: Int,
        log: @escaping @Sendable (String) -> Void
    ) {
        self.store = store
        self.rules = rules
        self.idleTime = idleTime
        self.maximumWatches = maximumWatches
        self.pageBytes = pageBytes
        self.log = log
    }

    /// Watches waiting now.
    var count: Int { state.withLock { $0.waiters.count } }

    /// Times the hub's thread has looked at the watches so far.
    var passes: Int { state.withLock { $0.passes } }

    /// Adds a watch; `answer` is called once, unless the watch is cancelled first. Its ID (for
    /// `cancel`), or nil when the hub is full or closed (nothing is added then).
    func add(_ position: WatchPosition, answer: @escaping Answer) -> UInt64? {
        let (added, starts, signals) = state.withLock { state -> (UInt64?, Bool, Bool) in
            guard !state.isClosed, state.waiters.count < maximumWatches else { return (nil, false, false) }
            state.nextID += 1
            state.waiters[state.nextID] = Waiter(position: position, deadline: .now + idleTime, answer: answer)
            let starts = !state.isRunning
            // One signal per pass, as for commits: the semaphore counts, and a signal for each of
            // 10,000 watches arriving made as many passes over all of them once they had arrived.
            let signals = !starts && !state.isDirty
            state.isRunning = true
            state.isDirty = true
            return (state.nextID, starts, signals)
        }
        if starts {
            Thread.detachNewThread { [self] in run() }
        } else if signals {
            wake.signal()
        }
        return added
    }

    /// Drops watch `id` without answering it: its caller is gone. Nothing, when it was answered
    /// already (or is being answered now).
    func cancel(_ id: UInt64) {
        let dropped = state.withLock { $0.waiters.removeValue(forKey: id) }
        // Released after the lock: its answer holds the responder, whose release calls back in.
        _ = dropped
    }

    /// A change committed: the watches are checked again.
    func changesCommitted() {
        let signals = state.withLock { state -> Bool in
            guard !state.isDirty, state.isRunning else { return false }
            state.isDirty = true
            return true
        }
        if signals { wake.signal() }
    }

    /// Answers every watch `false` and takes no more.
    func close() {
        let waiters = state.withLock { state -> [Waiter] in
            state.isClosed = true
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        wake.signal()
        for waiter in waiters { waiter.answer(false) }
    }

    // MARK: - The hub's thread

    private func run() {
        let observation = store.observeCommits { [weak self] in self?.changesCommitted() }
        defer { observation?.cancel() }
        while true {
            let (isClosed, isDirty) = state.withLock { state in
                defer {
                    state.isDirty = false
                    state.passes += 1
                }
                return (state.isClosed, state.isDirty)
            }
            if isClosed { return }
            answerExpired()
            if isDirty, !check() {
                // The scan stopped before the end: the rest is scanned next, without waiting.
                state.withLock { $0.isDirty = true }
                continue
            }
            if state.withLock({ $0.isDirty }) { continue }
            let deadline = state.withLock { $0.waiters.values.map(\.deadline).min() }
            if let deadline {
                let milliseconds = max(0, (deadline - .now) / .milliseconds(1)) + 1
                _ = wake.wait(timeout: .now() + .milliseconds(Int(milliseconds)))
            } else if wake.wait(timeout: .now() + Self.linger) == .timedOut {
                // No watch for a while: the thread ends (and stops listening) until the next one.
                let ends = state.withLock { state -> Bool in
                    guard state.waiters.isEmpty, !state.isDirty else { return false }
                    state.isRunning = false
                    return true
                }
                if ends { return }
            }
        }
    }

    /// How long the thread waits for a new watch before it ends: a device watches again right
    /// after each answer, so the thread (and its commit observation) outlives the gap.
    static let linger = DispatchTimeInterval.seconds(30)

    private func answerExpired() {
        let now = ContinuousClock.now
        let expired = state.withLock { state -> [Waiter] in
            let ids = state.waiters.compactMap { $0.value.deadline <= now ? $0.key : nil }
            return ids.compactMap { state.waiters.removeValue(forKey: $0) }
        }
        for waiter in expired { waiter.answer(false) }
    }

    /// One scan from the smallest position, in pages, and each watch's outcome; `false` when the
    /// scan stopped before the newest change (a bounded amount of work per pass).
    private func check() -> Bool {
        let watches = state.withLock { state in state.waiters.map { (id: $0.key, position: $0.value.position) } }
        guard let from = watches.map(\.position.after).min() else { return true }
        var rows: [StoredDocument] = []
        var scannedTo = from
        var reachedEnd = false
        do {
            for _ in 0..<8 {
                // Fewer rows than asked may be the store's byte budget: only an empty page is the end.
                let page = try store.changes(after: scannedTo, limit: 500, collections: nil, maximumBytes: pageBytes)
                guard let last = page.last else {
                    reachedEnd = true
                    break
                }
                rows += page
                scannedTo = last.version
            }
        } catch {
            log("watch check failed: \(error)")
            return true
        }
        let decisions = WatchDecisions(watches.map(\.position), rows: rows, scannedTo: scannedTo, rules: rules)
        let woken = state.withLock { state -> [Waiter] in
            var woken: [Waiter] = []
            for (watch, outcome) in zip(watches, decisions.outcomes) {
                if outcome.wakes {
                    if let waiter = state.waiters.removeValue(forKey: watch.id) { woken.append(waiter) }
                } else {
                    state.waiters[watch.id]?.position.after = outcome.after
                }
            }
            return woken
        }
        for waiter in woken { waiter.answer(true) }
        return reachedEnd
    }
}
