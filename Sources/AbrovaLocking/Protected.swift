#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// A value reached only under a lock: what the standard library's `Mutex` is, on every system the
/// SDK supports (`Mutex` needs iOS 18 and macOS 15), and a class, so closures may capture it.
///
///     let count = Protected(0)
///     count.withLock { $0 += 1 }
///
/// `os_unfair_lock` on Apple's systems, a `pthread_mutex_t` elsewhere; not recursive: `withLock`
/// must not be called again from inside its closure. It is `Sendable` because the lock makes it
/// so: the state is reached only inside `withLock`, and a state that is not `Sendable` must not
/// escape the closure (`Mutex` has the compiler check this; here it is the caller's promise).
package final class Protected<State>: @unchecked Sendable {
    #if canImport(Darwin)
        private let lock: UnsafeMutablePointer<os_unfair_lock>
    #else
        private let lock: UnsafeMutablePointer<pthread_mutex_t>
    #endif
    private var state: State

    /// A lock around `state`.
    package init(_ state: State) {
        self.state = state
        lock = .allocate(capacity: 1)
        #if canImport(Darwin)
            lock.initialize(to: os_unfair_lock())
        #else
            lock.initialize(to: pthread_mutex_t())
            pthread_mutex_init(lock, nil)
        #endif
    }

    deinit {
        #if !canImport(Darwin)
            pthread_mutex_destroy(lock)
        #endif
        lock.deinitialize(count: 1)
        lock.deallocate()
    }

    /// Runs `body` with the state, under the lock.
    package func withLock<Result, Failure: Error>(_ body: (inout State) throws(Failure) -> Result) throws(Failure) -> Result {
        #if canImport(Darwin)
            os_unfair_lock_lock(lock)
            defer { os_unfair_lock_unlock(lock) }
        #else
            pthread_mutex_lock(lock)
            defer { pthread_mutex_unlock(lock) }
        #endif
        return try body(&state)
    }

    /// The state now (a copy, taken under the lock).
    package var value: State { withLock { $0 } }
}
