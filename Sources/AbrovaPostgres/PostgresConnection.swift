import CLibPQ

/// A value bound to a statement's parameter.
public enum PostgresValue: Hashable, Sendable {
    case null
    /// `bigint`.
    case integer(Int64)
    /// `double precision`.
    case real(Double)
    /// `text`.
    case text(String)
    /// `bytea`.
    case bytes([UInt8])
    /// `text[]`.
    case texts([String])
    /// A one-dimensional array of `bigint`, `double precision`, `text` or `bytea` values (NULL
    /// elements allowed), sent in binary: for `unnest` over a batch of rows in one statement.
    case array(PostgresStatement.ParameterType, [PostgresValue])
}

/// A statement prepared once per connection, by name, on its first use there.
public struct PostgresStatement: Hashable, Sendable {
    /// The type of a parameter, as the statement declares it.
    public enum ParameterType: UInt32, Sendable {
        case integer = 20
        case text = 25
        case bytes = 17
        case real = 701
        case texts = 1009
        case integers = 1016
        case reals = 1022
        case byteses = 1001
    }

    let name: String
    let sql: String
    let parameterTypes: [ParameterType]

    /// A statement with `$1`, `$2`… parameters of these types.
    public init(_ name: String, _ sql: String, parameters: [ParameterType] = []) {
        self.name = name
        self.sql = sql
        parameterTypes = parameters
    }
}

/// One statement of a pipeline (`PostgresConnection.pipeline(_:)`).
public enum PostgresStep: Sendable {
    /// A prepared statement with its values.
    case statement(PostgresStatement, [PostgresValue])
    /// One SQL statement without parameters: `BEGIN`, `COMMIT`.
    case sql(String)
}

/// One connection to a PostgreSQL server.
///
/// Not `Sendable`: a connection belongs to one thread at a time (`PostgresPool` lends it out). Its
/// statements are prepared on it on first use and kept until it closes.
///
///     let connection = try PostgresConnection(url: "postgresql://app@127.0.0.1/app")
///     try connection.transaction { connection in
///         try connection.run(insertNote, [.text(id), .text(body)])
///     }
public final class PostgresConnection {
    let handle: OpaquePointer
    private var prepared: Set<String> = []
    private var isInTransaction = false
    /// A pipeline left libpq in a state this connection cannot leave: it is not to be used again.
    private var isAbandoned = false

