import AbrovaCore
import AbrovaServer
import AbrovaWire
import Foundation

// `abrova demo`: the shopping-cart story on a temporary server; `abrova serve`: the sync server on
// the embedded SQLite store. Neither needs set-up beyond the command.

let usage = """
    usage: abrova <command> [options]

      demo     the shopping-cart story: a temporary server, two devices offline, the merged cart
      serve    the sync server on the embedded SQLite store, or on PostgreSQL
      inspect  what a device store or a server database holds, read without changing it

    `abrova <command> --help` describes each; `abrova --version` says which release this is.
    """

let serveUsage = """
    usage: abrova serve [--port N] [--database PATH | --postgres URL [--connections N]]
                        [--rules FILE] [--auth FILE] [--threads N] [--retention-days N] [--loopback]
                        [--dev-on-all-interfaces] [--max-body-bytes N] [--max-batch-changes N]
                        [--max-page-bytes N] [--max-connections-per-address N]
                        [--min-bytes-per-second N] [--log-format text|json]
                        [--metrics-port N [--metrics-token TOKEN]]

      --port N            port to listen on (default 8080; 0 picks a free one)
      --database PATH     the SQLite database, created when missing (default ./abrova.sqlite)
      --postgres URL      a PostgreSQL database instead (postgresql://user:password@host/db);
                          any number of servers may share it; the schema is made at start
      --connections N     PostgreSQL connections this server opens at most (default 8)
      --rules FILE        security rules (Spec/protocol.md, "Security rules"); default owner-only
      --auth FILE         API keys and tokens (a token may carry an expiry), read again when
                          the file changes and on SIGHUP; without it, development mode (any API
                          key; a bearer token is its user's id), which listens on 127.0.0.1 only
      --threads N         threads that serve connections (default 8); as many more run pushes
                          and pulls (with PostgreSQL, as many as --connections)
      --retention-days N  how long tombstones are kept (default 30)
      --loopback          listen on 127.0.0.1 only (with --auth; development mode always does)
      --dev-on-all-interfaces
                          development mode on every interface: anyone who can reach the port
                          can act as any user. Never on a network you do not trust
      --max-body-bytes N  the largest request body, as sent and decompressed (default 16 MiB as
                          sent, 32 MiB decompressed); announced in /v1/health with the next two
      --max-batch-changes N  the most changes in one pushed batch (default 1000)
      --max-page-bytes N  the most bytes of documents in one pulled page (default 8388608)
      --max-connections-per-address N  connections one client address may hold open (default
                          256; 0: no limit; behind a proxy every client has the proxy's address)
      --min-bytes-per-second N  the slowest a request may arrive or an answer be taken, on
                          average after a 10 s grace (default 1024; 0: no minimum); slower
                          connections are closed
      --log-format F      text (the default) or json: one JSON object a line, each request with
                          its id (also in the answer's X-Request-Id header)
      --metrics-port N    GET /metrics (Prometheus text format) on this port of its own; on
                          127.0.0.1 only unless --metrics-token is given
      --metrics-token T   a scraper must send Authorization: Bearer T; the metrics then listen
                          where the server does
    """

let inspectUsage = """
    usage: abrova inspect store FILE [--json]
           abrova inspect server (--database PATH | --postgres URL) [--json]

      store    a device store (copy it off the device first: the app keeps its store locked):
               schema version, client id, user, pull cursor, sync scope, documents by
               collection, unsent writes and the batch being sent, conflicts for the resolver, size
      server   a server database: schema version, latest version, tombstone horizon, documents
               and tombstones by collection, the oldest tombstone, clients and their last batch
      --json   one JSON object instead of lines for people

    Nothing is written: no migration, no schema made.
    """

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("abrova: \(message)\n".utf8))
    exit(2)
}

