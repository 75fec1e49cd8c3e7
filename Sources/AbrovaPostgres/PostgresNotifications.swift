import CLibPQ

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension PostgresConnection {
    /// The payloads of the notifications (`NOTIFY`) that have come on the channels this connection
    /// `LISTEN`s to, waiting up to `timeout` for the first when none has.
    ///
    /// - Throws: `PostgresError` (`isConnectionLost`) when the connection broke.
    public func notifications(waitingUpTo timeout: Duration) throws(PostgresError) -> [String] {
        var payloads = takeNotifications()
        guard payloads.isEmpty else { return payloads }
        let socket = PQsocket(handle)
        guard socket >= 0 else { throw PostgresError(sqlState: "", message: "the connection has no socket", isConnectionLost: true) }
        var descriptor = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
        let milliseconds = Int32(max(0, min(timeout / .milliseconds(1), 86_400_000)))
        let ready = poll(&descriptor, 1, milliseconds)
        guard ready != 0 else { return [] }
        guard ready > 0 || errno == EINTR else {
            throw PostgresError(sqlState: "", message: "waiting for notifications failed (errno \(errno))", isConnectionLost: true)
        }
        guard PQconsumeInput(handle) == 1, !isBroken else {
            throw PostgresError(sqlState: "", message: String(cString: PQerrorMessage(handle)), isConnectionLost: true)
        }
        payloads = takeNotifications()
        return payloads
    }

    private func takeNotifications() -> [String] {
        var payloads: [String] = []
        while let notification = PQnotifies(handle) {
            payloads.append(notification.pointee.extra.map { String(cString: $0) } ?? "")
            PQfreemem(notification)
        }
        return payloads
    }
}
