import AbrovaServer
import AbrovaSync
import AbrovaTestSupport
import Foundation
import Testing

/// An answer cut right after a complete header line (the connection closed in order, as a proxy
/// or a balancer may do) must count as the server being unreachable: the write is queued. On
/// Linux, URLSession (swift-corelibs-foundation) traps instead: libcurl reports the transfer
/// complete, and `_NativeProtocol.transferCompleted` has no response
/// (swift-corelibs-foundation issue 5285, fixed upstream by pull request 5286, not in this
/// toolchain). The long run found it; the app is a child process here, since the trap ends it.
@Suite struct CutAnswerTests {
    static let urlSessionTrap = "Fatal error: Transfer completed, but there's no response."
    let folder = TemporaryFolder()

    @Test func anAnswerCutAfterItsStatusLineQueuesTheWriteWithoutEndingTheApp() async throws {
        let live = try LiveSyncServer()
        let proxy = try FaultProxy(upstreamPort: live.server.port)
        defer { proxy.stop() }
        proxy.fault = .cutResponse(afterBytes: "HTTP/1.1 200 OK\r\n".utf8.count)
        let device = try ChildProcess("abrova-chaos-client", [
            "drive", "--store", folder.path("device.sqlite"), "--server", "http://127.0.0.1:\(proxy.port)",
            "--api-key", LiveSyncServer.apiKey, "--token", LiveSyncServer.token(of: "ana"), "--timeout-ms", "2000",
        ], logPath: folder.path("device.log"), isDriven: true)
        defer { device.kill() }
        let answer = try? await device.command("set cw t x v")
        await device.stop()
        #if os(Linux)
        withKnownIssue("swift-corelibs-foundation 5285: URLSession traps on an answer cut after a header line") {
            #expect(answer == "ok pending" && !device.log.contains(Self.urlSessionTrap), "\(device.log.prefix(300))")
        }
        #else
        #expect(answer == "ok pending", "\(device.log.prefix(300))")
        #endif
        await live.stop()
    }
}
