import AbrovaCore
import AbrovaWire
import Foundation

/// How a sync service is set up.
public struct ServiceConfiguration: Sendable {
    /// Limits on batches and pages.
    public var limits: WireLimits
    /// How long a deleted document's tombstone is kept. A client whose cursor is older than a
    /// removed tombstone is told to resync (`resyncRequired`) rather than miss the delete.
    public var tombstoneRetention: TimeInterval
    /// The server's clock (injected so that tests can move time).
    public var clock: @Sendable () -> Date
    /// Where the service reports the store's failures (answered `failed` or `unavailable`).
    public var log: @Sendable (String) -> Void
    /// Called after a push commits, before its answer is sent. For tests: a hook that throws makes
    /// the answer `failed`, as if the connection broke after the commit.
    @_spi(Testing) public var afterPushCommit: (@Sendable (PushRequest) throws -> Void)?
    /// How long a watch waits for a change before it is answered "nothing new" (`GET /v1/watch`).
    public var watchIdleTime: Duration = .seconds(25)
    /// The most watches waiting at once; past it a watch is refused `overloaded`.
    public var maximumWatches = 10_000

    /// A configuration; tombstones are kept 30 days by default.
    public init(
        limits: WireLimits = WireLimits(), tombstoneRetention: TimeInterval = 30 * 24 * 3600,
        clock: @escaping @Sendable () -> Date = { Date() }, log: @escaping @Sendable (String) -> Void = { _ in }
    ) {
        self.limits = limits
        self.tombstoneRetention = tombstoneRetention
        self.clock = clock
        self.log = log
    }
}

/// The sync server's logic, independent of HTTP: pushes, pulls and online reads, each on behalf
/// of an authenticated caller and checked against the security rules.
///
/// Safe to call from any thread; each call blocks until its store answers.
public final class SyncService: Sendable {
    /// Where documents live.
    public let store: any ServerStore
    /// The rules of every collection.
    public let rules: RuleBook
    /// The set-up.
    public let configuration: ServiceConfiguration
    /// What the service counts for its operator (`GET /metrics`).
    public let metrics = ServerMetrics()
    private let cursors: CursorCodec
    private let watches: WatchHub

    /// A service over `store`.
    ///
    /// - Throws: `Refusal` `.failed` when the store cannot be read.
    public init(store: any ServerStore, rules: RuleBook = RuleBook(), configuration: ServiceConfiguration = ServiceConfiguration())
        throws(Refusal)
    {
        self.store = store
        self.rules = rules
        self.configuration = configuration
        let log = configuration.log
        cursors = CursorCodec(key: try Self.storeCall(log: log) { try store.cursorKey() }, readRevision: rules.readRevision)
        watches = WatchHub(
            store: store, rules: rules, idleTime: configuration.watchIdleTime, maximumWatches: configuration.maximumWatches,
            pageBytes: configuration.limits.maximumPageBytes, log: log)
    }

    // MARK: - Push

    /// Reads a pushed body (`PushRequest(body:)`) and applies it. A retry must repeat the body's
    /// bytes (once decompressed): they are what the dedupe record's digest covers.
    ///
    /// - Throws: `Refusal`: `.invalid` or `.tooLarge` for a body that is not a valid push; the rest as
    ///   `push(_:caller:)`.
    public func push(body: [UInt8], caller: Caller, pullCursor: String? = nil) throws(Refusal) -> [UInt8] {
        let request = try PushRequest(body: body, limits: configuration.limits)
        return try push(request, digest: SHA256.hash(body), caller: caller, pullCursor: pullCursor)
    }

    /// Applies a batch in one transaction together with its dedupe record and its answer, and
    /// returns the answer's body (a `PushResponse`). A retried batch gets the stored answer, byte
    /// for byte. The batch's body is taken to be its canonical JSON (`PushRequest.body`).
    ///
    /// `pullCursor` is the device's pull cursor (`""`: it never pulled). When no document changed
    /// between it and the batch, the answer carries the cursor after the batch, so that the device
    /// need not pull its own changes back; a stored answer carries none. A cursor a pull would
    /// refuse only goes without: it never refuses the push.
    ///
    /// - Throws: `Refusal`: `.unauthenticated` without a user; `.staleBatch` for a batch number
    ///   below the client's last; `.reusedBatch` for the last number with a different body;
    ///   `.failed` or `.unavailable` when the store fails (nothing is applied then).
    public func push(_ request: PushRequest, caller: Caller, pullCursor: String? = nil) throws(Refusal) -> [UInt8] {
        try push(request, digest: SHA256.hash(request.body), caller: caller, pullCursor: pullCursor)
    }

