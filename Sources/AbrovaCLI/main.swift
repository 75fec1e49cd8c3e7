import AbrovaServer
import Foundation

// `abrova serve`: the sync server on the embedded SQLite store, no set-up beyond the command.

let usage = """
    usage: abrova serve [--port N] [--database PATH] [--rules FILE] [--auth FILE]
                        [--threads N] [--retention-days N] [--loopback]

      --port N            port to listen on (default 8080; 0 picks a free one)
      --database PATH     the SQLite database, created when missing (default ./abrova.sqlite)
      --rules FILE        security rules (Spec/protocol.md, "Security rules"); default owner-only
      --auth FILE         API keys and tokens; without it, development mode (any API key; a
                          bearer token is its user's id)
      --threads N         request threads (default 8)
      --retention-days N  how long tombstones are kept (default 30)
      --loopback          listen on 127.0.0.1 only
    """

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("abrova: \(message)\n".utf8))
    exit(2)
}

var arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.first == "serve" else { fail(arguments.isEmpty ? "a command is needed\n\(usage)" : "unknown command \(arguments[0])\n\(usage)") }
arguments.removeFirst()

var options = ServeOptions()
while !arguments.isEmpty {
    let name = arguments.removeFirst()
    if name == "--loopback" {
        options.loopbackOnly = true
        continue
    }
    if name == "--help" || name == "-h" {
        print(usage)
        exit(0)
    }
    guard !arguments.isEmpty else { fail("\(name) needs a value\n\(usage)") }
    let value = arguments.removeFirst()
    switch name {
    case "--port":
        guard let port = UInt16(value) else { fail("--port takes a number from 0 to 65535") }
        options.port = port
    case "--database": options.databasePath = value
    case "--rules": options.rulesPath = value
    case "--auth": options.authPath = value
    case "--threads":
        guard let threads = Int(value), threads > 0 else { fail("--threads takes a positive number") }
        options.threads = threads
    case "--retention-days":
        guard let days = Double(value), days > 0 else { fail("--retention-days takes a positive number") }
        options.retentionDays = days
    default: fail("unknown option \(name)\n\(usage)")
    }
}

do {
    try runServer(options)
} catch {
    fail("\(error)")
}
