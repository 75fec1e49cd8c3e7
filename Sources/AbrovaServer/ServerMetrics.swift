import AbrovaLocking

/// What a server process counts for its operator, rendered in Prometheus' text format
/// (`GET /metrics`, Spec/operations.md): counters by name and labels, and latency histograms.
/// Every method may be called from any thread.
public final class ServerMetrics: Sendable {
    /// The upper bounds of the latency buckets, in seconds.
    static let latencyBuckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

    /// A metric's name and its labels in a fixed order.
    struct Series: Hashable, Comparable {
        let name: String
        let labels: [Label]

        static func < (left: Series, right: Series) -> Bool {
            (left.name, left.labelText) < (right.name, right.labelText)
        }

        /// `{a="x",b="y"}`, or nothing without labels.
        var labelText: String {
            labels.isEmpty ? "" : "{" + labels.map { "\($0.name)=\"\(Self.escaped($0.value))\"" }.joined(separator: ",") + "}"
        }

        /// A label value as the text format writes it: backslash, quote and line feed escaped.
        static func escaped(_ value: String) -> String {
            var text = ""
            for character in value {
                switch character {
                case "\\": text += "\\\\"
                case "\"": text += "\\\""
                case "\n": text += "\\n"
                default: text.append(character)
                }
            }
            return text
        }
    }

    /// A label of a series.
    struct Label: Hashable {
        let name: String
        let value: String
    }

    private struct Histogram {
        var counts = [UInt64](repeating: 0, count: ServerMetrics.latencyBuckets.count)
        var count: UInt64 = 0
        var sum = 0.0
    }

    private struct State {
        var counters: [Series: Double] = [:]
        var histograms: [Series: Histogram] = [:]
    }

    private let state = Protected(State())

    /// Empty metrics.
    public init() {}

    /// Adds `amount` to the counter `name` with `labels` (name and value pairs).
    public func add(_ name: String, _ labels: [(String, String)] = [], _ amount: Double = 1) {
        let series = Series(name: name, labels: labels.map { Label(name: $0.0, value: $0.1) })
        state.withLock { $0.counters[series, default: 0] += amount }
    }

    /// Records one observation of `seconds` in the histogram `name` with `labels`.
    public func observe(_ name: String, _ labels: [(String, String)] = [], seconds: Double) {
        let series = Series(name: name, labels: labels.map { Label(name: $0.0, value: $0.1) })
        state.withLock { state in
            var histogram = state.histograms[series] ?? Histogram()
            for (index, bound) in Self.latencyBuckets.enumerated() where seconds <= bound { histogram.counts[index] += 1 }
            histogram.count += 1
            histogram.sum += seconds
            state.histograms[series] = histogram
        }
    }

    /// The counter `name` with `labels` (0 when never added to).
    public func value(_ name: String, _ labels: [(String, String)] = []) -> Double {
        let series = Series(name: name, labels: labels.map { Label(name: $0.0, value: $0.1) })
        return state.withLock { $0.counters[series] ?? 0 }
    }

    /// A value read when the metrics are rendered.
    public struct Gauge: Sendable {
        let name: String
        let labels: [(String, String)]
        let value: Double

        /// The gauge `name` with `labels` at `value`.
        public init(_ name: String, _ labels: [(String, String)] = [], _ value: Double) {
            self.name = name
            self.labels = labels
            self.value = value
        }
    }

    /// Every series in the text format (version 0.0.4), `gauges` among them, each metric with its
    /// `# HELP` and `# TYPE` lines (from `MetricCatalog`), in name order.
    public func rendered(gauges: [Gauge] = []) -> String {
        let (counters, histograms) = state.withLock { ($0.counters, $0.histograms) }
        var byName: [String: [String]] = [:]
        for (series, value) in counters {
            byName[series.name, default: []].append(series.name + series.labelText + " " + Self.number(value))
        }
        for gauge in gauges {
            let series = Series(name: gauge.name, labels: gauge.labels.map { Label(name: $0.0, value: $0.1) })
            byName[series.name, default: []].append(series.name + series.labelText + " " + Self.number(gauge.value))
        }
        for (series, histogram) in histograms {
            var lines: [String] = []
            for (index, bound) in Self.latencyBuckets.enumerated() {
                let labels = series.labels + [Label(name: "le", value: Self.number(bound))]
                lines.append(series.name + "_bucket" + Series(name: series.name, labels: labels).labelText + " \(histogram.counts[index])")
            }
            let all = series.labels + [Label(name: "le", value: "+Inf")]
            lines.append(series.name + "_bucket" + Series(name: series.name, labels: all).labelText + " \(histogram.count)")
            lines.append(series.name + "_sum" + series.labelText + " " + Self.number(histogram.sum))
            lines.append(series.name + "_count" + series.labelText + " \(histogram.count)")
            byName[series.name, default: []].append(lines.joined(separator: "\n"))
        }
        var text = ""
        for name in byName.keys.sorted() {
            if let entry = MetricCatalog.entries[name] {
                text += "# HELP \(name) \(entry.help)\n# TYPE \(name) \(entry.type)\n"
            }
            text += byName[name, default: []].sorted().joined(separator: "\n") + "\n"
        }
        return text
    }

    private static func number(_ value: Double) -> String {
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }
}

/// The metrics a server keeps: their names, kinds and help texts.
public enum MetricCatalog {
    static let entries: [String: (type: String, help: String)] = [
        "abrova_http_requests_total": ("counter", "Requests answered, by route and status."),
        "abrova_http_request_duration_seconds": ("histogram", "Time from a request's body to its answer, by route (a watch's whole wait)."),
        "abrova_push_changes_total": ("counter", "Pushed changes, by strategy and result (applied, unresolved, rejected)."),
        "abrova_conflicts_total": ("counter", "Conflicts reported, by strategy and outcome."),
        "abrova_rejections_total": ("counter", "Changes and requests refused, by reason."),
        "abrova_pulls_total": ("counter", "Pages pulled."),
        "abrova_pull_documents_total": ("counter", "Documents served by pulls (those named in left included)."),
        "abrova_watches_active": ("gauge", "Watches waiting now."),
        "abrova_database_connections": ("gauge", "Database connections, by state (open, idle, maximum); PostgreSQL only."),
        "abrova_database_errors_total": ("counter", "Store calls that failed, by kind (unavailable, failed)."),
        "abrova_zstd_bytes_total": ("counter", "Bytes of zstd bodies, by direction (request, answer) and form (compressed, raw)."),
    ]
}
