import AbrovaTestSupport

/// Where the mutator's random numbers come from: a seeded stream in `abrova-fuzz`, the property
/// harness's recorded choices in the tests (so that a failing case shrinks and replays).
public protocol FuzzRandomness {
    /// The next raw number.
    mutating func next() -> UInt64
}

extension SplitMix64: FuzzRandomness {}
extension Choices: FuzzRandomness {}

extension FuzzRandomness {
    /// A number in `0..<bound`; a raw 0 gives 0, which the mutator reads as its simplest choice.
    mutating func draw(below bound: Int) -> Int {
        precondition(bound > 0, "bound must be positive")
        return Int(next() % UInt64(bound))
    }

    /// An element of a non-empty array.
    mutating func pick<Element>(_ elements: [Element]) -> Element {
        elements[draw(below: elements.count)]
    }
}

/// Makes fuzz inputs from a corpus: the byte edits any fuzzer makes (bit flips, bytes inserted,
/// deleted and replaced, truncation, splicing two inputs, duplicated spans) and edits aimed at
/// this project's decoders: numbers at the edges of their types, nesting past the depth limits,
/// long strings, broken UTF-8 and escapes, and the words of the input's grammar.
///
///     let mutator = Mutator(corpus: target.seeds, dictionary: target.dictionary)
///     var random = SplitMix64(seed: 42)
///     let input = mutator.input(using: &random)
public struct Mutator: Sendable {
    /// The inputs mutations start from and splice in; never empty.
    public var corpus: [[UInt8]]
    /// Words worth inserting: the keys and values the target's grammar knows.
    public var dictionary: [[UInt8]]
    /// The longest input made; longer results are cut.
    public var maximumSize: Int

    /// A mutator over `corpus` (an empty corpus is read as one empty input).
    public init(corpus: [[UInt8]], dictionary: [[UInt8]] = [], maximumSize: Int = 1 << 21) {
        self.corpus = corpus.isEmpty ? [[]] : corpus
        self.dictionary = dictionary.isEmpty ? [[]] : dictionary
        self.maximumSize = maximumSize
    }

    /// A corpus input with one to four mutations.
    public func input(using random: inout some FuzzRandomness) -> [UInt8] {
        mutated(random.pick(corpus), using: &random)
    }

    /// `input` with one to four mutations (more are rarely better: the result drifts from the
    /// grammar and is refused at its first byte).
    public func mutated(_ input: [UInt8], using random: inout some FuzzRandomness) -> [UInt8] {
        var bytes = input
        for _ in 0...random.draw(below: 4) {
            apply(random.pick(Mutation.allCases), to: &bytes, using: &random)
            if bytes.count > maximumSize { bytes.removeSubrange(maximumSize...) }
        }
        return bytes
    }

    /// The mutations, simplest first.
    enum Mutation: CaseIterable {
        case replaceByte, flipBit, insertBytes, deleteSpan, truncate, splice, duplicateSpan
        case interestingNumber, deepNesting, longString, invalidUTF8, dictionaryWord, replaceString
    }

