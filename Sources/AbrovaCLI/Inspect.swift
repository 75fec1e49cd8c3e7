import AbrovaCore
import AbrovaServer
import AbrovaStore
import Foundation

/// `abrova inspect store FILE` and `abrova inspect server --database/--postgres`, with `--json`;
/// returns the exit status (2 with a sentence on standard error when it cannot read).
func runInspect(_ arguments: [String]) -> Int32 {
    var rest = arguments
    let asJSON = rest.contains("--json")
    rest.removeAll { $0 == "--json" }
    func refuse(_ message: String) -> Int32 {
        // One line: a library's message of several lines (libpq's) is joined.
        let line = message.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: " ")
        FileHandle.standardError.write(Data("abrova: \(line)\n".utf8))
        return 2
    }
    if rest.isEmpty || rest == ["--help"] || rest == ["-h"] {
        print(inspectUsage)
        return rest.isEmpty ? 2 : 0
    }
    switch rest.first {
    case "store":
        guard rest.count == 2 else { return refuse("inspect store takes one FILE\n\(inspectUsage)") }
        do {
            let inspection = try StoreInspection.read(path: rest[1])
            print(asJSON ? inspection.json.canonicalJSON : inspection.text)
            return 0
        } catch {
            return refuse(error.message)
        }
    case "server":
        guard rest.count == 3, rest[1] == "--database" || rest[1] == "--postgres" else {
            return refuse("inspect server takes --database PATH or --postgres URL\n\(inspectUsage)")
        }
        do {
            let inspection =
                rest[1] == "--database" ? try ServerInspection.read(sqlitePath: rest[2]) : try ServerInspection.read(postgresURL: rest[2])
            print(asJSON ? inspection.json.canonicalJSON : inspection.text)
            return 0
        } catch {
            return refuse(error.message)
        }
    default:
        return refuse("inspect looks into a store or a server, not \(rest[0])\n\(inspectUsage)")
    }
}
