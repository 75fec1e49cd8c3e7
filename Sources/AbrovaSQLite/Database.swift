import CSQLite
import CSQLiteFrames

/// A value SQLite stores.
public enum SQLiteValue: Hashable, Sendable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])
}

/// A connection to an SQLite database file.
///
/// Not `Sendable`: a connection belongs to one owner (an actor or a serial queue) and is used only
/// from there. In WAL mode one connection writes while others read.
///
///     let database = try Database(path: path)
///     try database.write { database in
///         try database.run("INSERT INTO notes (id, body) VALUES (?, ?)", [.text(id), .text(body)])
///     }
public final class Database {
    /// How hard a commit tries to survive power loss.
    public enum Durability: Sendable {
        /// `synchronous=NORMAL` in WAL mode: a commit survives a crash of the app, and the database
        /// is never corrupted, but the last commits before a power loss may be rolled back.
        case normal
        /// `synchronous=FULL`: the WAL is synced at every commit, so a commit that returned
        /// survives power loss too, at the cost of one fsync per transaction.
        case full
    }

    let handle: OpaquePointer
    private var statements: [String: Statement] = [:]
    private var isInTransaction = false

    /// Opens (or creates) the database at `path` in WAL mode.
    ///
    /// - Throws: `SQLiteError` when the file cannot be opened or is not a database.
    /// - Parameter isExclusive: keep the file locked for this connection alone (`locking_mode=
    ///   EXCLUSIVE`): no file lock is taken per transaction, and no other connection or process can
    ///   use the file while this one is open. For a store that one process owns.
    /// - Parameter writesFramesWhole: write each WAL frame in one system call rather than two (its
    ///   header, then its page), through `CSQLiteFrames`' VFS. The file is the same either way
    ///   (Spec/storage.md).
    /// - Parameter newFilePageSize: the page size a new file gets (a power of two from 512 to
    ///   65,536; SQLite's default is 4,096). A file that exists keeps its own.
    public init(
        path: String, durability: Durability = .normal, isExclusive: Bool = false, writesFramesWhole: Bool = false,
        newFilePageSize: Int? = nil
    ) throws(SQLiteError) {
        let vfs = writesFramesWhole ? try Self.framesVFS() : nil
        handle = try Self.open(path, flags: SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, vfs: vfs)
        // Exclusive mode must be set before WAL is entered, so that the WAL index lives in memory.
        if isExclusive { try execute("PRAGMA locking_mode=EXCLUSIVE") }
        // Before WAL is entered: SQLite takes it for a file with no page yet, and ignores it otherwise.
        if let newFilePageSize { try execute("PRAGMA page_size=\(newFilePageSize)") }
        // The first read of the file: a file that is not a database fails here, clearly.
        try execute("PRAGMA journal_mode=WAL")
        try execute(durability == .full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL")
        try execute("PRAGMA foreign_keys=ON")
    }

    /// Opens the existing database at `path` for reading only: nothing is created, migrated or
    /// set (an inspection of a file that must stay as it is). A busy file is waited for 1 s.
    ///
    /// - Throws: `SQLiteError` when the file is missing, cannot be read, or is not a database.
    public init(readingOnly path: String) throws(SQLiteError) {
        handle = try Self.open(path, flags: SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, busyMilliseconds: 1_000)
        try execute("PRAGMA schema_version") // the first read: a file that is not a database fails here
    }

    /// The name of `CSQLiteFrames`' VFS, registered on first use.
    private static func framesVFS() throws(SQLiteError) -> String {
        let code = abrova_frames_vfs_register()
        guard code == SQLITE_OK else {
            throw SQLiteError(code: SQLiteResultCode(rawValue: code), message: "the frame-writing VFS cannot be registered", sql: nil)
        }
        return String(cString: abrova_frames_vfs_name)
    }

    private static func open(_ path: String, flags: Int32, busyMilliseconds: Int32 = 5_000, vfs: String? = nil) throws(SQLiteError)
        -> OpaquePointer
    {
        var connection: OpaquePointer?
        let code = sqlite3_open_v2(path, &connection, flags, vfs)
        guard code == SQLITE_OK, let connection else {
            let error = SQLiteError(connection: connection, code: code, sql: nil)
            sqlite3_close_v2(connection) // the handle is closed even when opening failed
            throw error
        }
        sqlite3_extended_result_codes(connection, 1)
        sqlite3_busy_timeout(connection, busyMilliseconds)
        return connection
    }

    deinit { close() }

    private var isClosed = false

    /// Closes the connection now (its locks go with it) rather than when the value is released.
    /// Every later call throws `SQLiteError` (misuse).
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        statements.removeAll() // statements are finalized before the connection closes
        sqlite3_close_v2(handle)
    }

