import AbrovaCore
import Foundation
import Testing

/// Runs every case in Fixtures/conflicts/*.json as Spec/conflicts.md ("Fixture format") says.
@Suite struct ConflictFixtureTests {
    static let fixtureFolder = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/conflicts")

    static func loadCases() throws -> [(file: String, value: Value)] {
        let files = try FileManager.default.contentsOfDirectory(atPath: fixtureFolder.path)
            .filter { $0.hasSuffix(".json") }.sorted()
        return try files.flatMap { file in
            let data = try Data(contentsOf: fixtureFolder.appendingPathComponent(file))
            let cases = try Value(json: data).arrayValue ?? []
            return cases.map { (file, $0) }
        }
    }

    @Test func atLeastFortyCases() throws {
        #expect(try Self.loadCases().count >= 40)
    }

    @Test func everyCasePasses() throws {
        for (file, fixture) in try Self.loadCases() {
            let name = fixture[try FieldPath("name")]?.stringValue ?? "?"
            do {
                let outcome = try FixtureCase(fixture).run()
                #expect(
                    outcome.document == outcome.expectedDocument,
                    "\(file): \(name): document \(outcome.document?.description ?? "null"), expected \(outcome.expectedDocument?.description ?? "null")"
                )
                #expect(
                    outcome.conflicts == outcome.expectedConflicts,
                    "\(file): \(name): conflicts \(outcome.conflicts.sorted()), expected \(outcome.expectedConflicts.sorted())")
            } catch {
                Issue.record("\(file): \(name): \(error)")
            }
        }
    }
}

/// One fixture case, read and run.
struct FixtureCase {
    struct Outcome {
        var document: Value?
        var expectedDocument: Value?
        var conflicts: Set<String>
        var expectedConflicts: Set<String>
    }

    let fixture: Value

    init(_ fixture: Value) { self.fixture = fixture }

    func run() throws -> Outcome {
        let strategyName = fixture[try FieldPath("strategy")]?.stringValue ?? ""
        guard let strategy = ConflictStrategy(rawValue: strategyName) else {
            throw FixtureError("unknown strategy \(strategyName)")
        }
        var server = DocumentState()
        for operation in fixture[try FieldPath("base")]?.arrayValue ?? [] {
            server = try Self.applyUncontested(operation, to: server)
        }
        let snapshot = server
        for operation in fixture[try FieldPath("server")]?.arrayValue ?? [] {
            server = try Self.applyUncontested(operation, to: server)
        }
        var change = DocumentDelta()
        var view = snapshot
        for (index, operation) in (fixture[try FieldPath("client")]?.arrayValue ?? []).enumerated() {
            let delta = try Self.delta(for: operation, base: snapshot.version, view: view, hasPendingChange: index > 0)
            change.compose(with: delta)
            view.applyLocally(delta, at: view.version.next)
        }
        change = change.droppingUnobservedRemoves(confirmed: snapshot)
        let result = try strategy.apply(change, to: server, version: server.version.next)
        #expect(result.state.invariantViolations() == [])

        let expected = fixture[try FieldPath("expected")] ?? .null
        let expectedDocument = expected[try FieldPath("document")]
        let expectedConflicts = (expected[try FieldPath("conflicts")]?.arrayValue ?? []).map { conflict in
            "\(conflict.mapValue?["path"]?.stringValue ?? "?"):\(conflict.mapValue?["outcome"]?.stringValue ?? "?")"
        }
        return Outcome(
            document: result.state.document,
            expectedDocument: expectedDocument == .null ? nil : expectedDocument,
            conflicts: Set(result.conflicts.map { "\($0.path):\($0.outcome.rawValue)" }),
            expectedConflicts: Set(expectedConflicts))
    }

    /// Applies an operation made by someone who saw the latest state: it can never conflict.
    static func applyUncontested(_ operation: Value, to state: DocumentState) throws -> DocumentState {
        let result = try ConflictStrategy.serverWins.apply(
            delta(for: operation, base: state.version, view: state, hasPendingChange: false), to: state,
            version: state.version.next)
        #expect(result.conflicts.isEmpty)
        return result.state
    }

    /// The delta for one fixture operation, made on the device's `view` (`hasPendingChange`: with
    /// earlier operations of its own in it).
    static func delta(for operation: Value, base: Version, view: DocumentState, hasPendingChange: Bool) throws -> DocumentDelta {
        guard let fields = operation.mapValue else { throw FixtureError("an operation is not a map") }
        switch fields["op"]?.stringValue {
        case "create":
            return try DocumentDelta.create(fields["data"]?.mapValue ?? [:], base: base)
        case "update":
            func paths<T>(_ key: String, _ transform: (Value) -> T) throws -> [FieldPath: T] {
                var result: [FieldPath: T] = [:]
                for (path, value) in fields[key]?.mapValue ?? [:] { result[try FieldPath(path)] = transform(value) }
                return result
            }
            return try DocumentDelta.update(
                set: paths("set") { $0 },
                remove: (fields["unset"]?.arrayValue ?? []).map { try FieldPath($0.stringValue ?? "") },
                setAdd: paths("add") { $0.arrayValue ?? [] },
                setRemove: paths("remove") { $0.arrayValue ?? [] },
                increments: paths("increment") { $0 },
                base: base)
        case "delete":
            return DocumentDelta.delete(base: base)
        case "setMerge":
            return try DocumentDelta.setMerging(fields["data"]?.mapValue ?? [:], base: base, view: view, hasPendingChange: hasPendingChange)
        default:
            throw FixtureError("unknown op in \(operation)")
        }
    }
}

struct FixtureError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
