import AbrovaLocking
import Foundation

/// A child process started with `posix_spawn`, for tests and benchmarks that run a program of
/// their own. Not `Foundation.Process`: on Linux its `run()` now and then crashes the whole test
/// process (a buffer over-read while it lists the open descriptors).
///
/// The child gets the standard streams asked for and no other descriptor of this process (each is
/// closed in the child), default signal handlers and an empty signal mask. It is reaped only under
/// the lock `kill` takes, so `kill` never signals a pid the system has handed on to another process.
public final class SpawnedProcess: Sendable {
    /// Where a standard stream of the child goes.
    public enum Stream: Sendable {
        /// This process's own.
        case inherit
        /// `/dev/null`.
        case null
        /// The end of a file (created when missing), so that two streams on one file interleave.
        case append(toFile: String)
        /// A pipe whose other end is `input` (standard input) or `output` (standard output).
        case pipe
    }

    /// How the child ended.
    public enum Termination: Sendable, Equatable, CustomStringConvertible {
        case exited(Int32)
        case signalled(Int32)
        /// Someone else reaped it, and its status is lost.
        case unknown

        public var description: String {
            switch self {
            case .exited(let status): "exit status \(status)"
            case .signalled(let signal): "signal \(signal)"
            case .unknown: "unknown end"
            }
        }
    }

    public struct SpawnFailed: Error, CustomStringConvertible {
        public let executable: String
        public let error: Int32
        public var description: String { "cannot start \(executable): \(String(cString: strerror(error)))" }
    }

    public let pid: pid_t
    /// The write end of the child's standard input, when it is `.pipe`.
    public let input: FileHandle?
    /// The read end of the child's standard output, when it is `.pipe`.
    public let output: FileHandle?
    private let state = Protected<Termination?>(nil)

    /// Starts `executable` (a path; no search of `PATH`) with `arguments` (after its own path as
    /// `argv[0]`) and exactly `environment`.
    public init(
        _ executable: String, _ arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment,
        standardInput: Stream = .inherit, standardOutput: Stream = .inherit, standardError: Stream = .inherit
    ) throws {
        #if canImport(Darwin)
            var actions: posix_spawn_file_actions_t? = nil
            var attributes: posix_spawnattr_t? = nil
        #else
            var actions = posix_spawn_file_actions_t()
            var attributes = posix_spawnattr_t()
        #endif
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }

        // Descriptors (parent's end, child's end) of the pipes made here; the child's are closed
        // here once it has started.
        var pipes: [Int32: (parent: Int32, child: Int32)] = [:]
        var started = false
        defer {
            for (parent, child) in pipes.values {
                close(child)
                if !started { close(parent) }
            }
        }
        for (descriptor, stream) in [(STDIN_FILENO, standardInput), (STDOUT_FILENO, standardOutput), (STDERR_FILENO, standardError)] {
            switch stream {
            case .inherit:
                break
            case .null:
                posix_spawn_file_actions_addopen(&actions, descriptor, "/dev/null", descriptor == STDIN_FILENO ? O_RDONLY : O_WRONLY, 0)
            case .append(let path):
                posix_spawn_file_actions_addopen(&actions, descriptor, path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
            case .pipe:
                var ends: [Int32] = [-1, -1]
                guard pipe(&ends) == 0 else { throw SpawnFailed(executable: executable, error: errno) }
                // Closed on exec, so that other children, spawned or not, never hold them.
                for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
                let (read, write) = (ends[0], ends[1])
                pipes[descriptor] = descriptor == STDIN_FILENO ? (parent: write, child: read) : (parent: read, child: write)
                posix_spawn_file_actions_adddup2(&actions, descriptor == STDIN_FILENO ? read : write, descriptor)
            }
        }
        var flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF
        #if canImport(Darwin)
            flags |= POSIX_SPAWN_CLOEXEC_DEFAULT
        #else
            guard let closeFrom, closeFrom(&actions, 3) == 0 else { throw SpawnFailed(executable: executable, error: ENOSYS) }
        #endif
        // The calling thread may block signals (SIGCHLD, with which shells wait for their children)
        // or ignore them; the child starts afresh.
        var none = sigset_t()
        sigemptyset(&none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(flags))

        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for pointer in argv + envp { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard spawned == 0 else { throw SpawnFailed(executable: executable, error: spawned) }
        started = true
        self.pid = pid
        input = pipes[STDIN_FILENO].map { FileHandle(fileDescriptor: $0.parent, closeOnDealloc: true) }
        output = pipes[STDOUT_FILENO].map { FileHandle(fileDescriptor: $0.parent, closeOnDealloc: true) }
    }

    /// How it ended, or nil while it runs. Reaps it once it has ended; never blocks.
    public var termination: Termination? {
        state.withLock { termination in
            if termination == nil {
                var status: Int32 = 0
                var reaped: pid_t
                repeat { reaped = waitpid(pid, &status, WNOHANG) } while reaped == -1 && errno == EINTR
                if reaped == pid {
                    // What WIFEXITED, WEXITSTATUS and WTERMSIG say (macros Swift does not import).
                    termination = status & 0x7f == 0 ? .exited((status >> 8) & 0xff) : .signalled(status & 0x7f)
                } else if reaped == -1 {
                    termination = .unknown
                }
            }
            return termination
        }
    }

    public var isRunning: Bool { termination == nil }

    /// Sends `signal`, unless it has been reaped already.
    public func kill(_ signal: Int32 = SIGKILL) {
        state.withLock { termination in
            if termination == nil { _ = Foundation.kill(pid, signal) }
        }
    }

    /// Blocks the calling thread until it has ended (not for a task's thread: see `exited(within:)`).
    @discardableResult
    public func waitUntilExit() -> Termination {
        while true {
            if let termination { return termination }
            // Waits for its end without reaping it: `termination` reaps it, under the lock.
            var info = siginfo_t()
            if waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) == -1 && errno != EINTR { return termination ?? .unknown }
        }
    }

    /// Waits until it has ended, polling without holding a thread; nil when it still runs after
    /// `limit` or when the task is cancelled.
    @discardableResult
    public func exited(within limit: Duration = .seconds(60)) async -> Termination? {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            if let termination { return termination }
            do { try await Task.sleep(for: .milliseconds(20)) } catch { break }
        }
        return termination
    }
}

#if !canImport(Darwin)
    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later), which Swift's Glibc module
    /// leaves out (it is a GNU extension): it closes every descriptor from the given one up in the child.
    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private let closeFrom: CloseFrom? = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np").map { unsafeBitCast($0, to: CloseFrom.self) }
#endif
