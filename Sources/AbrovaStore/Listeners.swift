import AbrovaCore
import Foundation

/// The store's listeners: each an `AsyncStream` that hears of every committed change to what it
/// watches, when what it shows changed: a change that leaves its snapshot as it was (the device's
/// own write pulled back, another document of the collection) is not told. Any number may listen;
/// ending one affects no other.
struct Listeners {
    enum Listener {
        /// A document's listener, with the snapshot it was last given.
        case document(DocumentKey, AsyncStream<DocumentSnapshot>.Continuation, shown: DocumentSnapshot?)
        /// A query's listener, with the documents it was last given.
        case query(DocumentQuery, AsyncStream<[DocumentSnapshot]>.Continuation, shown: [DocumentSnapshot]?)
        /// Hears the count of unsent writes, with the count it was last given.
        case unsentWrites(AsyncStream<Int>.Continuation, told: Int)
        /// Hears how many document and query listeners there are.
        case liveListenerCount(AsyncStream<Int>.Continuation)

        /// Whether it shows documents (what keeps a device watching the server for news).
        var showsDocuments: Bool {
            switch self {
            case .document, .query: true
            case .unsentWrites, .liveListenerCount: false
            }
        }
    }

    var all: [UUID: Listener] = [:]
    /// When the unsent-write count is told next.
    var unsentCountNotices = CountNoticeThrottle()

    /// How many listeners show documents.
    var liveCount: Int { all.values.count(where: \.showsDocuments) }

    /// Tells the unsent-write listeners `count`, each unless it is the count it was last given (a
    /// notice at the end of an interval tells the count then, which changes may have brought back).
    mutating func tellUnsentCount(_ count: Int) {
        for (id, listener) in all {
            guard case .unsentWrites(let continuation, let told) = listener, told != count else { continue }
            continuation.yield(count)
            all[id] = .unsentWrites(continuation, told: count)
        }
    }

    /// Whether any listener follows the unsent-write count.
    var hasUnsentCountListener: Bool {
        all.values.contains { if case .unsentWrites = $0 { true } else { false } }
    }

    /// Tells the count listeners how many listeners show documents now.
    func tellLiveCount() {
        let count = liveCount
        for case .liveListenerCount(let continuation) in all.values { continuation.yield(count) }
    }
}

/// When a changed count is told to its listeners: at once when it was last told at least
/// `interval` ago, else once at the end of that interval, with the count as it is then. A burst
/// of writes then wakes a listener (a thread, for the app's pending count) once an interval, not
/// once a write, and the last count is always told.
struct CountNoticeThrottle {
    /// The shortest time between two notices.
    static let interval = Duration.milliseconds(10)

    /// What to do about a change.
    enum Decision: Equatable {
        /// Tell the count now.
        case tellNow
        /// Tell it after this long (nothing else is scheduled).
        case tell(after: Duration)
        /// Nothing: a notice is already scheduled, and will tell the count as it is then.
        case nothing
    }

    private(set) var lastTold: ContinuousClock.Instant?
    private(set) var isScheduled = false

    /// The count changed at `now`.
    mutating func changed(at now: ContinuousClock.Instant) -> Decision {
        if isScheduled { return .nothing }
        if let lastTold, now - lastTold < Self.interval {
            isScheduled = true
            return .tell(after: Self.interval - (now - lastTold))
        }
        lastTold = now
        return .tellNow
    }

    /// The scheduled notice told the count at `now`.
    mutating func toldScheduled(at now: ContinuousClock.Instant) {
        isScheduled = false
        lastTold = now
    }
}

extension LocalStore {
    /// The document now, then after every committed change to it (local writes, rollbacks,
    /// pulled changes), until the stream is dropped or cancelled.
    package func changes(of key: DocumentKey) -> AsyncStream<DocumentSnapshot> {
        let (stream, continuation) = AsyncStream.makeStream(of: DocumentSnapshot.self)
        let snapshot = try? document(key)
        if let snapshot { continuation.yield(snapshot) }
        register(.document(key, continuation, shown: snapshot), continuation)
        return stream
    }

