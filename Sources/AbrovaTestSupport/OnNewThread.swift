import Foundation

/// Runs blocking work (sockets, semaphores) on a thread of its own and awaits its result, so that
/// tests never block the few threads Swift concurrency runs tasks on: with two cores a blocked
/// pair of them stalls every other test of the run.
public func onNewThread<Result: Sendable>(_ body: @escaping @Sendable () throws -> Result) async throws -> Result {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Swift.Result { try body() }) }.start()
    }
}