    private func push(_ request: PushRequest, digest: [UInt8], caller: Caller, pullCursor: String?) throws(Refusal) -> [UInt8] {
        guard let user = caller.userID else {
            throw Refusal(.unauthenticated, "pushing needs a signed-in user (Authorization: Bearer token)")
        }
        let pulledUpTo = pullCursor.flatMap { cursor in try? cursors.version(of: cursor, caller: caller) }
        let batch = request.batch
        let now = configuration.clock()
        var applied = false
        defer { if applied { watches.changesCommitted() } }
        // The results of the try that committed (`nil`: the stored answer of a retry).
        var committedResults: [ChangeResult]?
        let answer = try Self.storeCall(log: configuration.log) {
            try store.write { transaction in
                if let record = try transaction.client(
                    batch.clientID, of: user, preparing: batch.changes.map(\.key), forBatch: batch.sequence)
                {
                    if batch.sequence == record.sequence {
                        guard HMACSHA256.isEqual(record.digest, digest) else {
                            throw Refusal(
                                .reusedBatch,
                                "batch \(batch.sequence) of this client was applied with another body; a new batch needs a new number")
                        }
                        committedResults = nil
                        return record.answer
                    }
                    guard batch.sequence > record.sequence else {
                        throw Refusal(
                            .staleBatch, "batch \(batch.sequence) is older than batch \(record.sequence), the last this client sent")
                    }
                }
                var results: [ChangeResult] = []
                results.reserveCapacity(batch.changes.count)
                // The versions this batch's changes were applied at, by document: a document may be
                // in a batch more than once, and a later change must not take the earlier ones
                // for changes it had not seen.
                var ownWrites: [DocumentKey: OwnWrites] = [:]
                var taken: ClosedRange<Version>?
                // A change to a document the caller could not read is answered with less than a
                // pull would bring once it can: its pull is not to be skipped.
                var isAnswerWhole = true
                // One change at a time, or one atomic group: its changes are joined in order, each
                // on what the one before left, and saved only when every one of them applies.
                for unit in batch.units {
                    let isGroup = batch.changes[unit.lowerBound].group != nil
                    var staged: [DocumentKey: StoredDocument] = [:]
                    // A group's own writes count only if it stands; a lone change's at once.
                    var unitOwnWrites = isGroup ? ownWrites : [:]
                    var unitResults: [ChangeResult] = []
                    for change in batch.changes[unit] {
                        let own = (isGroup ? unitOwnWrites[change.key] : ownWrites[change.key]) ?? OwnWrites()
                        let (result, version, isHidden, write) = try apply(
                            change, strategy: change.strategy ?? request.strategy, caller: caller, user: user,
                            ownWrites: own, at: now, in: transaction,
                            reading: { key in try staged[key] ?? transaction.document(key) })
                        if let version { taken = taken.map { $0.lowerBound...version } ?? version...version }
                        isAnswerWhole = isAnswerWhole && !isHidden
                        unitResults.append(result)
                        if isGroup {
                            if let write { staged[change.key] = write }
                            unitOwnWrites[change.key, default: OwnWrites()].note(result, of: change.delta)
                        } else {
                            if let write {
                                try transaction.saveDocument(write, at: now)
                                applied = true
                            }
                            ownWrites[change.key, default: OwnWrites()].note(result, of: change.delta)
                        }
                    }
                    if isGroup {
                        if let refused = GroupVerdict.refusal(of: batch.changes[unit], results: unitResults) {
                            results += refused
                            continue
                        }
                        for change in batch.changes[unit] {
                            guard let write = staged.removeValue(forKey: change.key) else { continue }
                            try transaction.saveDocument(write, at: now)
                            applied = true
                        }
                        ownWrites = unitOwnWrites
                    }
                    results += unitResults
                }
                committedResults = results
                let answer = PushResponse(results: results).body
                try transaction.saveClient(
                    ClientRecord(
                        clientID: batch.clientID, userID: user, sequence: batch.sequence,
                        digest: digest, answer: answer))
                guard let pulledUpTo, let taken, isAnswerWhole,
                    try transaction.isUnchanged(after: pulledUpTo, through: taken.upperBound)
                else { return answer }
                return PushResponse.adding(cursor: cursors.cursor(for: taken.upperBound, caller: caller), to: answer)
            }
        }
        if let committedResults { count(committedResults, of: request) }
        if let hook = configuration.afterPushCommit {
            do {
                try hook(request)
            } catch {
                throw Refusal(.failed, "the answer was lost after the commit (test hook): \(error)")
            }
        }
        return answer
    }

