import AbrovaCore
import Foundation

/// The store's listeners: each an `AsyncStream` that hears of every committed change to what it
/// watches. Any number may listen; ending one affects no other.
struct Listeners {
    enum Listener {
        case document(DocumentKey, AsyncStream<DocumentSnapshot>.Continuation)
        case query(DocumentQuery, AsyncStream<[DocumentSnapshot]>.Continuation)
        case unsentWrites(AsyncStream<Int>.Continuation)
    }

    var all: [UUID: Listener] = [:]
}

extension LocalStore {
    /// The document now, then after every committed change to it (local writes, rollbacks,
    /// pulled changes), until the stream is dropped or cancelled.
    package func changes(of key: DocumentKey) -> AsyncStream<DocumentSnapshot> {
        let (stream, continuation) = AsyncStream.makeStream(of: DocumentSnapshot.self)
        if let snapshot = try? document(key) { continuation.yield(snapshot) }
        register(.document(key, continuation), continuation)
        return stream
    }

    /// The query's documents now, then after every committed change in its collection.
    package func changes(matching query: DocumentQuery) -> AsyncStream<[DocumentSnapshot]> {
        let (stream, continuation) = AsyncStream.makeStream(of: [DocumentSnapshot].self)
        if let documents = try? documents(matching: query) { continuation.yield(documents) }
        register(.query(query, continuation), continuation)
        return stream
    }

    /// The number of writes not yet confirmed by the server, now and whenever it changes.
    package func unsentWriteCounts() -> AsyncStream<Int> {
        let (stream, continuation) = AsyncStream.makeStream(of: Int.self)
        continuation.yield(unsentWriteCount)
        register(.unsentWrites(continuation), continuation)
        return stream
    }

    private func register<Element>(_ listener: Listeners.Listener, _ continuation: AsyncStream<Element>.Continuation) {
        guard !isClosed else { return continuation.finish() }
        let id = UUID()
        listeners.all[id] = listener
        continuation.onTermination = { [weak self] _ in Task { await self?.removeListener(id) } }
    }

    private func removeListener(_ id: UUID) {
        listeners.all[id] = nil
    }

    /// The number of listeners, for tests.
    package var listenerCount: Int { listeners.all.count }

    /// Tells the listeners of what a committed transaction changed.
    /// (The keys are an autoclosure: with no listener, as when an app writes in bulk, no set is built.)
    func notify(
        changed changedKeys: @autoclosure () -> Set<DocumentKey>, rollbacks: Set<DocumentKey> = [],
        unsentWritesChanged: Bool = true
    ) {
        guard !listeners.all.isEmpty else { return }
        let keys = changedKeys()
        let collections = Set(keys.map(\.collection))
        for listener in listeners.all.values {
            switch listener {
            case .document(let key, let continuation) where keys.contains(key):
                guard let snapshot = try? document(key) else { continue }
                continuation.yield(rollbacks.contains(key) ? snapshot.markingRollback() : snapshot)
            case .query(let query, let continuation) where collections.contains(query.collection):
                guard let documents = try? documents(matching: query) else { continue }
                continuation.yield(documents.map { rollbacks.contains($0.key) ? $0.markingRollback() : $0 })
            case .unsentWrites(let continuation) where unsentWritesChanged:
                continuation.yield(unsentWriteCount)
            default:
                break
            }
        }
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
