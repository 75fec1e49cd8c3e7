import AbrovaSQLite
import AbrovaTestSupport
import Testing

/// Values go into SQLite and come back as they were bound.
@Suite struct DatabaseBindingTests {
    let folder = TemporaryFolder()

    @Test func textsComeBackWholeWhateverTheyHold() throws {
        let database = try Database(path: folder.path("binding.sqlite"))
        try database.execute("CREATE TABLE texts (id INTEGER PRIMARY KEY, body TEXT)")
        // Empty; short enough to live inside the String; long; not ASCII; holding a NUL byte.
        let texts = ["", "ab", String(repeating: "long text ", count: 50), "Ünïcödé 🛒 cart", "before\u{0}after"]
        for (index, text) in texts.enumerated() {
            try database.run("INSERT INTO texts (id, body) VALUES (?, ?)", [.integer(Int64(index)), .text(text)])
        }
        let stored = try database.query("SELECT body, length(CAST(body AS BLOB)) FROM texts ORDER BY id") {
            ($0.text(0) ?? "<null>", Int($0.integer(1)))
        }
        #expect(stored.map(\.0) == texts)
        #expect(stored.map(\.1) == texts.map(\.utf8.count))
        // An empty text is a text, not NULL.
        #expect(try database.queryFirst("SELECT typeof(body) FROM texts WHERE id = 0") { $0.text(0) } == "text")
    }
}