    /// Connects to the server that `url` names (a `postgresql://` URL or a `key=value` string).
    ///
    /// - Throws: `PostgresError` (`isConnectionLost`) when the server cannot be reached or refuses.
    public init(url: String) throws(PostgresError) {
        guard let connection = PQconnectdb(url) else {
            throw PostgresError(sqlState: "", message: "libpq could not allocate a connection", isConnectionLost: true)
        }
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = String(cString: PQerrorMessage(connection))
            PQfinish(connection) // closed even when connecting failed
            throw PostgresError(sqlState: "", message: message, isConnectionLost: true)
        }
        handle = connection
        // Notices ("relation already exists, skipping") are not errors and need not reach stderr.
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
    }

    deinit { PQfinish(handle) }

    /// Whether the connection still works, as far as libpq knows.
    public var isBroken: Bool { isAbandoned || PQstatus(handle) != CONNECTION_OK }

    /// Runs SQL without parameters (schema, session settings); several statements may be given.
    ///
    /// - Throws: `PostgresError`.
    public func execute(_ sql: String) throws(PostgresError) {
        let result = PQexec(handle, sql)
        defer { PQclear(result) }
        try check(result)
    }

    /// Runs a prepared statement and returns its rows (none for a statement that returns none).
    ///
    /// - Throws: `PostgresError`.
    @discardableResult
    public func run(_ statement: PostgresStatement, _ values: [PostgresValue] = []) throws(PostgresError) -> PostgresRows {
        precondition(values.count == statement.parameterTypes.count, "\(statement.name) takes \(statement.parameterTypes.count) values")
        if !prepared.contains(statement.name) {
            let types = statement.parameterTypes.map(\.rawValue)
            let result = PQprepare(handle, statement.name, statement.sql, Int32(types.count), types)
            defer { PQclear(result) }
            try check(result)
            prepared.insert(statement.name)
        }
        let parameters = BoundParameters(values)
        let result = parameters.withPointers { pointers, lengths, formats in
            // Results come in binary: integers and bytes need no parsing.
            PQexecPrepared(handle, statement.name, Int32(values.count), pointers, lengths, formats, 1)
        }
        do {
            try check(result)
        } catch {
            PQclear(result)
            throw error
        }
        return PostgresRows(result!)
    }

    /// Runs `body` in a transaction: it commits when `body` returns and rolls back when it throws.
    ///
    /// - Throws: what `body` throws, or `PostgresError` when beginning or committing fails (when
    ///   the connection is lost during the commit, whether it committed is unknown).
    public func transaction<Result>(_ body: (PostgresConnection) throws -> Result) throws -> Result {
        precondition(!isInTransaction, "transactions do not nest")
        try execute("BEGIN")
        isInTransaction = true
        defer { isInTransaction = false }
        let result: Result
        do {
            result = try body(self)
        } catch {
            if !isBroken { try? execute("ROLLBACK") }
            throw error
        }
        try execute("COMMIT")
        return result
    }

    /// Runs `steps` in order, sent together and answered together: one round trip to the server
    /// (libpq's pipeline mode), where running them one by one takes one each. Statements not yet
    /// prepared on this connection are prepared in the same trip. Returns each step's rows.
    ///
    /// The steps run as they would one by one: `BEGIN` and `COMMIT` among them make transactions;
    /// the steps outside one run each in its own.
    /// The first step that fails ends the pipeline: the server skips the steps after it, and an
    /// open transaction is left failed (to be rolled back).
    ///
    ///     let rows = try connection.pipeline([.sql("BEGIN"), .statement(lockClient, [.text(id)]), .statement(documents, keys)])
    ///
    /// - Throws: `PostgresError` of the step that failed, with its index in `failedStep`.
    @discardableResult
    public func pipeline(_ steps: [PostgresStep]) throws(PostgresError) -> [PostgresRows] {
        guard PQenterPipelineMode(handle) == 1 else { throw failure("libpq could not enter pipeline mode") }
        // What was sent, in order: each step, after the preparation of its statement when needed
        // (the name it prepares).
        var sent: [(step: Int, preparing: String?)] = []
        var preparing: Set<String> = []
        for (index, step) in steps.enumerated() {
            let isQueued: Bool
            switch step {
            case .sql(let sql):
                isQueued = PQsendQueryParams(handle, sql, 0, nil, nil, nil, nil, 1) == 1
            case .statement(let statement, let values):
                precondition(
                    values.count == statement.parameterTypes.count, "\(statement.name) takes \(statement.parameterTypes.count) values")
                if !prepared.contains(statement.name) && !preparing.contains(statement.name) {
                    let types = statement.parameterTypes.map(\.rawValue)
                    guard PQsendPrepare(handle, statement.name, statement.sql, Int32(types.count), types) == 1 else {
                        throw abandoning("libpq could not send a statement")
                    }
                    preparing.insert(statement.name)
                    sent.append((index, statement.name))
                }
                isQueued = BoundParameters(values).withPointers { pointers, lengths, formats in
                    PQsendQueryPrepared(handle, statement.name, Int32(values.count), pointers, lengths, formats, 1) == 1
                }
            }
            guard isQueued else { throw abandoning("libpq could not send a statement") }
            sent.append((index, nil))
        }
        guard PQpipelineSync(handle) == 1 else { throw abandoning("libpq could not send the pipeline") }

        var rows: [PostgresRows] = []
        var failed: PostgresError?
        for (step, name) in sent {
            // Each statement's result, then a null that ends it.
            guard let result = PQgetResult(handle) else { throw abandoning("the pipeline's answer ended early") }
            while let extra = PQgetResult(handle) { PQclear(extra) }
            switch PQresultStatus(result) {
            case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
                if let name {
                    prepared.insert(name)
                    PQclear(result)
                } else {
                    rows.append(PostgresRows(result))
                }
            case PGRES_PIPELINE_ABORTED:
                PQclear(result)
            case PGRES_FATAL_ERROR, PGRES_NONFATAL_ERROR, PGRES_BAD_RESPONSE:
                if failed == nil {
                    var error = self.error(of: result, message: PQresultErrorMessage(result))
                    error.failedStep = step
                    failed = error
                }
                PQclear(result)
                if isBroken { throw abandoning(failed) }
            default:
                // COPY and the like, which a pipeline of these steps cannot read through.
                PQclear(result)
                throw abandoning("a step answered in a way a pipeline cannot read")
            }
        }
        guard let sync = PQgetResult(handle), PQresultStatus(sync) == PGRES_PIPELINE_SYNC else {
            if let failed { throw abandoning(failed) }
            throw abandoning("the pipeline's answer did not end as it should")
        }
        PQclear(sync)
        guard PQexitPipelineMode(handle) == 1 else { throw abandoning("libpq could not leave pipeline mode") }
        if let failed { throw failed }
        return rows
    }

    /// Marks the connection as not to be used again (the pool closes it): what it was doing was
    /// cut short, so libpq's state is unknown. The error is a lost connection's: the work may
    /// or may not have been done.
    private func abandoning(_ message: String) -> PostgresError {
        isAbandoned = true
        let detail = String(cString: PQerrorMessage(handle))
        return PostgresError(sqlState: "", message: detail.isEmpty ? message : "\(message): \(detail)", isConnectionLost: true)
    }

    /// `abandoning` for a step's error, which is kept as the server gave it, the connection lost.
    private func abandoning(_ error: PostgresError?) -> PostgresError {
        guard let error else { return abandoning("the connection was lost") }
        isAbandoned = true
        var lost = PostgresError(sqlState: error.sqlState, message: error.message, isConnectionLost: true)
        lost.failedStep = error.failedStep
        return lost
    }

    private func failure(_ message: String) -> PostgresError {
        PostgresError(sqlState: "", message: message + ": " + String(cString: PQerrorMessage(handle)), isConnectionLost: isBroken)
    }

    private func check(_ result: OpaquePointer?) throws(PostgresError) {
        let status = result.map(PQresultStatus) ?? PGRES_FATAL_ERROR
        guard status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK else { return }
        throw error(of: result, message: PQerrorMessage(handle))
    }

    /// The error a failed result reports, with `message`.
    private func error(of result: OpaquePointer?, message: UnsafePointer<CChar>?) -> PostgresError {
        let sqlState = result.flatMap { PQresultErrorField($0, Int32(UInt8(ascii: "C"))) }.map { String(cString: $0) } ?? ""
        // Class 08 is a connection exception; 57P01-03 are a server shutting down or not yet up.
        let isLost = isBroken || sqlState.hasPrefix("08") || ["57P01", "57P02", "57P03"].contains(sqlState)
        return PostgresError(sqlState: sqlState, message: message.map { String(cString: $0) } ?? "", isConnectionLost: isLost)
    }
}

