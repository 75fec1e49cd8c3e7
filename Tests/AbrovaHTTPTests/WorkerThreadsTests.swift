import AbrovaLocking
import Dispatch
import Foundation
import Testing

@testable import AbrovaHTTP

@Suite struct WorkerThreadsTests {
    @Test func everyWorkRunsAndNoMoreThanTheCountAtOnce() throws {
        let workers = WorkerThreads(count: 3)
        let running = Protected((now: 0, most: 0, done: 0))
        let finished = DispatchSemaphore(value: 0)
        for _ in 0..<200 {
            let isQueued = workers.submit {
                running.withLock {
                    $0.now += 1; $0.most = max($0.most, $0.now)
                }
                usleep(200)
                running.withLock {
                    $0.now -= 1; $0.done += 1
                }
                finished.signal()
            }
            #expect(isQueued)
        }
        for _ in 0..<200 { #expect(finished.wait(timeout: .now() + 30) == .success) }
        let counts = running.value
        #expect(counts.done == 200)
        #expect(counts.most <= 3 && counts.most >= 2, "at most \(counts.most) at once")
        workers.close()
    }

    @Test func workQueuedBeforeCloseStillRunsAndLaterWorkIsRefused() throws {
        let workers = WorkerThreads(count: 1)
        let gate = DispatchSemaphore(value: 0)
        let done = Protected(0)
        #expect(
            workers.submit {
                gate.wait(); done.withLock { $0 += 1 }
            })
        #expect(workers.submit { done.withLock { $0 += 1 } })
        workers.close()
        #expect(!workers.submit { done.withLock { $0 += 100 } })
        gate.signal()
        let deadline = ContinuousClock.now + .seconds(30)
        while done.value < 2 && ContinuousClock.now < deadline { usleep(1_000) }
        usleep(50_000)
        #expect(done.value == 2)
    }
}
