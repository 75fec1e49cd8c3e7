import AbrovaCore

/// A watch as the hub checks it: whose it is, where its caller has pulled to, and what it follows.
struct WatchPosition: Sendable {
    /// The caller the read rules are checked for.
    var caller: Caller
    /// Versions up to this one are known to hold nothing the caller may read.
    var after: Version
    /// Only these collections wake it; `nil`: all of them.
    var collections: Set<String>?
}

/// What one scan of the changes tells each watch, decided without I/O: a watch wakes when a
/// change after its position is one its caller may read; the others move past what was scanned,
/// so the next scan starts there (a scan reads as a pull does: nothing can appear below a version
/// it returned).
struct WatchDecisions {
    /// For each watch, in the order given: whether it wakes, and the position it keeps if not.
    let outcomes: [(wakes: Bool, after: Version)]

    /// `rows` are every change after the smallest position, in version order, up to `scannedTo`.
    init(_ watches: [WatchPosition], rows: [StoredDocument], scannedTo: Version, rules: RuleBook) {
        outcomes = watches.map { watch in
            let wakes = rows.contains { row in
                row.version > watch.after && (watch.collections?.contains(row.key.collection) ?? true)
                    && rules.rules(for: row.key.collection).allowsRead(row, by: watch.caller)
            }
            return (wakes, max(watch.after, scannedTo))
        }
    }
}
