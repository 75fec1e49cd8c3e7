/// A failure reported by PostgreSQL or by libpq.
///
/// Its description carries the SQLSTATE and the server's message, never the bound values.
public struct PostgresError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The five-character SQLSTATE (`23505` a unique violation, `08006` a connection failure),
    /// empty when libpq failed before the server answered.
    public let sqlState: String
    /// libpq's or the server's message.
    public let message: String
    /// Whether the connection is gone (the server restarted, the network dropped, it could not be
    /// opened): the work was not done, or its outcome is unknown, and a new connection may succeed.
    public let isConnectionLost: Bool
    /// In a pipeline (`PostgresConnection.pipeline(_:)`), the index of the step that failed.
    public internal(set) var failedStep: Int?

    init(sqlState: String, message: String, isConnectionLost: Bool) {
        self.sqlState = sqlState
        self.message = message.trimmingTrailingWhitespace
        self.isConnectionLost = isConnectionLost
    }

    public var description: String {
        sqlState.isEmpty ? "PostgreSQL: \(message)" : "PostgreSQL \(sqlState): \(message)"
    }
}

extension String {
    fileprivate var trimmingTrailingWhitespace: String {
        var text = Substring(self)
        while let last = text.last, last.isWhitespace { text = text.dropLast() }
        return String(text)
    }
}
