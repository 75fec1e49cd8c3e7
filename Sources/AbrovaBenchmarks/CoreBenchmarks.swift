import AbrovaCore
import AbrovaTestSupport

/// The CRDT core alone: the server join and compose for single-field changes on a 100-field
/// document, and the size of a 1,000-field document's state after many updates.
struct CoreBenchmarks {
    let options: BenchmarkOptions

    func run(into report: inout BenchmarkReport) {
        print("## core")
        if options.runs("core-join") { measureJoin(into: &report) }
        if options.runs("core-compose") { measureCompose(into: &report) }
        if options.runs("core-size") { measureStateSize(into: &report) }
    }

    private var repetitions: Int { options.isQuick ? 3 : 7 }

    private func hundredFieldDocument() -> (DocumentState, [FieldPath]) {
        let names = (0..<100).map { "f\($0)" }
        var data: [String: Value] = [:]
        for (index, name) in names.enumerated() { data[name] = .int(Int64(index)) }
        let paths = names.map { (try? FieldPath($0)) ?? .root }
        var state = DocumentState()
        state.applyLocally((try? DocumentDelta.create(data, base: .zero)) ?? DocumentDelta(), at: Version(1))
        return (state, paths)
    }

    /// The server join against row-level optimistic concurrency over a plain map (the tutorial's
    /// `UPDATE ... WHERE version = $base`), for changes that do not conflict.
    private func measureJoin(into report: inout BenchmarkReport) {
        let (start, paths) = hundredFieldDocument()
        let count = options.isQuick ? 5_000 : 20_000
        let deltas = (0..<count).map { index in
            (try? DocumentDelta.update(
                set: [paths[index % paths.count]: .int(Int64(index))],
                base: Version(start.version.rawValue + UInt64(index)))) ?? DocumentDelta()
        }
        let plainStart = NaiveDocument(fields: start.document?.mapValue ?? [:], version: start.version.rawValue)
        let plainChanges = (0..<count).map { index in
            (paths[index % paths.count].dotted, Value.int(Int64(index)), start.version.rawValue + UInt64(index))
        }
        let rates = compare(
            operations: count, repetitions: repetitions,
            ours: {
                var state = start
                for delta in deltas { _ = try? ConflictStrategy.merge.apply(delta, to: &state, version: state.version.next) }
                blackHole(state)
            },
            baseline: {
                var document = plainStart
                for (field, value, base) in plainChanges { _ = document.update(field, to: value, base: base) }
                blackHole(document)
            })
        report.add(
            BenchmarkRow(
                name: "core: deltas joined at the server (100-field document, one field each)",
                figure: formatRate(rates.ours, "deltas"),
                baseline: formatRate(rates.baseline, "row-versioned map updates"),
                ratio: rates.ours / rates.baseline, goal: "none (reported)", isGoalMet: nil))
    }

    /// Compose into a pending delta against appending to an operation outbox with a JSON payload.
    private func measureCompose(into report: inout BenchmarkReport) {
        let (_, paths) = hundredFieldDocument()
        let count = options.isQuick ? 5_000 : 20_000
        let deltas = (0..<count).map { index in
            (try? DocumentDelta.update(set: [paths[index % paths.count]: .int(Int64(index))], base: Version(1)))
                ?? DocumentDelta()
        }
        let rates = compare(
            operations: count, repetitions: repetitions,
            ours: {
                var pending = DocumentDelta()
                for delta in deltas { pending.compose(with: delta) }
                blackHole(pending)
            },
            baseline: {
                var outbox: [OutboxOperation] = []
                for index in 0..<count {
                    let payload = Value.map([paths[index % paths.count].dotted: .int(Int64(index))]).canonicalJSON
                    outbox.append(OutboxOperation(id: index, field: paths[index % paths.count].dotted, payload: payload, base: 1))
                }
                blackHole(outbox)
            })
        report.add(
            BenchmarkRow(
                name: "core: composes into a pending delta (100-field document, one field each)",
                figure: formatRate(rates.ours, "composes"),
                baseline: formatRate(rates.baseline, "outbox appends"),
                ratio: rates.ours / rates.baseline, goal: "none (reported)", isGoalMet: nil))
    }

    /// The state of a 1,000-field document after random updates, against its plain JSON.
    private func measureStateSize(into report: inout BenchmarkReport) {
        var generator = SplitMix64(seed: 20261129)
        let registers = (0..<990).map { (try? FieldPath("field\($0)")) ?? .root }
        let sets = (0..<10).map { (try? FieldPath("tags\($0)")) ?? .root }
        var data: [String: Value] = [:]
        for path in registers { data[path.dotted] = .int(Int64(generator.next() % 1_000_000)) }
        var state = DocumentState()
        state.applyLocally((try? DocumentDelta.create(data, base: .zero)) ?? DocumentDelta(), at: Version(1))
        let checkpoints = options.isQuick ? [1_000, 10_000] : [1_000, 10_000, 100_000]
        var done = 0
        for checkpoint in checkpoints {
            while done < checkpoint {
                let delta: DocumentDelta?
                if generator.next() % 10 == 0 {
                    let path = sets[Int(generator.next() % UInt64(sets.count))]
                    let element = Value.string("item\(generator.next() % 50)")
                    delta =
                        generator.next() % 3 == 0
                        ? try? DocumentDelta.update(setRemove: [path: [element]], base: state.version)
                        : try? DocumentDelta.update(setAdd: [path: [element]], base: state.version)
                } else {
                    let path = registers[Int(generator.next() % UInt64(registers.count))]
                    delta = try? DocumentDelta.update(set: [path: .int(Int64(generator.next() % 1_000_000))], base: state.version)
                }
                if let delta { _ = try? ConflictStrategy.merge.apply(delta, to: &state, version: state.version.next) }
                done += 1
            }
            let stateBytes = state.encoded.canonicalJSON.utf8.count
            let plainBytes = (state.document ?? .null).canonicalJSON.utf8.count
            let ratio = Double(stateBytes) / Double(plainBytes)
            report.add(
                BenchmarkRow(
                    name: "core: state size of a 1,000-field document after \(checkpoint) updates",
                    figure: "\(stateBytes) bytes", baseline: "\(plainBytes) bytes of plain JSON",
                    ratio: ratio, goal: "≤ 2×", isGoalMet: ratio <= 2))
        }
    }
}

/// The baseline document: a plain map with one version for the whole row.
struct NaiveDocument {
    var fields: [String: Value]
    var version: UInt64

    mutating func update(_ field: String, to value: Value, base: UInt64) -> Bool {
        guard base == version else { return false }
        fields[field] = value
        version += 1
        return true
    }
}

/// The baseline outbox entry: one operation with its JSON payload.
struct OutboxOperation {
    var id: Int
    var field: String
    var payload: String
    var base: UInt64
}
