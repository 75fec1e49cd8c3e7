#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Threads of their own that run the work handed to them, in order, at most `count` at a time:
/// threads are started as work comes, up to `count`, and wait for more until `close()`.
///
///     let workers = WorkerThreads(count: 8)
///     workers.submit { answer(query(database)) }
///     workers.close() // the queued work still runs; then the threads end
///
/// `@unchecked Sendable`: its mutable fields are reached only with its mutex locked.
final class WorkerThreads: @unchecked Sendable {
    typealias Work = @Sendable () -> Void

    private let count: Int
    // Reached only with `mutex` locked: the queue (from `head` on), and the threads' numbers.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var queue: [Work] = []
    private var head = 0
    private var started = 0
    private var idle = 0
    private var isClosed = false

    init(count: Int) {
        precondition(count > 0, "a worker pool needs at least one thread")
        self.count = count
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        condition.initialize(to: pthread_cond_t())
        pthread_cond_init(condition, nil)
    }

    deinit {
        // Every thread holds the pool until it ends, so none runs now.
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    /// Runs `work` on one of the threads, after the work submitted before it has started; returns
    /// whether it will. It will not after `close()`, nor when no thread runs and none can be
    /// started (the system is out of threads): the caller does the work itself.
    func submit(_ work: @escaping Work) -> Bool {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        guard !isClosed else { return false }
        // A thread more when the work waiting, this one with it, outnumbers the idle threads.
        if queue.count - head + 1 > idle && started < count && startThread() { started += 1 }
        guard started > 0 else { return false }
        queue.append(work)
        pthread_cond_signal(condition)
        return true
    }

    /// Lets the threads end once the work queued now is done; later work is dropped.
    func close() {
        pthread_mutex_lock(mutex)
        isClosed = true
        pthread_cond_broadcast(condition)
        pthread_mutex_unlock(mutex)
    }

    /// A detached thread that runs `loop`, holding the pool until it ends; whether it started
    /// (when it did not, the work waits for a running thread).
    private func startThread() -> Bool {
        let context = Unmanaged.passRetained(self).toOpaque()
        var thread = pthread_t()
        let started = pthread_create(
            &thread, nil,
            { context in
                #if canImport(Darwin)
                    let pool = Unmanaged<WorkerThreads>.fromOpaque(context).takeRetainedValue()
                #else
                    let pool = Unmanaged<WorkerThreads>.fromOpaque(context!).takeRetainedValue()
                #endif
                pool.loop()
                return nil
            }, context)
        guard started == 0 else {
            Unmanaged<WorkerThreads>.fromOpaque(context).release()
            return false
        }
        pthread_detach(thread)
        return true
    }

    private func loop() {
        pthread_mutex_lock(mutex)
        while true {
            while head == queue.count && !isClosed {
                idle += 1
                pthread_cond_wait(condition, mutex)
                idle -= 1
            }
            guard head < queue.count else { break }
            let work = queue[head]
            head += 1
            if head == queue.count {
                queue.removeAll(keepingCapacity: true)
                head = 0
            } else if head >= 1_024 && head * 2 >= queue.count {
                queue.removeFirst(head) // a queue that is never empty does not grow without end
                head = 0
            }
            pthread_mutex_unlock(mutex)
            work()
            pthread_mutex_lock(mutex)
        }
        started -= 1
        pthread_mutex_unlock(mutex)
    }
}
