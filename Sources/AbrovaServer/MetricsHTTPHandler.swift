import AbrovaCore
import AbrovaHTTP
import AbrovaWire

/// `GET /metrics` on a listener of its own (`abrova serve --metrics-port`): the service's
/// metrics in Prometheus' text format. With a token, a scraper must send
/// `Authorization: Bearer <token>`; without one, the listener must be on loopback only (the CLI
/// binds it so).
public struct MetricsHTTPHandler: Sendable {
    let service: SyncService
    let token: String?

    /// A handler showing `service`'s metrics to callers that hold `token` (`nil`: anyone who can
    /// reach the listener).
    public init(service: SyncService, token: String?) {
        self.service = service
        self.token = token
    }

    /// Answers one request.
    public func handle(_ request: HTTPRequest) -> HTTPResponse {
        guard request.path == "/metrics" else {
            return .error(status: 404, message: "no route \(request.method) \(request.path.prefix(100))")
        }
        guard request.method == "GET" else { return .error(status: 405, message: "\(request.method) is not allowed on /metrics") }
        if let token {
            let sent = request.headers["authorization"].map { Array($0.utf8) } ?? []
            guard HMACSHA256.isEqual(sent, Array("Bearer \(token)".utf8)) else {
                return .error(status: 401, message: "the metrics need Authorization: Bearer <the --metrics-token>")
            }
        }
        return HTTPResponse(
            status: 200, headers: [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")],
            body: Array(service.metrics.rendered(gauges: service.gauges).utf8))
    }
}