    /// Counts a committed batch's results in `metrics`.
    private func count(_ results: [ChangeResult], of request: PushRequest) {
        for (change, result) in zip(request.batch.changes, results) {
            let strategy = (change.strategy ?? request.strategy).rawValue
            switch result {
            case .applied(_, _, let conflicts), .unresolved(_, let conflicts):
                let isApplied = if case .applied = result { true } else { false }
                metrics.add("abrova_push_changes_total", [("strategy", strategy), ("result", isApplied ? "applied" : "unresolved")])
                for conflict in conflicts {
                    metrics.add("abrova_conflicts_total", [("strategy", strategy), ("outcome", conflict.outcome.rawValue)])
                }
            case .rejected(let reason, _):
                metrics.add("abrova_push_changes_total", [("strategy", strategy), ("result", "rejected")])
                metrics.add("abrova_rejections_total", [("reason", reason.rawValue)])
            }
        }
    }

    /// Checks that the store answers (`GET /v1/health?ready`).
    ///
    /// - Throws: `Refusal` `.unavailable` or `.failed` when it does not.
    public func checkReady() throws(Refusal) {
        _ = try Self.storeCall(log: configuration.log) { try store.latestVersion() }
    }

    /// The gauges `GET /metrics` shows beside the counters: watches waiting, and the database's
    /// connections when the store keeps a pool.
    public var gauges: [ServerMetrics.Gauge] {
        var gauges = [ServerMetrics.Gauge("abrova_watches_active", [], Double(watchCount))]
        if let pool = store.connectionStatistics {
            gauges += [
                ServerMetrics.Gauge("abrova_database_connections", [("state", "open")], Double(pool.open)),
                ServerMetrics.Gauge("abrova_database_connections", [("state", "idle")], Double(pool.idle)),
                ServerMetrics.Gauge("abrova_database_connections", [("state", "maximum")], Double(pool.maximum)),
            ]
        }
        return gauges
    }

    /// Joins one change into its document: settled by the strategy, checked by the rules, saved at
    /// a new version. A change that cannot be applied is refused on its own; the others go on.
    /// `ownWrites` are what earlier changes of the same batch did to the document: the change is
    /// rebased past them (`DocumentDelta.rebased`, as the client rebases its unsent
    /// changes when a batch is settled), so only others' writes since its base conflict with it.
    ///
    /// Rules come first (Spec/security.md): a refusal the key alone decides comes before the
    /// document is read; the join is made without the size limit, the write rule is checked on its
    /// result, and only then the size and the collection's validation. A caller who may not read
    /// the document as the server has it learns nothing of it: a change the rules refuse, or that
    /// cannot be applied to it, is answered as the same change to a missing document would be, and
    /// an applied change without state or conflicts (whose server values are the document's).
    ///
    /// Returns the answer, the version the change took (none when refused on its key alone), and
    /// whether the caller could not read the document as it was.
    private func apply(
        _ change: BatchChange, strategy: ConflictStrategy, caller: Caller, user: String, ownWrites: OwnWrites,
        at now: Date, in transaction: any ServerTransaction, reading document: (DocumentKey) throws -> StoredDocument?
    ) throws -> (result: ChangeResult, version: Version?, isHidden: Bool, write: StoredDocument?) {
        var change = change
        change.delta = change.delta.stampingServerTimestamps(with: Timestamp(secondsSince1970: now.timeIntervalSince1970))
        let rules = rules.rules(for: change.key.collection)
        if let refusal = rules.refusal(ofWritesTo: change.key, by: caller) {
            return (.rejected(reason: .forbidden, message: refusal), nil, false, nil)
        }
        let before = try document(change.key)
        let isHidden = before.map { !rules.allowsRead($0, by: caller) } ?? false
        // Every change takes a version, applied or not: versions are unique and follow commit
        // order; they need not be dense.
        let version = try transaction.nextVersion()
        var verdict = Self.judge(
            change, before: before, isHidden: isHidden, strategy: strategy, rules: rules, caller: caller,
            user: user, ownWrites: ownWrites, version: version)
        if verdict.readsAsMissing {
            verdict = Self.judge(
                change, before: nil, isHidden: false, strategy: strategy, rules: rules, caller: caller, user: user,
                ownWrites: OwnWrites(), version: version)
            // Where the document is missing this change would create it; here the id is taken.
            // That much a guess at an id tells (Spec/security.md, "Not covered").
            if verdict.write != nil { return (.rejected(reason: .notFound, message: Self.missing(change.key)), version, isHidden, nil) }
        }
        return (verdict.answer, version, isHidden, verdict.write)
    }