    private func checkOpen(_ sql: String) throws(SQLiteError) {
        guard !isClosed else {
            throw SQLiteError(code: SQLiteResultCode(rawValue: SQLITE_MISUSE), message: "the database was closed", sql: sql)
        }
    }

    /// Runs one or more statements without parameters.
    public func execute(_ sql: String) throws(SQLiteError) {
        try checkOpen(sql)
        var message: UnsafeMutablePointer<CChar>?
        let code = sqlite3_exec(handle, sql, nil, nil, &message)
        if code != SQLITE_OK {
            let text = message.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(code))
            sqlite3_free(message)
            throw SQLiteError(code: SQLiteResultCode(rawValue: sqlite3_extended_errcode(handle)), message: text, sql: sql)
        }
    }

    /// The prepared statement for `sql`, from the cache when it was prepared before.
    public func statement(_ sql: String) throws(SQLiteError) -> Statement {
        try checkOpen(sql)
        if let cached = statements[sql] { return cached }
        let statement = try Statement(database: self, sql: sql)
        statements[sql] = statement
        return statement
    }

    /// Runs a statement that returns no rows.
    public func run(_ sql: String, _ bindings: [SQLiteValue] = []) throws(SQLiteError) {
        let statement = try statement(sql)
        defer { statement.reset() }
        try statement.bind(bindings)
        while try statement.step() {}
    }

    /// Runs a query and maps each row. Throws `SQLiteError`, or what `map` throws.
    public func query<T>(_ sql: String, _ bindings: [SQLiteValue] = [], _ map: (Row) throws -> T) throws -> [T] {
        let statement = try statement(sql)
        defer { statement.reset() }
        try statement.bind(bindings)
        var rows: [T] = []
        while try statement.step() { rows.append(try map(Row(statement: statement))) }
        return rows
    }

    /// Runs a query and maps its rows until `map` returns `nil`: the rows after it are not read.
    public func query<T>(_ sql: String, _ bindings: [SQLiteValue] = [], whileMapping map: (Row) throws -> T?) throws -> [T] {
        let statement = try statement(sql)
        defer { statement.reset() }
        try statement.bind(bindings)
        var rows: [T] = []
        while try statement.step() {
            guard let row = try map(Row(statement: statement)) else { break }
            rows.append(row)
        }
        return rows
    }

    /// The first row of a query, mapped, or `nil` when there is none.
    public func queryFirst<T>(_ sql: String, _ bindings: [SQLiteValue] = [], _ map: (Row) throws -> T) throws -> T? {
        let statement = try statement(sql)
        defer { statement.reset() }
        try statement.bind(bindings)
        return try statement.step() ? try map(Row(statement: statement)) : nil
    }

    /// Runs `body` in a write transaction: it commits when `body` returns and rolls back when it
    /// throws. Transactions do not nest.
    public func write<T>(_ body: (Database) throws -> T) throws -> T {
        precondition(!isInTransaction, "transactions do not nest")
        try run("BEGIN IMMEDIATE")
        isInTransaction = true
        defer { isInTransaction = false }
        do {
            let result = try body(self)
            try run("COMMIT")
            return result
        } catch {
            try? run("ROLLBACK")
            throw error
        }
    }

    /// The number of rows the last statement changed.
    public var changes: Int { Int(sqlite3_changes(handle)) }

    /// The rowid of the last row inserted.
    public var lastInsertedRowID: Int64 { sqlite3_last_insert_rowid(handle) }
}

/// A prepared statement, finalized when released. Belongs to its connection's owner.
public final class Statement {
    private let handle: OpaquePointer
    private unowned let database: Database
    /// The SQL, for errors.
    public let sql: String

