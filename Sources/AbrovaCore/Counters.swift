// Counters: a field incremented with `FieldValue.increment(n)`. The server applies every change
// exactly once (a batch is answered from its record when it comes again), so a counter needs no
// per-device state: an increment is an operation the server applies to the number it holds, in
// its order, and never a conflict. A plain read shows the counter as the number it is.
// See Spec/conflicts.md, "Counters".

extension DocumentDelta {
    /// An increment of the number at a path by `amount` (an `.int` or a `.double`).
    public struct Increment: Hashable, Sendable {
        /// What is added: `.int` or `.double`.
        public var amount: Value
        /// The document version the client had seen when it first touched this path; it decides
        /// only whether the document was deleted since (an increment never conflicts with a field).
        public var base: Version

        /// An increment of `amount` based on `base`.
        public init(amount: Value, base: Version) {
            self.amount = amount
            self.base = base
        }

        /// Checks that `amount` is a number an increment may add.
        static func validate(_ amount: Value, at path: FieldPath) throws(ValueError) {
            switch amount {
            case .int: return
            case .double: try amount.validate(at: path, depth: path.depth) // refuses NaN and infinities
            default: throw notANumberError(at: path)
            }
        }

        /// Why an increment whose amount is not a number is refused.
        static func notANumberError(at path: FieldPath) -> ValueError {
            ValueError(.malformedJSON, field: path.dotted, detail: "an increment adds an integer or a double")
        }
    }

    /// Whether `later` may be folded into this change (`compose(with:)`) without changing what
    /// the server counts. Composed, a write that overwrites a counter (an assignment, a removal of
    /// it or of a map holding it, a create, a delete) would take this change's increment with it
    /// even where the server refuses the write for a conflict, while the increment alone would
    /// have counted: such a write starts a change of its own. Increments compose with anything.
    public func canCompose(with later: DocumentDelta) -> Bool {
        guard !increments.isEmpty else { return true }
        if later.create != nil || later.createIfMissing != nil || later.delete != nil { return false }
        func overwritesACounter(_ paths: some Sequence<FieldPath>) -> Bool {
            paths.contains { written in increments.keys.contains { $0.overlaps(written) } }
        }
        if overwritesACounter(later.removals.keys) || overwritesACounter(later.fieldRemovals.keys)
            || overwritesACounter(later.assignments.keys) || overwritesACounter(later.setChanges.keys)
        {
            return false
        }
        return !later.increments.contains { path, increment in
            increments[path].map { Value.addingOverflows(increment.amount, to: $0.amount) } ?? false
        }
    }

    /// This change without its increments.
    public var withoutIncrements: DocumentDelta {
        guard !increments.isEmpty else { return self }
        var result = self
        result.increments = [:]
        result.notePathDepths()
        return result
    }

    /// Adds increments to the change (`updateData`'s `FieldValue.increment`), after its other parts.
    ///
    /// - Throws: `ValueError` naming the path when an amount is not a finite number or the path
    ///   is the root.
    public mutating func increment(_ amounts: [FieldPath: Value], base: Version) throws(ValueError) {
        for (path, amount) in amounts.sorted(by: { $0.key < $1.key }) {
            try path.checkNotRoot()
            try Increment.validate(amount, at: path)
            compose(with: DocumentDelta(increments: [path: Increment(amount: amount, base: base)]))
        }
    }
}

extension Value {
    /// `current` with `amount` added, as a counter does: two integers add as integers, clamped to
    /// `Int64`'s range rather than wrapping; a double on either side makes a double (clamped to
    /// the finite doubles); a field that holds no number (or nothing) takes `amount` itself.
    public static func adding(_ amount: Value, to current: Value?) -> Value {
        switch (current, amount) {
        case (.int(let held)?, .int(let added)):
            let (sum, overflow) = held.addingReportingOverflow(added)
            return overflow ? .int(added > 0 ? .max : .min) : .int(sum)
        case (.int(let held)?, .double(let added)): return finite(Double(held) + added)
        case (.double(let held)?, .int(let added)): return finite(held + Double(added))
        case (.double(let held)?, .double(let added)): return finite(held + added)
        default: return amount
        }
    }

    /// A double sum, kept finite (a document holds no infinity).
    private static func finite(_ sum: Double) -> Value {
        .double(sum.isFinite ? sum : sum > 0 ? .greatestFiniteMagnitude : -.greatestFiniteMagnitude)
    }

    /// Whether adding two integer amounts leaves `Int64`'s range (composed, they would clamp
    /// where applied one by one they might not).
    static func addingOverflows(_ amount: Value, to other: Value) -> Bool {
        guard case .int(let first) = amount, case .int(let second) = other else { return false }
        return first.addingReportingOverflow(second).overflow
    }
}

extension DocumentState {
    /// Adds `amount` to the number at `path` (see `Value.adding(_:to:)`), written at `version`,
    /// replacing whatever else stands there as an assignment does.
    mutating func increment(_ path: FieldPath, by amount: Value, at version: Version) {
        var current: Value?
        if case .register(let register)? = fields[path] { current = register.value }
        assign(Value.adding(amount, to: current), at: path, version: version)
    }
}