    /// What a change does to a document, decided without the store: the answer, and the document
    /// to save if any.
    struct Verdict {
        var answer: ChangeResult
        var write: StoredDocument?
        /// Refused by the rules, or not applicable, where the caller may not read the document:
        /// to be answered as if it were missing.
        var readsAsMissing = false
    }

    static func judge(
        _ change: BatchChange, before: StoredDocument?, isHidden: Bool, strategy: ConflictStrategy,
        rules: any SecurityRules, caller: Caller, user: String, ownWrites: OwnWrites, version: Version
    ) -> Verdict {
        let hidden = Verdict(answer: .rejected(reason: .notFound, message: missing(change.key)), readsAsMissing: true)
        var state = before?.state ?? DocumentState()
        let delta = ownWrites.isEmpty ? change.delta : change.delta.rebased(onto: state, past: ownWrites)
        // Judged on the rebased change: after an earlier change of the batch that nobody else's write
        // followed, it is uncontested, and the client, which rebases it the same way, computes the
        // state (a document written many times in a batch would otherwise be sent back each time).
        // A change with server timestamps is answered with its state: the client holds estimates.
        let isUncontested = state.isUncontested(by: delta) && !delta.hasServerTimestamps
        let report: JoinReport
        do {
            report = try strategy.apply(delta, to: &state, version: version, maximumBytes: .max)
        } catch {
            if isHidden { return hidden }
            if error.code == .documentNotFound { return Verdict(answer: .rejected(reason: .notFound, message: missing(change.key))) }
            return Verdict(answer: .rejected(reason: error.reason, message: "\(change.key): \(error.description)"))
        }
        let after = StoredDocument(key: change.key, owner: before?.owner ?? user, version: version, state: state)
        guard rules.allowsWrite(before: before, after: after, by: caller) else {
            if isHidden { return hidden }
            return Verdict(
                answer: .rejected(reason: .forbidden, message: "the rules of \(change.key.collection) refuse this write to \(change.key)"))
        }
        if state.byteSize > ValueLimits.maximumDocumentBytes, state.byteSize > before?.state.byteSize ?? 0 {
            // A caller who may write but not read learns that much, and nothing of the sizes.
            return Verdict(
                answer: .rejected(
                    reason: .tooLarge,
                    message: isHidden
                        ? "\(change.key): the write would make the document larger than the limit"
                        : "\(change.key): the document would hold \(state.byteSize) bytes; the limit is \(ValueLimits.maximumDocumentBytes)"
                ))
        }
        do {
            try rules.validate(after)
        } catch {
            return Verdict(
                answer: .rejected(
                    reason: error.reason,
                    message: isHidden
                        ? "\(change.key): the collection's rules refuse the document" : "\(change.key): \(error.message)"))
        }
        if strategy == .manual && !report.conflicts.isEmpty {
            guard !isHidden, let server = before else { return Verdict(answer: hidden.answer) }
            // The change's increments count even so (they never conflict): saved with them.
            guard report.isApplied else { return Verdict(answer: .unresolved(state: server.state, conflicts: report.conflicts)) }
            return Verdict(answer: .unresolved(state: state, conflicts: report.conflicts), write: after)
        }
        // Deleting what never was saves nothing: no tombstone, and no owner for the id.
        guard before != nil || report.isApplied else { return Verdict(answer: .applied(version: version, state: nil, conflicts: [])) }
        // An uncontested change's state the client computes. A caller who may write but not read
        // gets no state (what was applied of his change would tell what it met); one who may read
        // the result but not what was there, what this change wrote.
        let answered = isUncontested || isHidden ? nil : rules.allowsRead(after, by: caller) ? state : report.changes
        return Verdict(answer: .applied(version: version, state: answered, conflicts: isHidden ? [] : report.conflicts), write: after)
    }

