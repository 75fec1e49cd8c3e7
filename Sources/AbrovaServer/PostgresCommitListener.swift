import AbrovaLocking
import AbrovaPostgres
import Foundation

/// Hears the commits of every server process on one PostgreSQL database: a connection of its own
/// `LISTEN`s on `channel`, and each push that wrote documents `NOTIFY`s it with its schema's name
/// in the same transaction (so the notification arrives when, and only if, the push commits).
///
/// Its thread reconnects by itself when the connection breaks, and then reports a commit, since
/// one may have been missed meanwhile.
final class PostgresCommitListener: CommitObservation {
    static let channel = "abrova_changes"

    private let isCancelled = Flag()

    init(url: String, schema: String, committed: @escaping @Sendable () -> Void) {
        Thread.detachNewThread { [isCancelled] in
            Self.listen(url: url, schema: schema, committed: committed, isCancelled: isCancelled)
        }
    }

    func cancel() { isCancelled.set() }

    /// A flag the listener's thread checks between waits.
    final class Flag: Sendable {
        private let value = Protected<Bool>(false)
        var isSet: Bool { value.value }
        func set() { value.withLock { $0 = true } }
    }

    private static func listen(url: String, schema: String, committed: @Sendable () -> Void, isCancelled: Flag) {
        var retryDelay = Duration.milliseconds(100)
        while !isCancelled.isSet {
            do {
                let connection = try PostgresConnection(url: url)
                try connection.execute("LISTEN \(channel)")
                retryDelay = .milliseconds(100)
                committed()
                while !isCancelled.isSet {
                    // Short waits, so that a cancelled listener lets its connection go soon.
                    let payloads = try connection.notifications(waitingUpTo: .milliseconds(250))
                    if payloads.contains(schema) { committed() }
                }
            } catch {
                Thread.sleep(forTimeInterval: Double(retryDelay.components.seconds) + Double(retryDelay.components.attoseconds) / 1e18)
                retryDelay = min(retryDelay * 2, .seconds(5))
            }
        }
    }
}
