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
    /// Says why on standard error, in one line (a library's message of several lines, libpq's,
    /// is joined), with the usage after it when the command itself was wrong.
    func refuse(_ message: String, showingUsage: Bool = false) -> Int32 {
        let line = message.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: " ")
        FileHandle.standardError.write(Data("abrova: \(line)\n\(showingUsage ? inspectUsage + "\n" : "")".utf8))
        return 2
    }
    if rest == ["--help"] || rest == ["-h"] {
        print(inspectUsage)
        return 0
    }
    guard !rest.isEmpty else { return refuse("inspect needs store or server", showingUsage: true) }
    switch rest.first {
    case "store":
        guard rest.count == 2 else { return refuse("inspect store takes one FILE", showingUsage: true) }
        do {
            let inspection = try StoreInspection.read(path: rest[1])
            print(asJSON ? inspection.json.canonicalJSON : inspection.text)
            return 0
        } catch {
            return refuse(error.message)
        }
    case "server":
        guard rest.count == 3, rest[1] == "--database" || rest[1] == "--postgres" else {
            return refuse("inspect server takes --database PATH or --postgres URL", showingUsage: true)
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
        return refuse("inspect looks into a store or a server, not \(rest[0])", showingUsage: true)
    }
}
