import AbrovaTestSupport
import Foundation

/// A process the test starts from an executable built beside the test bundle (`abrova`,
/// `abrova-chaos-client`), whose output goes to a log file, or, with `isDriven`, whose standard
/// input and output are pipes the test writes commands to and reads answers from.
///
/// `kill()` sends SIGKILL; released without being killed (a test that threw), it is killed in
/// `deinit`. A watchdog shell kills it too when the test process ends however it ends (it waits on
/// a pipe only this process holds), so no child outlives its test.
final class ChildProcess: @unchecked Sendable {  // the Process is only started, signalled and waited for
    /// Where its output goes (its standard error only, when driven).
    let logPath: String
    private let process: Process
    private let watchdog: FileHandle
    private let watchdogClosed = Locked(false)
    private let input: FileHandle?
    private let output: FileHandle?
    private let pending = Locked<[UInt8]>([])

    /// Starts `executable` (a name `BuiltExecutable` finds, or a path) with `arguments`, under
    /// `launcher` when given (`["faketime", "-f", "+1d"]`), with `environment` added to the test's.
    init(_ executable: String, _ arguments: [String], logPath: String, launcher: [String] = [], environment: [String: String] = [:],
         isDriven: Bool = false) throws {
        let path = executable.contains("/") ? executable : try BuiltExecutable.url(named: executable)
            .orThrow("\(executable) is not built; run swift build first").path
        guard FileManager.default.createFile(atPath: logPath, contents: nil), let log = FileHandle(forWritingAtPath: logPath) else {
            throw Failure("cannot write \(logPath)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: launcher.isEmpty ? path : "/usr/bin/env")
        process.arguments = launcher.isEmpty ? arguments : launcher + [path] + arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.standardError = log
        if isDriven {
            let (toChild, fromChild) = (Pipe(), Pipe())
            process.standardInput = toChild
            process.standardOutput = fromChild
            input = toChild.fileHandleForWriting
            output = fromChild.fileHandleForReading
        } else {
            process.standardInput = FileHandle.nullDevice
            process.standardOutput = log
            (input, output) = (nil, nil)
        }
        try process.run()
        try? log.close()
        self.process = process
        self.logPath = logPath
        do {
            watchdog = try Self.watch(process.processIdentifier)
        } catch {
            Foundation.kill(process.processIdentifier, SIGKILL)
            throw error
        }
    }

    /// A shell that kills `pid` when its standard input ends: when the returned handle is closed,
    /// or when this process ends. Both ends of the pipe are closed on exec, so no other child
    /// holds it open.
    private static func watch(_ pid: Int32) throws -> FileHandle {
        let pipe = Pipe()
        for descriptor in [pipe.fileHandleForReading.fileDescriptor, pipe.fileHandleForWriting.fileDescriptor] {
            _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
        }
        let shell = Process()
        shell.executableURL = URL(fileURLWithPath: "/bin/sh")
        shell.arguments = ["-c", #"read -r line; kill -KILL "$1" 2>/dev/null"#, "abrova-watchdog", String(pid)]
        shell.standardInput = pipe
        shell.standardOutput = FileHandle.nullDevice
        shell.standardError = FileHandle.nullDevice
        try shell.run()
        return pipe.fileHandleForWriting
    }

    deinit { kill() }

    /// Whether it still runs.
    var isRunning: Bool { process.isRunning }

    /// Sends SIGKILL now (it dies without a chance to finish anything).
    func kill() {
        if !watchdogClosed.update({ closed in defer { closed = true }; return closed }) { try? watchdog.close() }
        if process.isRunning { Foundation.kill(process.processIdentifier, SIGKILL) }
    }

    /// Waits until it has ended, and returns its exit status (-1 when it is not known).
    ///
    /// Polled rather than `Process.waitUntilExit()`: on Linux, Foundation now and then misses a
    /// child's exit when many come and go (seen once in the long run: a killed client left a
    /// zombie and `waitUntilExit` spun for ten minutes). After a grace period the child is reaped
    /// here if Foundation has not; after `limit` the wait gives up rather than hang the run.
    @discardableResult
    func waitUntilExit(limit: Duration = .seconds(60)) async -> Int32 {
        let start = ContinuousClock.now
        let pid = process.processIdentifier
        while process.isRunning {
            let waited = ContinuousClock.now - start
            if waited > .seconds(2) {
                var status: Int32 = 0
                let reaped = waitpid(pid, &status, WNOHANG)
                if reaped == pid { return (status & 0x7f) == 0 ? (status >> 8) & 0xff : -1 }
                if reaped == -1 && errno == ECHILD && process.isRunning { return -1 }  // reaped, not by Foundation's books
            }
            if waited > limit { return -1 }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return process.terminationStatus
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
        guard let input, let output else { throw Failure("the child is not driven") }
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