    /// The refusal of a document that does not exist, or that the caller may not read: the two
    /// read alike on every route.
    static func missing(_ key: DocumentKey) -> String { "no document \(key)" }

    // MARK: - Pull

    /// The documents the caller may read that changed after `cursor`, in version order,
    /// tombstones included, at most `limit` (500 when `nil`) and at most `maximumPageBytes` of
    /// them (but always one, when there is one); only those of `collections`, or of `scope`,
    /// when one is given.
    ///
    /// - Throws: `Refusal`: `.invalid` for a cursor this database did not make, a limit out of
    ///   range, a bad collection name, or both `collections` and `scope`; `.resyncRequired` when
    ///   tombstones newer than the cursor were removed (the client must pull from the beginning);
    ///   `.failed` when the store fails.
    public func pull(
        cursor: String?, limit: Int? = nil, collections: [String]? = nil, scope: SyncScope? = nil, caller: Caller
    ) throws(Refusal) -> PullResponse {
        try pullPage(
            cursor: cursor, limit: limit, scope: try Self.scope(collections: collections, scope: scope), readsDocuments: true,
            caller: caller
        ).response
    }

    /// The body of the page `pull(cursor:limit:collections:scope:caller:)` answers, each document
    /// encoded once.
    ///
    /// - Throws: `Refusal`, as `pull`.
    public func pullBody(
        cursor: String?, limit: Int? = nil, collections: [String]? = nil, scope: SyncScope? = nil, form: PullForm = .full,
        caller: Caller
    ) throws(Refusal) -> [UInt8] {
        try pullPage(
            cursor: cursor, limit: limit, scope: try Self.scope(collections: collections, scope: scope), form: form,
            readsDocuments: false, caller: caller
        ).body
    }

