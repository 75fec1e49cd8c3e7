import CSQLite

/// An SQLite result code, extended codes included (`SQLITE_BUSY_SNAPSHOT`, ...).
public struct SQLiteResultCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// SQLite's number for the code.
    public let rawValue: Int32

    /// A code from SQLite's number.
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// The primary code (the low byte of an extended code).
    public var primary: SQLiteResultCode { SQLiteResultCode(rawValue: rawValue & 0xFF) }

    // SQLite's primary result codes, by their names in sqlite3.h.
    /// `SQLITE_ERROR`.
    public static let error = SQLiteResultCode(rawValue: SQLITE_ERROR)
    /// `SQLITE_BUSY`.
    public static let busy = SQLiteResultCode(rawValue: SQLITE_BUSY)
    /// `SQLITE_LOCKED`.
    public static let locked = SQLiteResultCode(rawValue: SQLITE_LOCKED)
    /// `SQLITE_READONLY`.
    public static let readOnly = SQLiteResultCode(rawValue: SQLITE_READONLY)
    /// `SQLITE_IOERR`.
    public static let ioError = SQLiteResultCode(rawValue: SQLITE_IOERR)
    /// `SQLITE_CORRUPT`.
    public static let corrupt = SQLiteResultCode(rawValue: SQLITE_CORRUPT)
    /// `SQLITE_FULL`.
    public static let full = SQLiteResultCode(rawValue: SQLITE_FULL)
    /// `SQLITE_CANTOPEN`.
    public static let cannotOpen = SQLiteResultCode(rawValue: SQLITE_CANTOPEN)
    /// `SQLITE_CONSTRAINT`.
    public static let constraint = SQLiteResultCode(rawValue: SQLITE_CONSTRAINT)
    /// `SQLITE_MISMATCH`.
    public static let mismatch = SQLiteResultCode(rawValue: SQLITE_MISMATCH)
    /// `SQLITE_NOTADB`.
    public static let notADatabase = SQLiteResultCode(rawValue: SQLITE_NOTADB)

    public var description: String {
        "\(String(cString: sqlite3_errstr(rawValue))) (\(rawValue))"
    }
}

/// An error from SQLite: its extended result code, its message, and the SQL that failed.
///
/// The description never contains bound values: they may be users' data.
public struct SQLiteError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The extended result code.
    public let code: SQLiteResultCode
    /// SQLite's message.
    public let message: String
    /// The statement that failed, when there was one.
    public let sql: String?

    /// An error with its code, SQLite's message and the statement's SQL.
    public init(code: SQLiteResultCode, message: String, sql: String? = nil) {
        self.code = code
        self.message = message
        self.sql = sql
    }

    /// The last error on a connection.
    init(connection: OpaquePointer?, code: Int32, sql: String?) {
        let extended = connection.map { sqlite3_extended_errcode($0) } ?? code
        let message = connection.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(code))
        self.init(code: SQLiteResultCode(rawValue: extended == 0 ? code : extended), message: message, sql: sql)
    }

    public var description: String {
        "SQLite error \(code): \(message)" + (sql.map { " in \"\($0)\"" } ?? "")
    }
}