    /// The query's documents now, then after every committed change in its collection.
    package func changes(matching query: DocumentQuery) -> AsyncStream<[DocumentSnapshot]> {
        let (stream, continuation) = AsyncStream.makeStream(of: [DocumentSnapshot].self)
        let documents = try? documents(matching: query)
        if let documents { continuation.yield(documents) }
        register(.query(query, continuation, shown: documents), continuation)
        return stream
    }

    /// The number of writes not yet confirmed by the server, now and whenever it changes.
    package func unsentWriteCounts() -> AsyncStream<Int> {
        let (stream, continuation) = AsyncStream.makeStream(of: Int.self)
        continuation.yield(unsentWriteCount)
        register(.unsentWrites(continuation, told: unsentWriteCount), continuation)
        return stream
    }

    /// How many document and query listeners there are, now and whenever it changes: while any
    /// shows documents, the SDK watches the server for news. Not counted itself.
    package func liveListenerCounts() -> AsyncStream<Int> {
        let (stream, continuation) = AsyncStream.makeStream(of: Int.self)
        continuation.yield(listeners.liveCount)
        register(.liveListenerCount(continuation), continuation)
        return stream
    }

    private func register<Element>(_ listener: Listeners.Listener, _ continuation: AsyncStream<Element>.Continuation) {
        guard !isClosed else { return continuation.finish() }
        let id = UUID()
        listeners.all[id] = listener
        continuation.onTermination = { [weak self] _ in Task { await self?.removeListener(id) } }
        if listener.showsDocuments { listeners.tellLiveCount() }
    }

    private func removeListener(_ id: UUID) {
        guard let removed = listeners.all.removeValue(forKey: id) else { return }
        if removed.showsDocuments { listeners.tellLiveCount() }
    }

    /// The number of listeners, for tests.
    package var listenerCount: Int { listeners.all.count }

    /// Tells the listeners of what a committed transaction changed, each only when what it shows
    /// is not what it was last given (a rollback is always told: it is news of its own).
    /// (The keys are an autoclosure: with no listener, as when an app writes in bulk, no set is built.)
    func notify(
        changed changedKeys: @autoclosure () -> Set<DocumentKey>, rollbacks: Set<DocumentKey> = [],
        unsentWritesChanged: Bool = true
    ) {
        guard !listeners.all.isEmpty else { return }
        let keys = changedKeys()
        let collections = Set(keys.map(\.collection))
        for (id, listener) in listeners.all {
            switch listener {
            case .document(let key, let continuation, let shown) where keys.contains(key):
                guard let snapshot = try? document(key) else { continue }
                let isRollback = rollbacks.contains(key)
                guard isRollback || snapshot != shown else { continue }
                continuation.yield(isRollback ? snapshot.markingRollback() : snapshot)
                listeners.all[id] = .document(key, continuation, shown: snapshot)
            case .query(let query, let continuation, let shown) where collections.contains(query.collection):
                guard let documents = try? documents(matching: query) else { continue }
                let isRollback = documents.contains { rollbacks.contains($0.key) }
                guard isRollback || documents != shown else { continue }
                continuation.yield(documents.map { rollbacks.contains($0.key) ? $0.markingRollback() : $0 })
                listeners.all[id] = .query(query, continuation, shown: documents)
            default:
                break
            }
        }
        if unsentWritesChanged, listeners.hasUnsentCountListener { noteUnsentCountChanged() }
    }

    /// Tells the unsent-write listeners the count now, or schedules the notice (`CountNoticeThrottle`).
    private func noteUnsentCountChanged() {
        switch listeners.unsentCountNotices.changed(at: .now) {
        case .tellNow:
            listeners.tellUnsentCount(unsentWriteCount)
        case .tell(let delay):
            Task { [weak self] in
                try? await Task.sleep(for: delay)
                await self?.tellScheduledUnsentCount()
            }
        case .nothing:
            break
        }
    }

    private func tellScheduledUnsentCount() {
        listeners.unsentCountNotices.toldScheduled(at: .now)
        listeners.tellUnsentCount(unsentWriteCount)
    }
}

extension DocumentSnapshot {
    /// The same snapshot, marked as showing a rolled-back write.
    func markingRollback() -> DocumentSnapshot {
        var metadata = metadata
        metadata.isRollback = true
        return withMetadata(metadata)
    }
}
