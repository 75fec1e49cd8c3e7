import AbrovaCore
import AbrovaHTTP
import AbrovaServer
import AbrovaTestSupport
import AbrovaWire
import Testing

/// Inputs the fuzzers (Sources/AbrovaFuzzing) found mishandled, kept as cases once fixed.
@Suite struct FuzzRegressionTests {
    /// The handler took the segment before a path's first `/` for the empty one before a leading
    /// `/`, so `x/v1/push` was served as `/v1/push` (found as `GET PUT /v1/health` answered 200).
    @Test(arguments: ["PUT /v1/health", "x/v1/health", "v1/health", "v1/v1/health", "*"])
    func aPathWithoutItsLeadingSlashMatchesNoRoute(_ path: String) throws {
        let folder = TemporaryFolder()
        let service = try SyncService(store: try SQLiteServerStore(path: folder.path("server.sqlite"), durability: .normal))
        let handler = SyncHTTPHandler(service: service, authenticator: DevelopmentAuthenticator())
        let response = handler.handle(HTTPRequest(method: "GET", path: path, headers: ["x-api-key": "k"]))
        #expect(response.status == 404)
        #expect(Refusal(body: response.body)?.message.contains("no route") == true)
        #expect(handler.handle(HTTPRequest(method: "GET", path: "/v1/health")).status == 200)
    }
}