/// Parameters laid out for libpq: one buffer, with offsets, lengths and formats per parameter.
private struct BoundParameters {
    private var buffer: [UInt8] = []
    private var offsets: [Int?] = []
    private var lengths: [Int32] = []
    private var formats: [Int32] = []

    init(_ values: [PostgresValue]) {
        for value in values {
            let start = buffer.count
            var format: Int32 = 1
            switch value {
            case .null:
                offsets.append(nil)
                lengths.append(0)
                formats.append(1)
                continue
            case .integer(let number):
                withUnsafeBytes(of: number.bigEndian) { buffer.append(contentsOf: $0) }
            case .real(let number):
                withUnsafeBytes(of: number.bitPattern.bigEndian) { buffer.append(contentsOf: $0) }
            case .text(let text):
                buffer.append(contentsOf: text.utf8)
            case .bytes(let bytes):
                buffer.append(contentsOf: bytes)
            case .array(let elementType, let elements):
                Self.appendArray(of: elementType, elements, to: &buffer)
            case .texts(let texts):
                // Text format: an array literal with every element quoted.
                format = 0
                let quoted = texts.map { text in
                    "\"" + text.replacingAll("\\", with: "\\\\").replacingAll("\"", with: "\\\"") + "\""
                }
                buffer.append(contentsOf: ("{" + quoted.joined(separator: ",") + "}").utf8)
                buffer.append(0)
            }
            offsets.append(start)
            lengths.append(Int32(buffer.count - start))
            formats.append(format)
        }
    }

