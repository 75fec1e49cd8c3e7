#if ABROVA_SYSTEM_ZSTD
    import AbrovaTestSupport
    import AbrovaWire
    import AbrovaZstd

    /// The pure-Swift zstd codec against libzstd: the input decoded by both, and compressed by
    /// each for the other to decode. Only where the build links libzstd (the SystemZstd trait).
    ///
    /// Oracle: both accept with the same output, or both refuse, or only libzstd accepts and the
    /// pure decoder's refusal is one `KnownZstdDifferences` lists; the pure decoder never accepts
    /// what libzstd refuses. The input compressed by either codec decodes to itself with the other.
    public struct PureZstdTarget: FuzzTarget {
        public let name = "zstd-pure"
        public let seeds: [[UInt8]]
        public let dictionary: [[UInt8]]
        let limit = 1 << 20
        let maximumWindowLog = 20

        /// Seeded as the `zstd` target is, with frames of the pure encoder besides.
        public init(fixtures: WireCorpus) {
            let zstd = ZstdTarget(fixtures: fixtures)
            let bodies = Array((fixtures.pushBodies + fixtures.answerBodies).prefix(12)) + BuiltSeeds.pushBodies
            seeds = zstd.seeds + bodies.enumerated().map { PureZstd.compress($1, level: [1, 3, 9][$0 % 3]) }
            dictionary = zstd.dictionary
        }

        public func check(_ input: [UInt8]) -> String? {
            let system = Result { () throws(ZstdError) in try Zstd.decompress(input, limit: limit, maximumWindowLog: maximumWindowLog) }
            let pure = Result { () throws(PureZstdError) in
                try PureZstd.decompress(input, limit: limit, maximumWindowLog: maximumWindowLog)
            }
            switch (system, pure) {
            case (.success(let expected), .success(let output)) where output != expected:
                return "the decoders disagree: libzstd gave \(expected.count) bytes, the pure decoder \(output.count) other bytes"
            case (.failure(let error), .success):
                return "the pure decoder accepted what libzstd refused (\(error))"
            case (.success, .failure(let error)) where !KnownZstdDifferences.isStricterThanLibzstd(refusing: error.message, input: input):
                return "the pure decoder refused what libzstd accepted: \(error)"
            default:
                break
            }
            if case .success(let output) = system, let problem = crossProblem(output, what: "the decompressed output") { return problem }
            return crossProblem(input, what: "the input")
        }

        /// Whether `bytes` compressed by each codec decodes to itself with the other.
        private func crossProblem(_ bytes: [UInt8], what: String) -> String? {
            let ours = PureZstd.compress(bytes, level: 1)
            guard (try? Zstd.decompress(ours, limit: bytes.count, maximumWindowLog: 23)) == bytes else {
                return "\(what) (\(bytes.count) bytes) compressed by the pure encoder did not decode to itself with libzstd"
            }
            guard let theirs = try? Zstd.compress(bytes, level: 1),
                (try? PureZstd.decompress(theirs, limit: bytes.count, maximumWindowLog: 23)) == bytes
            else {
                return "\(what) (\(bytes.count) bytes) compressed by libzstd did not decode to itself with the pure decoder"
            }
            return nil
        }
    }
#endif
