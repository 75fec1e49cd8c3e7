import AbrovaCore

/// The limits a server announces in `GET /v1/health`, which a client keeps to: it cuts its
/// batches by them, so that a batch is never refused for its size as a whole.
public struct ServerLimits: Hashable, Sendable {
    /// The most changes in one pushed batch.
    public var maximumChanges: Int
    /// The most bytes of a push body, uncompressed (the server's limit on bodies as sent and
    /// after decompression, the smaller).
    public var maximumPushBytes: Int
    /// The most documents in one pulled page.
    public var maximumPageSize: Int
    /// The most bytes of documents in one pulled page.
    public var maximumPageBytes: Int
    /// How long a watch (`GET /v1/watch`) waits with nothing new before it answers
    /// `{"changed": false}`; `nil` when not announced (take `defaultWatchIdleSeconds`).
    public var watchIdleSeconds: Int?

    /// A server's watch idle time when it announces none.
    public static let defaultWatchIdleSeconds = 25

    /// Limits as announced.
    public init(
        maximumChanges: Int, maximumPushBytes: Int, maximumPageSize: Int, maximumPageBytes: Int, watchIdleSeconds: Int? = nil
    ) {
        self.maximumChanges = maximumChanges
        self.maximumPushBytes = maximumPushBytes
        self.maximumPageSize = maximumPageSize
        self.maximumPageBytes = maximumPageBytes
        self.watchIdleSeconds = watchIdleSeconds
    }
}

/// What `GET /v1/health` answers: `{"limits": {...}, "status": "ok"}`, the limits holding
/// `watchIdleSeconds` when the server has the watch route and says so.
public struct HealthResponse: Hashable, Sendable {
    /// The server's limits; `nil` from a server that does not announce them.
    public var limits: ServerLimits?

    /// An answer announcing `limits`.
    public init(limits: ServerLimits?) {
        self.limits = limits
    }

    /// The canonical JSON body.
    public var body: [UInt8] {
        var parts: [String: Value] = ["status": "ok"]
        if let limits {
            var announced: [String: Value] = [
                "maximumChanges": .int(Int64(limits.maximumChanges)),
                "maximumPageBytes": .int(Int64(limits.maximumPageBytes)),
                "maximumPageSize": .int(Int64(limits.maximumPageSize)),
                "maximumPushBytes": .int(Int64(limits.maximumPushBytes)),
            ]
            if let idle = limits.watchIdleSeconds { announced["watchIdleSeconds"] = .int(Int64(idle)) }
            parts["limits"] = .map(announced)
        }
        var bytes: [UInt8] = []
        Value.map(parts).writeCanonicalJSON(to: &bytes)
        return bytes
    }

    /// Reads an answer; `nil` when the body is not the sync server's (a captive portal's page, a
    /// proxy's). Keys it does not know are ignored (a newer server may announce more), and
    /// limits that are missing or not positive count as not announced. `watchIdleSeconds` is
    /// read in `limits`, or else beside it.
    public init?(body: some Collection<UInt8>) {
        guard let value = try? Value(json: body), let parts = value.mapValue, parts["status"] == "ok" else { return nil }
        guard let announced = parts["limits"]?.mapValue else {
            limits = nil
            return
        }
        func positive(_ name: String) -> Int? {
            // The watch's idle time is taken beside the limits too, where a server may put it.
            guard let number = (announced[name] ?? (name == "watchIdleSeconds" ? parts[name] : nil))?.intValue, number > 0 else {
                return nil
            }
            return Int(clamping: number)
        }
        if let changes = positive("maximumChanges"), let pushBytes = positive("maximumPushBytes"),
            let pageSize = positive("maximumPageSize"), let pageBytes = positive("maximumPageBytes")
        {
            limits = ServerLimits(
                maximumChanges: changes, maximumPushBytes: pushBytes, maximumPageSize: pageSize, maximumPageBytes: pageBytes,
                watchIdleSeconds: positive("watchIdleSeconds"))
        } else {
            limits = nil
        }
    }
}