    /// PostgreSQL's binary array form: dimensions, flags, element type, length and lower bound,
    /// then each element as a length (-1 for NULL) and its binary form.
    private static func appendArray(
        of elementType: PostgresStatement.ParameterType, _ elements: [PostgresValue],
        to buffer: inout [UInt8]
    ) {
        func append(_ number: Int32) { withUnsafeBytes(of: number.bigEndian) { buffer.append(contentsOf: $0) } }
        let hasNull = elements.contains(.null)
        append(1)
        append(hasNull ? 1 : 0)
        append(Int32(bitPattern: elementType.rawValue))
        append(Int32(elements.count))
        append(1)
        for element in elements {
            switch element {
            case .null:
                append(-1)
            case .integer(let number):
                append(8)
                withUnsafeBytes(of: number.bigEndian) { buffer.append(contentsOf: $0) }
            case .real(let number):
                append(8)
                withUnsafeBytes(of: number.bitPattern.bigEndian) { buffer.append(contentsOf: $0) }
            case .text(let text):
                append(Int32(text.utf8.count))
                buffer.append(contentsOf: text.utf8)
            case .bytes(let bytes):
                append(Int32(bytes.count))
                buffer.append(contentsOf: bytes)
            case .texts, .array:
                preconditionFailure("arrays hold scalar values")
            }
        }
    }

    func withPointers<Result>(_ body: (UnsafePointer<UnsafePointer<CChar>?>?, UnsafePointer<Int32>?, UnsafePointer<Int32>?) -> Result)
        -> Result
    {
        buffer.withUnsafeBufferPointer { bytes in
            let base = UnsafeRawPointer(bytes.baseAddress)
            let pointers: [UnsafePointer<CChar>?] = offsets.map { offset in
                guard let offset else { return nil }
                // An empty value still needs a pointer that is not null.
                return (base ?? UnsafeRawPointer(bitPattern: 1)!).advanced(by: offset).assumingMemoryBound(to: CChar.self)
            }
            return pointers.withUnsafeBufferPointer { pointers in
                lengths.withUnsafeBufferPointer { lengths in
                    formats.withUnsafeBufferPointer { formats in
                        body(pointers.baseAddress, lengths.baseAddress, formats.baseAddress)
                    }
                }
            }
        }
    }
}

extension String {
    fileprivate func replacingAll(_ target: Character, with replacement: String) -> String {
        var output = ""
        for character in self { if character == target { output += replacement } else { output.append(character) } }
        return output
    }
}

/// The rows a statement returned, read in binary.
public final class PostgresRows {
    private let result: OpaquePointer

    init(_ result: OpaquePointer) { self.result = result }
    deinit { PQclear(result) }

    /// How many rows there are.
    public var count: Int { Int(PQntuples(result)) }

    /// Whether the value at `row`, `column` is NULL.
    public func isNull(_ row: Int, _ column: Int) -> Bool { PQgetisnull(result, Int32(row), Int32(column)) != 0 }

    /// A `bigint` value (0 for NULL).
    public func integer(_ row: Int, _ column: Int) -> Int64 {
        let bytes = self.bytes(row, column)
        guard bytes.count == 8 else { return 0 }
        return bytes.reduce(Int64(0)) { $0 << 8 | Int64($1) }
    }

    /// A `text` value (empty for NULL).
    public func text(_ row: Int, _ column: Int) -> String { String(decoding: bytes(row, column), as: UTF8.self) }

    /// A `bytea` value, or the raw binary form of any other (empty for NULL).
    public func bytes(_ row: Int, _ column: Int) -> [UInt8] {
        let length = Int(PQgetlength(result, Int32(row), Int32(column)))
        guard length > 0, let value = PQgetvalue(result, Int32(row), Int32(column)) else { return [] }
        return value.withMemoryRebound(to: UInt8.self, capacity: length) { Array(UnsafeBufferPointer(start: $0, count: length)) }
    }
}