    /// A page's documents (read only when `readsDocuments`) and its body. A document whose
    /// rules decide its read by its owner alone, and whose collection the scope covers whole,
    /// goes into a page of states alone as stored, without its state being read.
    private func pullPage(
        cursor: String?, limit: Int?, scope: SyncScope?, form: PullForm = .full, readsDocuments: Bool, caller: Caller
    ) throws(Refusal) -> (response: PullResponse, body: [UInt8]) {
        let limit = limit ?? min(500, configuration.limits.maximumPageSize)
        guard limit >= 1, limit <= configuration.limits.maximumPageSize else {
            throw Refusal.invalid("limit must be 1 to \(configuration.limits.maximumPageSize) (maximumPageSize)")
        }
        let start = try startPosition(of: cursor, caller: caller)
        let after = start.version
        // A document a scope's equalities leave out is named in `left` when the device may hold it
        // from before: not when it has not changed since this pull started from the beginning.
        var freshThrough = start.freshThrough
        if cursor?.isEmpty ?? true, scope?.hasEqualities == true {
            freshThrough = try Self.storeCall(log: configuration.log) { try store.latestVersion() }
        }
        // Unreadable documents are skipped, so a page is scanned in rounds until it is full; a
        // bounded number of rounds keeps one request's work bounded, and the cursor moves past
        // everything scanned. A page is full at `limit` documents or `maximumPageBytes` of them,
        // whichever comes first (a page of large documents holds fewer, at least one).
        var documents: [ServerDocument] = []
        var left: [DocumentKey] = []
        var pageCount = 0
        var page = PullResponse.Writer(form: form)
        var position = after
        var hasMore = false
        let maximumBytes = configuration.limits.maximumPageBytes
        scan: for _ in 0..<8 {
            let rows = try Self.storeCall(log: configuration.log) {
                try store.encodedChanges(after: position, limit: limit, collections: scope?.collections, maximumBytes: maximumBytes)
            }
            for row in rows {
                let collectionRules = rules.rules(for: row.key.collection)
                var read: StoredDocument?
                func document() throws(Refusal) -> StoredDocument {
                    if let read { return read }
                    let document = try Self.storeCall(log: configuration.log) { try row.decoded() }
                    read = document
                    return document
                }
                let isReadable =
                    if let decided = collectionRules.allowsRead(row.key, ownedBy: row.owner, by: caller) {
                        decided
                    } else {
                        collectionRules.allowsRead(try document(), by: caller)
                    }
                guard isReadable else {
                    position = row.version
                    continue
                }
                let isCovered =
                    if let scope, !scope.coversWhole(row.key.collection) {
                        scope.covers(row.key.collection, state: try document().state)
                    } else {
                        true
                    }
                let isAdded: Bool
                var served: ServerDocument?
                if !isCovered {
                    guard row.version > freshThrough else {
                        position = row.version
                        continue
                    }
                    isAdded = page.appendLeft(row.key, maximumBytes: maximumBytes)
                    if isAdded { left.append(row.key) }
                } else if !readsDocuments, form == .state, read == nil, let exists = row.exists {
                    isAdded = try Self.storeCall(log: configuration.log) {
                        try page.append(
                            row.key, version: row.version, exists: exists, encodedState: row.encodedState, maximumBytes: maximumBytes)
                    }
                } else {
                    let document = try document().serverDocument
                    isAdded = page.append(document, maximumBytes: maximumBytes)
                    served = document
                }
                guard isAdded else {
                    hasMore = true
                    break scan
                }
                if readsDocuments, let served { documents.append(served) }
                position = row.version
                pageCount += 1
                if pageCount == limit {
                    hasMore = true
                    break scan
                }
            }
            // Fewer rows than the limit may be the store's byte budget, not the end: only a round
            // that finds nothing is the end.
            hasMore = !rows.isEmpty
            if !hasMore { break }
        }
        let next = cursors.cursor(for: CursorCodec.Position(version: position, freshThrough: freshThrough), caller: caller)
        metrics.add("abrova_pulls_total")
        metrics.add("abrova_pull_documents_total", [], Double(pageCount))
        return (
            PullResponse(documents: documents, cursor: next, hasMore: hasMore, left: left),
            page.finish(cursor: next, hasMore: hasMore)
        )
    }

    /// The version a cursor stands for, as a pull reads it.
    ///
    /// - Throws: `Refusal`, as `startPosition(of:caller:)`.
    private func startVersion(of cursor: String?, caller: Caller) throws(Refusal) -> Version {
        try startPosition(of: cursor, caller: caller).version
    }

    /// The position a cursor stands for, as a pull reads it.
    ///
    /// - Throws: `Refusal`: `.invalid` for a cursor this database did not make for this caller;
    ///   `.resyncRequired` for one made under other read rules or older than a removed tombstone.
    private func startPosition(of cursor: String?, caller: Caller) throws(Refusal) -> CursorCodec.Position {
        let position = try cursors.position(of: cursor, caller: caller)
        let horizon = try Self.storeCall(log: configuration.log) { try store.tombstoneHorizon() }
        if position.version > .zero, position.version < horizon {
            throw Refusal(
                .resyncRequired, "resync required: deletes after this cursor are no longer kept; pull from the beginning (no cursor)")
        }
        return position
    }

    /// The scope a pull or a watch names: its `collections` whole, or `scope`.
    ///
    /// - Throws: `Refusal` `.invalid` for both, more than 100 collections or a bad name.
    static func scope(collections: [String]?, scope: SyncScope?) throws(Refusal) -> SyncScope? {
        guard let collections else { return scope }
        guard scope == nil else { throw Refusal.invalid("a pull names collections or a scope, not both") }
        guard collections.count <= 100 else { throw Refusal.invalid("a pull names at most 100 collections") }
        for collection in collections {
            do { try DocumentKey(collection: collection, id: "x").validate() } catch { throw Refusal(error, context: "collections") }
        }
        return try SyncScope(collections: collections)
    }

    // MARK: - Watch