    private func apply(_ mutation: Mutation, to bytes: inout [UInt8], using random: inout some FuzzRandomness) {
        let position = random.draw(below: bytes.count + 1)
        switch mutation {
        case .replaceByte:
            guard position < bytes.count else { bytes.append(random.pick(Self.interestingBytes)); return }
            bytes[position] = random.draw(below: 2) == 0 ? random.pick(Self.interestingBytes) : UInt8(truncatingIfNeeded: random.next())
        case .flipBit:
            guard position < bytes.count else { bytes.append(UInt8(truncatingIfNeeded: random.next())); return }
            bytes[position] ^= 1 << random.draw(below: 8)
        case .insertBytes:
            let inserted: [UInt8]
            if random.draw(below: 2) == 0 {
                inserted = (0...random.draw(below: 8)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            } else {
                inserted = Array(repeating: random.pick(Self.interestingBytes), count: 1 + random.draw(below: 256))
            }
            bytes.insert(contentsOf: inserted, at: position)
        case .deleteSpan:
            guard position < bytes.count else { return }
            bytes.removeSubrange(position..<position + 1 + random.draw(below: min(64, bytes.count - position)))
        case .truncate:
            bytes.removeSubrange(min(position, bytes.count)...)
        case .splice:
            let other = random.pick(corpus)
            let start = random.draw(below: other.count + 1)
            bytes = Array(bytes[..<position]) + other[start...]
        case .duplicateSpan:
            guard position < bytes.count else { return }
            let span = Array(bytes[position..<position + 1 + random.draw(below: min(256, bytes.count - position))])
            let times = random.pick([1, 2, 3, 16, 1_000])
            let target = random.draw(below: bytes.count + 1)
            bytes.insert(contentsOf: repeated(span, toLength: min(span.count * times, maximumSize)), at: target)
        case .interestingNumber:
            let number = Array(random.pick(Self.interestingNumbers).utf8)
            if let digits = digitRun(in: bytes, near: position) {
                bytes.replaceSubrange(digits, with: number)
            } else {
                bytes.insert(contentsOf: number, at: position)
            }
        case .deepNesting:
            let depth = random.pick([31, 32, 33, 39, 40, 41, 64, 1_000, 100_000])
            let (open, close) = random.pick([("[", "]"), (#"{"a":"#, "}"), (#"{"f":{"a":"#, "}}")])
            let closing = random.draw(below: 2) == 0 ? [] : Array(String(repeating: close, count: depth).utf8)
            let end = position + random.draw(below: bytes.count - position + 1)
            bytes.insert(contentsOf: closing, at: end)
            bytes.insert(contentsOf: Array(String(repeating: open, count: depth).utf8), at: position)
        case .longString:
            // Past the 1 MiB document limit only now and then: such inputs cost a hundred small ones.
            let length = random.draw(below: 16) == 15 ? (1 << 20) + 1 : random.pick([255, 256, 4_096, 65_536])
            let unit = Array(random.pick(["a", "é", "\\u0041", "\\\"", ".", "😀", "%41"]).utf8)
            let content = repeated(unit, toLength: min(length / unit.count * unit.count, maximumSize))
            if let string = stringContent(in: bytes, choosing: &random) {
                bytes.replaceSubrange(string, with: content)
            } else {
                bytes.insert(contentsOf: [UInt8(ascii: "\"")] + content + [UInt8(ascii: "\"")], at: position)
            }
        case .invalidUTF8:
            bytes.insert(contentsOf: random.pick(Self.brokenText), at: position)
        case .dictionaryWord:
            bytes.insert(contentsOf: random.pick(dictionary), at: position)
        case .replaceString:
            let word = random.pick(dictionary).filter { $0 != UInt8(ascii: "\"") }
            if let string = stringContent(in: bytes, choosing: &random) {
                bytes.replaceSubrange(string, with: word)
            } else {
                bytes.insert(contentsOf: word, at: position)
            }
        }
    }

    /// `unit` repeated to `length` bytes (the last copy cut), by doubling: a megabyte of it
    /// costs twenty copies, not a million appends.
    private func repeated(_ unit: [UInt8], toLength length: Int) -> [UInt8] {
        guard !unit.isEmpty, length > 0 else { return [] }
        var result = unit
        result.reserveCapacity(length)
        while result.count < length { result.append(contentsOf: result.prefix(length - result.count)) }
        return result
    }

    /// The run of ASCII digits (with a leading `-`) at or after `position`, else the first one.
    private func digitRun(in bytes: [UInt8], near position: Int) -> Range<Int>? {
        func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
        let start = bytes[position...].firstIndex(where: isDigit) ?? bytes.firstIndex(where: isDigit)
        guard var start else { return nil }
        var end = start
        while end < bytes.count, isDigit(bytes[end]) { end += 1 }
        if start > 0, bytes[start - 1] == UInt8(ascii: "-") { start -= 1 }
        return start..<end
    }

    /// The content of one of the first 64 quoted strings (between its quotes, escapes ignored).
    private func stringContent(in bytes: [UInt8], choosing random: inout some FuzzRandomness) -> Range<Int>? {
        var quotes: [Int] = []
        for index in bytes.indices where bytes[index] == UInt8(ascii: "\"") {
            quotes.append(index)
            if quotes.count == 128 { break }
        }
        guard quotes.count >= 2 else { return nil }
        let pair = random.draw(below: quotes.count / 2)
        return quotes[2 * pair] + 1..<quotes[2 * pair + 1]
    }

    /// Bytes that matter to JSON, HTTP and the names' rules.
    static let interestingBytes: [UInt8] = Array(#"0"\{}[],:-9e.E+ %?&=/;'`"#.utf8) + [0x00, 0x0A, 0x0D, 0x09, 0x7F, 0x80, 0xC0, 0xFF]

    /// Numbers at the edges: of Int64, UInt64, Int32, a double's exact integers (2^53), and the
    /// forms JSON refuses.
    static let interestingNumbers = [
        "0", "-0", "1", "-1", "00", "01", "2147483647", "2147483648", "4294967296",
        "9007199254740992", "9007199254740993", "-9007199254740993",
        "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
        "18446744073709551615", "18446744073709551616", "99999999999999999999999999999",
        "1e308", "1e309", "-1e400", "1e-400", "0.1", "1.0", "1.5e3", "1E+2", "-0.0", "1.", ".5", "+1", "0x10",
        "NaN", "Infinity", "-Infinity",
    ]

    /// Text that is not valid UTF-8, or escapes JSON refuses or that decode to strange scalars.
    static let brokenText: [[UInt8]] = [
        [0xFF], [0x80], [0xC0, 0x80], [0xC3], [0xE2, 0x82], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80],
        [0xF8, 0x88, 0x80, 0x80, 0x80], [0xEF, 0xBB, 0xBF], [0x00],
        Array(#"\ud800"#.utf8), Array(#"\udc00"#.utf8), Array(#"\ud800\u0041"#.utf8), Array(#"\u0000"#.utf8),
        Array(#"\uZZZZ"#.utf8), Array(#"\"#.utf8), Array(#"\x41"#.utf8), Array("e\u{301}".utf8), Array("\u{37E}".utf8),
        Array("\u{202E}".utf8), Array("\u{FEFF}".utf8),
    ]
}