var arguments = Array(CommandLine.arguments.dropFirst())
guard let command = arguments.first else { fail("a command is needed\n\(usage)") }
arguments.removeFirst()
switch command {
case "serve":
    break
case "demo":
    if arguments == ["--help"] || arguments == ["-h"] {
        print(demoUsage)
        exit(0)
    }
    guard arguments.isEmpty else { fail("demo takes no options\n\(demoUsage)") }
    exit(await runDemo())
case "inspect":
    exit(runInspect(arguments))
case "--help", "-h", "help":
    print(usage)
    exit(0)
case "--version", "version":
    print("abrova \(AbrovaRelease.version)")
    exit(0)
default:
    fail("unknown command \(command)\n\(usage)")
}

var options = ServeOptions()
while !arguments.isEmpty {
    let name = arguments.removeFirst()
    if name == "--loopback" {
        options.loopbackOnly = true
        continue
    }
    if name == "--dev-on-all-interfaces" {
        options.developmentOnAllInterfaces = true
        continue
    }
    if name == "--help" || name == "-h" {
        print(serveUsage)
        exit(0)
    }
    guard !arguments.isEmpty else { fail("\(name) needs a value\n\(serveUsage)") }
    let value = arguments.removeFirst()
    switch name {
    case "--port":
        guard let port = UInt16(value) else { fail("--port takes a number from 0 to 65535") }
        options.port = port
    case "--database": options.databasePath = value
    case "--postgres": options.postgresURL = value
    case "--connections":
        guard let connections = Int(value), connections > 0 else { fail("--connections takes a positive number") }
        options.postgresConnections = connections
    case "--rules": options.rulesPath = value
    case "--auth": options.authPath = value
    case "--threads":
        guard let threads = Int(value), threads > 0 else { fail("--threads takes a positive number") }
        options.threads = threads
    case "--retention-days":
        guard let days = Double(value), days > 0 else { fail("--retention-days takes a positive number") }
        options.retentionDays = days
    case "--max-body-bytes":
        guard let bytes = Int(value), bytes >= 1_024 else { fail("--max-body-bytes takes a number of bytes, 1024 or more") }
        options.maximumBodyBytes = bytes
    case "--max-batch-changes":
        guard let changes = Int(value), changes > 0 else { fail("--max-batch-changes takes a positive number") }
        options.maximumBatchChanges = changes
    case "--max-connections-per-address":
        guard let count = Int(value), count >= 0, count <= Int(UInt32.max) else {
            fail("--max-connections-per-address takes a number, 0 for no limit")
        }
        options.maximumConnectionsPerAddress = count
    case "--min-bytes-per-second":
        guard let bytes = Int(value), bytes >= 0, bytes <= Int(UInt32.max) else {
            fail("--min-bytes-per-second takes a number of bytes, 0 for no minimum")
        }
        options.minimumBytesPerSecond = bytes
    case "--log-format":
        guard let format = LogFormat(rawValue: value) else { fail("--log-format takes text or json") }
        options.logFormat = format
    case "--metrics-port":
        guard let port = UInt16(value) else { fail("--metrics-port takes a number from 0 to 65535") }
        options.metricsPort = port
    case "--metrics-token":
        guard !value.isEmpty, value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            fail("--metrics-token takes a token of printable ASCII without spaces")
        }
        options.metricsToken = value
    case "--max-page-bytes":
        guard let bytes = Int(value), bytes > 0 else { fail("--max-page-bytes takes a positive number of bytes") }
        options.maximumPageBytes = bytes
    default: fail("unknown option \(name)\n\(serveUsage)")
    }
}

if options.postgresURL != nil && CommandLine.arguments.contains("--database") {
    fail("--database and --postgres name two stores; give one")
}
if options.developmentOnAllInterfaces && options.authPath != nil {
    fail("--dev-on-all-interfaces is for development mode; with --auth the server listens on every interface unless --loopback")
}
if options.metricsToken != nil && options.metricsPort == nil {
    fail("--metrics-token is for the metrics listener; give --metrics-port too")
}
if options.developmentOnAllInterfaces && options.loopbackOnly {
    fail("--dev-on-all-interfaces and --loopback contradict each other; give one")
}
do {
    try runServer(options)
} catch let error as Refusal {
    fail(error.message)
} catch {
    fail("\(error)")
}
