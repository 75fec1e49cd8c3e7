/// Small random edits of JSON bytes, for differential tests of two readers: the edits hit the
/// characters a JSON reader decides on, so the mutants land near the edge of well-formed input.
public enum JSONMutation {
    /// `bytes` with one to three random edits: a byte replaced by a JSON-significant one, removed
    /// or repeated.
    public static func mutated(_ bytes: [UInt8], _ choices: inout Choices) -> [UInt8] {
        var result = bytes
        let significant = Array(#"{}[],:"\-0129e.ftnaux "#.utf8)
        for _ in 0..<choices.int(in: 1...3) where !result.isEmpty {
            let index = choices.below(result.count)
            switch choices.below(3) {
            case 0: result[index] = choices.element(of: significant)
            case 1: result.remove(at: index)
            default: result.insert(result[index], at: index)
            }
        }
        return result
    }
}
