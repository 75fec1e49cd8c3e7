import AbrovaPostgres
import AbrovaTestSupport
import Testing

extension ServerSuites {
    /// `PostgresConnection.pipeline`: statements sent together run as they would one by one, and
    /// the first that fails stops the rest and names itself.
    @Suite(.enabled(if: PostgresTestDatabase.isAvailable, Comment(rawValue: PostgresTestDatabase.skipReason)))
    struct PostgresPipelineTests {
        static let insert = PostgresStatement(
            "pipeline_insert", "INSERT INTO notes (id, body) VALUES ($1, $2)", parameters: [.integer, .text])
        static let count = PostgresStatement("pipeline_count", "SELECT count(*)::bigint FROM notes")
        static let body = PostgresStatement("pipeline_body", "SELECT body FROM notes WHERE id = $1", parameters: [.integer])

        /// A connection to a fresh schema with an empty table `notes`.
        func connection(_ schema: PostgresTestDatabase) throws -> PostgresConnection {
            let connection = try PostgresConnection(url: schema.url)
            try connection.execute("CREATE TABLE notes (id bigint PRIMARY KEY, body text NOT NULL)")
            return connection
        }

        @Test func stepsRunInOrderAndEachGivesItsRows() throws {
            let schema = try PostgresTestDatabase()
            let connection = try connection(schema)
            let rows = try connection.pipeline([
                .sql("BEGIN"),
                .statement(Self.insert, [.integer(1), .text("milk")]),
                .statement(Self.insert, [.integer(2), .text("eggs")]),
                .statement(Self.count, []),
                .sql("COMMIT"),
                .statement(Self.body, [.integer(2)]),
            ])
            #expect(rows.count == 6)
            #expect(rows[3].integer(0, 0) == 2)
            #expect(rows[5].text(0, 0) == "eggs")
            // Prepared on the first trip, used again on the next, and by `run`.
            let again = try connection.pipeline([.statement(Self.body, [.integer(1)]), .statement(Self.count, [])])
            #expect(again[0].text(0, 0) == "milk" && again[1].integer(0, 0) == 2)
            #expect(try connection.run(Self.count).integer(0, 0) == 2)
        }

        @Test func theFirstStepThatFailsStopsTheRestAndNamesItself() throws {
            let schema = try PostgresTestDatabase()
            let connection = try connection(schema)
            try connection.run(Self.insert, [.integer(1), .text("milk")])
            let error = #expect(throws: PostgresError.self) {
                try connection.pipeline([
                    .sql("BEGIN"),
                    .statement(Self.insert, [.integer(2), .text("eggs")]),
                    .statement(Self.insert, [.integer(1), .text("again")]), // a duplicate key
                    .statement(Self.insert, [.integer(3), .text("bread")]),
                    .sql("COMMIT"),
                ])
            }
            #expect(error?.sqlState == "23505")
            #expect(error?.failedStep == 2)
            #expect(error?.isConnectionLost == false)
            // The transaction is left failed, to be rolled back; then the connection works, and
            // nothing of the failed transaction was kept.
            try connection.execute("ROLLBACK")
            #expect(!connection.isBroken)
            #expect(try connection.run(Self.count).integer(0, 0) == 1)
        }

        /// A server that ends the connection mid-pipeline: the error is its own, the connection
        /// counts as lost (so the pool drops it), and nothing waits for an answer that never comes.
        @Test func aConnectionEndedByTheServerMidPipelineIsLostWithTheServersReason() throws {
            let schema = try PostgresTestDatabase()
            let connection = try connection(schema)
            let other = try PostgresConnection(url: schema.url)
            let pid = try connection.pipeline([.sql("SELECT pg_backend_pid()::bigint")])[0].integer(0, 0)
            let error = #expect(throws: PostgresError.self) {
                try connection.pipeline([
                    .statement(Self.count, []),
                    .statement(
                        PostgresStatement("pipeline_end", "SELECT pg_terminate_backend($1::int)::int::bigint", parameters: [.integer]),
                        [.integer(pid)]),
                    .statement(Self.count, []),
                ])
            }
            _ = other
            #expect(error?.isConnectionLost == true)
            #expect(error?.sqlState == "57P01", "\(String(describing: error))")
            #expect(connection.isBroken)
        }

        @Test func anEmptyStatementIsAnAnswerWithNoRows() throws {
            let schema = try PostgresTestDatabase()
            let connection = try connection(schema)
            let rows = try connection.pipeline([.sql(""), .statement(Self.count, [])])
            #expect(rows[0].count == 0 && rows[1].integer(0, 0) == 0)
        }

        @Test func aStatementThatCannotBePreparedFailsItsStepEachTimeAndLeavesTheConnectionUsable() throws {
            let schema = try PostgresTestDatabase()
            let connection = try connection(schema)
            let broken = PostgresStatement("pipeline_broken", "SELECT FROM WHERE")
            for _ in 0..<2 {
                let error = #expect(throws: PostgresError.self) {
                    try connection.pipeline([.statement(Self.count, []), .statement(broken, []), .statement(Self.count, [])])
                }
                // A syntax error each time: never "does not exist", as it would be if its failed
                // preparation had been taken for a success.
                #expect(error?.sqlState == "42601")
                #expect(error?.failedStep == 1)
            }
            #expect(try connection.pipeline([.statement(Self.count, [])])[0].integer(0, 0) == 0)
        }
    }
}