    /// A watch checked and ready to wait (`GET /v1/watch`, Spec/protocol.md).
    public struct PreparedWatch: Sendable {
        let position: WatchPosition
        let hub: WatchHub

        /// Waits: `answer` is called once, `true` as soon as a change the caller may read is
        /// after the cursor, `false` after the idle time or when the service stops watching. It is
        /// called on the service's own thread and must not block. Returns the waiting watch, to
        /// cancel when its caller hangs up.
        @discardableResult
        public func wait(_ answer: @escaping @Sendable (_ changed: Bool) -> Void) -> WaitingWatch {
            guard let id = hub.add(position, answer: answer) else {
                answer(false)
                return WaitingWatch(id: nil, hub: hub)
            }
            return WaitingWatch(id: id, hub: hub)
        }
    }

    /// A watch waiting for its answer (`PreparedWatch.wait`).
    public struct WaitingWatch: Sendable {
        let id: UInt64?
        let hub: WatchHub

        /// Drops the watch at once, unanswered: its caller is gone (`GET /v1/watch` whose client
        /// hung up). It no longer counts in `watchCount` or `maximumWatches`, and its answer is not
        /// called, unless it was called already or is being called now.
        public func cancel() {
            if let id { hub.cancel(id) }
        }
    }

    /// Checks a watch from `cursor`, as a pull from it would be checked.
    ///
    /// A change to a collection of the scope wakes it, covered or not: a device may hold a
    /// document that has just left the scope.
    ///
    /// - Throws: `Refusal`: as `pull` for the cursor, the collections and the scope;
    ///   `.overloaded` when `maximumWatches` are waiting.
    public func prepareWatch(
        cursor: String?, collections: [String]? = nil, scope: SyncScope? = nil, caller: Caller
    ) throws(Refusal) -> PreparedWatch {
        let collections = try Self.scope(collections: collections, scope: scope)?.collections
        let after = try startVersion(of: cursor, caller: caller)
        guard watches.count < configuration.maximumWatches else {
            throw Refusal(.overloaded, "too many watches at once: \(configuration.maximumWatches) (limit maximumWatches); try again later")
        }
        return PreparedWatch(position: WatchPosition(caller: caller, after: after, collections: collections.map(Set.init)), hub: watches)
    }

    /// Watches waiting now.
    public var watchCount: Int { watches.count }

    /// Answers every waiting watch "nothing new" and takes no more: for a server about to stop.
    public func stopWatching() { watches.close() }

    deinit { watches.close() }

    // MARK: - Read

    /// A document, read online.
    ///
    /// - Throws: `Refusal`: `.notFound` when it does not exist, was deleted or the rules refuse the
    ///   read (the three read alike); `.invalid` for a bad key; `.failed` when the store fails.
    public func document(_ key: DocumentKey, caller: Caller) throws(Refusal) -> ServerDocument {
        do { try key.validate() } catch { throw Refusal(error) }
        let stored = try Self.storeCall(log: configuration.log) { try store.document(key) }
        guard let stored, stored.state.exists, rules.rules(for: key.collection).allowsRead(stored, by: caller) else {
            throw Refusal(.notFound, Self.missing(key))
        }
        return stored.serverDocument
    }

    /// Removes tombstones older than the retention.
    ///
    /// - Throws: `Refusal` `.failed` when the store fails.
    public func purgeExpiredTombstones() throws(Refusal) {
        let cutoff = configuration.clock().addingTimeInterval(-configuration.tombstoneRetention)
        _ = try Self.storeCall(log: configuration.log) { try store.purgeTombstones(deletedBefore: cutoff) }
    }

    /// Runs a store call; a `Refusal` thrown inside passes through, any other failure is
    /// logged and answered `unavailable` or `failed` without its details (which may name tables and statements).
    private static func storeCall<Result>(log: @Sendable (String) -> Void, _ body: () throws -> Result) throws(Refusal) -> Result {
        do {
            return try body()
        } catch let error as Refusal {
            throw error
        } catch let error as ServerStoreError where error.isUnavailable {
            log("store unavailable: \(error)")
            throw Refusal(.unavailable, "the server's database cannot be reached; try again later")
        } catch {
            log("store failure: \(error)")
            throw Refusal(.failed, "the server's store failed; try again later")
        }
    }
}
