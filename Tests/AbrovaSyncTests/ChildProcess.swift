import AbrovaTestSupport
import Foundation

/// A process the test starts from an executable built beside the test bundle (`abrova`,
/// `abrova-chaos-client`), whose output goes to a log file, or, with `isDriven`, whose standard
/// input and output are pipes the test writes commands to and reads answers from.
///
/// `kill()` sends SIGKILL; released without being killed (a test that threw), it is killed in
/// `deinit`. A watchdog shell kills it too when the test process ends however it ends (it waits on
/// a pipe only this process holds), so no child outlives its test.
final class ChildProcess: Sendable {
    /// Where its output goes (its standard error only, when driven).
    let logPath: String
    private let process: SpawnedProcess
    private let watchdog: SpawnedProcess
    private let watchdogClosed = Locked(false)
    private let pending = Locked<[UInt8]>([])

    /// Starts `executable` (a name `BuiltExecutable` finds, or a path) with `arguments`, under
    /// `launcher` when given (`["faketime", "-f", "+1d"]`), with `environment` added to the test's.
    init(
        _ executable: String, _ arguments: [String], logPath: String, launcher: [String] = [], environment: [String: String] = [:],
        isDriven: Bool = false
    ) throws {
        let path =
            executable.contains("/")
            ? executable
            : try BuiltExecutable.url(named: executable)
                .orThrow("\(executable) is not built; run swift build first").path
        guard FileManager.default.createFile(atPath: logPath, contents: nil) else { throw Failure("cannot write \(logPath)") }
        let log = SpawnedProcess.Stream.append(toFile: logPath)
        let process = try SpawnedProcess(
            launcher.isEmpty ? path : "/usr/bin/env", launcher.isEmpty ? arguments : launcher + [path] + arguments,
            environment: ProcessInfo.processInfo.environment.merging(environment) { $1 },
            standardInput: isDriven ? .pipe : .null, standardOutput: isDriven ? .pipe : log, standardError: log)
        self.process = process
        self.logPath = logPath
        do {
            watchdog = try Self.watch(process.pid)
        } catch {
            process.kill()
            throw error
        }
    }

    /// A shell that kills `pid` when its standard input ends: when its pipe's write end here is
    /// closed, or when this process ends. No other child holds the pipe open: `SpawnedProcess`
    /// passes a child no descriptors but its standard three.
    private static func watch(_ pid: pid_t) throws -> SpawnedProcess {
        try SpawnedProcess(
            "/bin/sh", ["-c", #"read -r line; kill -KILL "$1" 2>/dev/null"#, "abrova-watchdog", String(pid)],
            standardInput: .pipe, standardOutput: .null, standardError: .null)
    }

    deinit { kill() }

    /// Whether it still runs.
    var isRunning: Bool { process.isRunning }

    /// Sends SIGKILL now (it dies without a chance to finish anything).
    func kill() {
        process.kill()
        if !watchdogClosed.update({ closed in
            defer { closed = true }; return closed
        }) {
            // Killed rather than let run its `kill`: by then the pid may be reaped and reused.
            watchdog.kill()
            try? watchdog.input?.close()
            // Both end at once; reaped here unless a caller waits for them first.
            let (process, watchdog) = (process, watchdog)
            Task { _ = await (process.exited(), watchdog.exited()) }
        }
    }

    /// Waits until it has ended, polling (no thread is held), and returns its exit status: -1 when
    /// a signal ended it, or when it still runs after `limit` (the wait gives up rather than hang
    /// the run).
    @discardableResult
    func waitUntilExit(limit: Duration = .seconds(60)) async -> Int32 {
        guard case .exited(let status) = await process.exited(within: limit) else { return -1 }
        return status
    }

    /// Sends it `signal` (SIGHUP, say), unless it has ended.
    func signal(_ signal: Int32) {
        process.kill(signal)
    }

    /// Kills it and waits until it is gone.
    func stop() async {
        kill()
        await waitUntilExit()
    }

    /// Its log so far.
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Sends one command line to a driven child and reads its answer up to a line that is exactly
    /// `end` when `until` is given, else one line.
    func command(_ line: String, until end: String? = nil) async throws -> String {
        guard let input = process.input, let output = process.output else { throw Failure("the child is not driven") }
        let pending = pending
        return try await onNewThread {
            try input.write(contentsOf: Data((line + "\n").utf8))
            // Commands are sent one at a time: the buffer is this call's until it returns.
            var buffer = pending.value
            defer { pending.update { $0 = buffer } }
            var lines: [String] = []
            while true {
                guard let newline = buffer.firstIndex(of: 10) else {
                    let chunk = output.availableData
                    guard !chunk.isEmpty else { throw Failure("the child ended before answering \(line)") }
                    buffer += chunk
                    continue
                }
                let next = String(decoding: buffer[..<newline], as: UTF8.self)
                buffer.removeSubrange(...newline)
                if end == nil { return next }
                if next == end { return lines.joined(separator: "\n") }
                lines.append(next)
            }
        }
    }
}

extension Optional {
    /// The value, or a `Failure` saying `message`.
    func orThrow(_ message: String) throws -> Wrapped {
        guard let self else { throw Failure(message) }
        return self
    }
}
