// abrova-chaos-client: one device of the long-run convergence test, in a process of its own so
// that the test can kill it (SIGKILL) and start it again on the same store.
//
//     abrova-chaos-client run --store s.sqlite --server http://127.0.0.1:PORT --log c0.log --name c0 --seed 42 --restart 3
//
// Modes:
// - `run`: random writes from the seed until killed (ChaosWorkload), each logged before its call
//   (`begin`) and after it returned (`done`/`rejected`); conflicts and later rejections too.
// - `prepare`: creates the shared documents, syncs until quiet, exits.
// - `settle`: syncs until quiet, writes the device's documents to `--dump`, exits.
// - `drive`: one command a line on standard input, one answer a line on standard output (`now`,
//   `set|update <collection> <id> <field> <value>`, `sync`, `disconnect`, `reconnect`, `dump`,
//   `quit`): a test steps it, as the device whose clock is a day ahead.

import AbrovaSync
import AbrovaTestSupport
import Foundation

do {
    let options = try ClientOptions(Array(CommandLine.arguments.dropFirst()))
    let log = options.logPath.isEmpty ? nil : try ChaosLogFile(path: options.logPath)
    log?.append(ChaosLogEntry(.start, write: options.name, detail: "\(options.restart)"))
    let sync = try makeSync(options)
    switch options.mode {
    case "run":
        var writer = Writer(sync: sync, log: try log.orThrow("run needs --log"), options: options)
        try await writer.prepare()
        try await writer.run()
    case "prepare":
        for collection in ChaosWorkload.sharedStrategies.keys.sorted() {
            for id in ChaosWorkload.sharedDocuments {
                try await sync.collection(collection).document(id).setData(["x": .string(ChaosWorkload.initialValue)])
            }
        }
        guard await syncUntilQuiet(sync, within: 60) else { throw ClientFailure("the shared documents were not sent") }
    case "settle":
        let listener = ConflictLogger(log: log)
        sync.addSyncListener(listener)
        let quiet = await syncUntilQuiet(sync, within: 60)
        _ = await syncUntilQuiet(sync, within: 10) // a second run: pulls what came meanwhile
        try Data(try await dump(sync).utf8).write(to: URL(fileURLWithPath: options.dumpPath))
        withExtendedLifetime(listener) {}
        guard quiet else { throw ClientFailure("still \(await sync.pendingCount) writes pending") }
    default:
        try await drive(sync)
    }
    await sync.close()
} catch {
    FileHandle.standardError.write(Data("abrova-chaos-client: \(error)\n".utf8))
    exit(1)
}
