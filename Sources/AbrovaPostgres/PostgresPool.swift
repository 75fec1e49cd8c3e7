import Foundation

/// Connections to one PostgreSQL database, lent to one thread at a time.
///
/// At most `maximumConnections` are open; a caller waits for one when all are lent. A connection
/// that broke (the server restarted, the network dropped) is closed instead of returned, so the
/// next caller opens a fresh one: the pool reconnects by itself once the server is back.
public final class PostgresPool: Sendable {
    private let url: String
    private let maximumConnections: Int
    private let state: Pool

    /// A pool for `url`; no connection is opened until one is needed.
    public init(url: String, maximumConnections: Int = 8) {
        precondition(maximumConnections > 0, "a pool needs at least one connection")
        self.url = url
        self.maximumConnections = maximumConnections
        state = Pool()
    }

    /// Runs `body` on a connection of the pool.
    ///
    /// - Throws: what `body` throws, or `PostgresError` when no connection can be opened.
    public func withConnection<Result>(_ body: (PostgresConnection) throws -> Result) throws -> Result {
        let connection = try take()
        defer { giveBack(connection) }
        return try body(connection)
    }

    private func take() throws(PostgresError) -> PostgresConnection {
        state.condition.lock()
        while true {
            if let idle = state.idle.popLast() {
                state.condition.unlock()
                return idle
            }
            if state.open < maximumConnections { break }
            state.condition.wait()
        }
        state.open += 1
        state.condition.unlock()
        do {
            return try PostgresConnection(url: url)
        } catch {
            state.condition.withLock { state.open -= 1 }
            state.condition.signal()
            throw error
        }
    }

    private func giveBack(_ connection: PostgresConnection) {
        state.condition.withLock {
            if connection.isBroken { state.open -= 1 } else { state.idle.append(connection) }
        }
        state.condition.signal()
    }

    /// Closes the idle connections and forgets them (lent ones close when they come back broken,
    /// or stay for reuse). The next call opens new ones.
    public func closeIdleConnections() {
        state.condition.withLock {
            state.open -= state.idle.count
            state.idle.removeAll()
        }
        state.condition.broadcast()
    }
}

/// The pool's mutable state, used only while `condition` is locked.
private final class Pool: @unchecked Sendable {
    let condition = NSCondition()
    var idle: [PostgresConnection] = []
    var open = 0
}
