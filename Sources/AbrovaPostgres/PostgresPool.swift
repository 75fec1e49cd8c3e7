import Foundation

/// Connections to one PostgreSQL database, lent to one thread at a time.
///
/// At most `maximumConnections` are open; a caller waits for one when all are lent. A connection
/// that broke (the server restarted, the network dropped) is closed instead of returned, and the
/// idle ones with it, so the next caller opens a fresh one: the pool reconnects by itself once the
/// server is back.
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

    /// Connections open now (lent or idle), idle now, and the most the pool opens.
    public var statistics: (open: Int, idle: Int, maximum: Int) {
        state.condition.withLock { (state.open, state.idle.count, maximumConnections) }
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
        let dropped: [PostgresConnection] = state.condition.withLock {
            guard connection.isBroken else {
                state.idle.append(connection)
                return []
            }
            // The idle ones were opened before this one broke, and most likely broke with it (a
            // server restart cuts them all; libpq finds out only when one is used). Closed too,
            // so the caller's retry opens a new connection instead of taking another dead one.
            let dropped = state.idle
            state.idle.removeAll()
            state.open -= 1 + dropped.count
            return dropped
        }
        state.condition.broadcast()
        _ = dropped // closed here, outside the lock
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