    init(database: Database, sql: String) throws(SQLiteError) {
        var statement: OpaquePointer?
        let code = sqlite3_prepare_v3(database.handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard code == SQLITE_OK, let statement else {
            sqlite3_finalize(statement)
            throw SQLiteError(connection: database.handle, code: code, sql: sql)
        }
        handle = statement
        self.database = database
        self.sql = sql
    }

    deinit { sqlite3_finalize(handle) }

    /// Binds values to the parameters, in order.
    public func bind(_ values: [SQLiteValue]) throws(SQLiteError) {
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let code: Int32
            switch value {
            case .null: code = sqlite3_bind_null(handle, index)
            case .integer(let integer): code = sqlite3_bind_int64(handle, index, integer)
            case .real(let real): code = sqlite3_bind_double(handle, index, real)
            case .text(let text): code = bindText(text, at: index)
            case .blob(let bytes):
                code = bytes.withUnsafeBytes { buffer in
                    sqlite3_bind_blob(
                        handle, index, buffer.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(buffer.count),
                        abrova_sqlite_transient())
                }
            }
            guard code == SQLITE_OK else { throw SQLiteError(connection: database.handle, code: code, sql: sql) }
        }
    }

    /// Binds a text from the string's own UTF-8 (passed as a C string, it would be copied first).
    private func bindText(_ text: String, at index: Int32) -> Int32 {
        var text = text
        return text.withUTF8 { bytes in
            guard let start = bytes.baseAddress else { return sqlite3_bind_text(handle, index, "", 0, abrova_sqlite_transient()) }
            return start.withMemoryRebound(to: CChar.self, capacity: bytes.count) {
                sqlite3_bind_text(handle, index, $0, Int32(bytes.count), abrova_sqlite_transient())
            }
        }
    }

    /// Steps once: `true` when a row is ready, `false` when done.
    public func step() throws(SQLiteError) -> Bool {
        let code = sqlite3_step(handle)
        switch code {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default: throw SQLiteError(connection: database.handle, code: code, sql: sql)
        }
    }

    /// Resets the statement and clears its bindings, ready for the next use.
    public func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    fileprivate func columnType(_ index: Int32) -> Int32 { sqlite3_column_type(handle, index) }
    fileprivate func int64(_ index: Int32) -> Int64 { sqlite3_column_int64(handle, index) }
    fileprivate func double(_ index: Int32) -> Double { sqlite3_column_double(handle, index) }
    fileprivate func text(_ index: Int32) -> String? {
        guard let pointer = sqlite3_column_text(handle, index) else { return nil }
        let count = Int(sqlite3_column_bytes(handle, index))
        return String(decoding: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self)
    }
    fileprivate func bytes(_ index: Int32) -> [UInt8]? {
        guard sqlite3_column_type(handle, index) != SQLITE_NULL else { return nil }
        let count = Int(sqlite3_column_bytes(handle, index))
        guard count > 0, let pointer = sqlite3_column_blob(handle, index) else { return [] }
        return Array(UnsafeRawBufferPointer(start: pointer, count: count))
    }
}

/// The current row of a statement; read it only inside the closure it is given to (the statement
/// moves on afterwards).
public struct Row {
    fileprivate let statement: Statement

    fileprivate init(statement: Statement) { self.statement = statement }

    /// Whether the column is NULL.
    public func isNull(_ index: Int) -> Bool { statement.columnType(Int32(index)) == SQLITE_NULL }
    /// The column as an integer (0 for NULL).
    public func integer(_ index: Int) -> Int64 { statement.int64(Int32(index)) }
    /// The column as a double (0 for NULL).
    public func real(_ index: Int) -> Double { statement.double(Int32(index)) }
    /// The column as text, or `nil` for NULL.
    public func text(_ index: Int) -> String? { statement.text(Int32(index)) }
    /// The column as bytes, or `nil` for NULL.
    public func blob(_ index: Int) -> [UInt8]? { statement.bytes(Int32(index)) }
}

extension SQLiteValue {
    /// Text, or NULL for `nil`.
    public init(_ text: String?) {
        self = text.map(SQLiteValue.text) ?? .null
    }

    /// Bytes, or NULL for `nil`.
    public init(_ bytes: [UInt8]?) {
        self = bytes.map(SQLiteValue.blob) ?? .null
    }
}
