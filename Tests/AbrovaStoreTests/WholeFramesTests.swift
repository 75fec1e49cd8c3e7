import AbrovaSQLite
import AbrovaTestSupport
import Foundation
import Testing

/// `Database(writesFramesWhole:)`: WAL frames held back and written together must never leave a
/// commit out of the file once it returned, nor change what the file holds.
@Suite struct WholeFramesTests {
    let folder = TemporaryFolder()

    /// Thrown from a transaction to roll it back.
    struct RolledBack: Error {}

    /// Seeded transactions of every size (one row; a few; more than the 120 KiB held at once; one
    /// that spills its pages into the WAL before it commits; one rolled back after spilling),
    /// with a copy of the files taken after each: what a crash at that moment would leave. Each
    /// copy must hold exactly the committed transactions and pass SQLite's integrity check.
    /// In both locking modes: exclusive (the device store's, the WAL index in memory) and normal
    /// (the WAL index shared, as several connections use it).
    @Test(arguments: [true, false]) func aCopyAfterEachCommitHoldsExactlyTheCommittedTransactions(isExclusive: Bool) throws {
        let seed =
            ProcessInfo.processInfo.environment["ABROVA_PROPERTY_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 0...UInt64.max)
        print("whole frames (exclusive: \(isExclusive)): seed \(seed) (replay with ABROVA_PROPERTY_SEED=\(seed))")
        var generator = SplitMix64(seed: seed)
        let file = folder.path("frames-\(isExclusive).sqlite")
        let database = try Database(path: file, isExclusive: isExclusive, writesFramesWhole: true)
        try database.execute("CREATE TABLE rows (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
        // A small page cache: a large transaction writes pages to the WAL before its commit frame.
        try database.execute("PRAGMA cache_size=8")
        var model: [Int64: [UInt8]] = [:]

        for step in 0..<60 {
            let kind = generator.next() % 5
            var written: [Int64: [UInt8]] = [:]
            do {
                try database.write { database in
                    let rows: Int
                    let size: Int
                    switch kind {
                    case 0: (rows, size) = (1, 100)
                    case 1: (rows, size) = (4, 3_000)
                    case 2: (rows, size) = (6, 200_000) // 1.2 MB: many times what is held at once
                    default: (rows, size) = (3, 60_000) // 180 kB through an 8-page cache: spills
                    }
                    for _ in 0..<rows {
                        let id = Int64(generator.next() % 12)
                        let body = Self.body(id: id, step: step, size: size - Int(generator.next() % 50))
                        try database.run("INSERT OR REPLACE INTO rows (id, body) VALUES (?, ?)", [.integer(id), .blob(body)])
                        written[id] = body
                    }
                    // Read back what was written: a spilled page is read from the WAL mid-transaction.
                    let count = try database.queryFirst("SELECT count(*) FROM rows") { $0.integer(0) } ?? 0
                    #expect(count >= Int64(written.count))
                    if kind == 4 { throw RolledBack() }
                }
                model.merge(written) { _, new in new }
            } catch is RolledBack {}
            // Now and then the WAL is folded into the file and starts again from its beginning.
            if generator.next() % 8 == 0 { try database.execute("PRAGMA wal_checkpoint(TRUNCATE)") }

            let image = folder.url.appendingPathComponent("image-\(isExclusive)-\(step)")
            try FileManager.default.createDirectory(at: image, withIntermediateDirectories: true)
            for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: file + suffix) {
                try FileManager.default.copyItem(atPath: file + suffix, toPath: image.appendingPathComponent("copy.sqlite" + suffix).path)
            }
            let copy = try Database(path: image.appendingPathComponent("copy.sqlite").path)
            #expect(try copy.queryFirst("PRAGMA integrity_check") { $0.text(0) } == "ok", "step \(step), seed \(seed)")
            let rows = try copy.query("SELECT id, body FROM rows") { ($0.integer(0), $0.blob(1) ?? []) }
            let found = Dictionary(rows, uniquingKeysWith: { first, _ in first })
            let holdsTheCommittedRows = found == model
            #expect(
                holdsTheCommittedRows,
                "step \(step) (kind \(kind)): the copy holds \(Self.summary(found)), not \(Self.summary(model)); seed \(seed)")
            copy.close()
            try FileManager.default.removeItem(at: image)
        }
        database.close()
        let reopened = try Database(path: file)
        let rows = try reopened.query("SELECT id, body FROM rows") { ($0.integer(0), $0.blob(1) ?? []) }
        let found = Dictionary(rows, uniquingKeysWith: { first, _ in first })
        let holdsTheCommittedRows = found == model
        #expect(holdsTheCommittedRows, "reopened: \(Self.summary(found)), not \(Self.summary(model)); seed \(seed)")
    }

    /// Rows as ids, sizes and first bytes, short enough to read in a failure.
    static func summary(_ rows: [Int64: [UInt8]]) -> String {
        rows.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value.count) bytes from \($0.value.first ?? 0)" }.joined(separator: ", ")
    }

    /// A transaction whose pages spill into the WAL and that rolls back leaves nothing behind that
    /// could later be written over another connection's commit at the same place in the WAL.
    @Test func aRolledBackSpillLeavesNothingToWriteOverAnotherConnectionsCommit() throws {
        let file = folder.path("shared.sqlite")
        let first = try Database(path: file, writesFramesWhole: true)
        try first.execute("CREATE TABLE rows (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
        try first.run("INSERT INTO rows (id, body) VALUES (1, zeroblob(100))")
        try first.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        let second = try Database(path: file)
        try first.execute("PRAGMA cache_size=5")
        #expect(throws: RolledBack.self) {
            try first.write { database in
                for id in 100..<120 { try database.run("INSERT INTO rows (id, body) VALUES (?, randomblob(3000))", [.integer(Int64(id))]) }
                throw RolledBack()
            }
        }
        try second.write { database in
            for id in 1_000..<1_010 { try database.run("INSERT INTO rows (id, body) VALUES (?, randomblob(3000))", [.integer(Int64(id))]) }
        }
        let ids = { (database: Database) in try database.query("SELECT id FROM rows ORDER BY id") { $0.integer(0) } }
        #expect(try ids(first) == [1] + Array(1_000..<1_010))
        #expect(try ids(second) == [1] + Array(1_000..<1_010))
        #expect(try second.queryFirst("PRAGMA integrity_check") { $0.text(0) } == "ok")
        first.close()
        second.close()
        let reopened = try Database(path: file)
        #expect(try reopened.queryFirst("PRAGMA integrity_check") { $0.text(0) } == "ok")
        #expect(try ids(reopened) == [1] + Array(1_000..<1_010))
    }

    /// The same bytes whatever the step, so that a row from another transaction shows.
    static func body(id: Int64, step: Int, size: Int) -> [UInt8] {
        (0..<size).map { UInt8(truncatingIfNeeded: Int(id) &* 31 &+ step &* 7 &+ $0 / 97) }
    }
}
