// Against libzstd: only where the build links it (the SystemZstd trait, on Linux).
#if ABROVA_SYSTEM_ZSTD
    import Testing
    import AbrovaTestSupport
    @testable import AbrovaZstd

    /// Damaged libzstd frames: our decoder must never crash, and must accept
    /// exactly what libzstd accepts, with the same output.
    struct DamagedFrameTests {
        static func damage(_ frame: [UInt8], _ rng: inout SeededRandom) -> [UInt8] {
            var f = frame
            for _ in 0..<(1 + Int(rng.next() % 3)) {
                switch rng.next() % 6 {
                case 0, 1:
                    guard !f.isEmpty else { continue }
                    f[Int(rng.next() % UInt64(f.count))] ^= UInt8(1) << UInt8(rng.next() % 8)
                case 2:
                    guard !f.isEmpty else { continue }
                    f[Int(rng.next() % UInt64(f.count))] = UInt8(truncatingIfNeeded: rng.next())
                case 3:
                    f = Array(f.prefix(Int(rng.next() % UInt64(f.count + 1))))
                case 4:
                    let at = Int(rng.next() % UInt64(f.count + 1))
                    f.insert(contentsOf: (0..<(1 + Int(rng.next() % 4))).map { _ in UInt8(truncatingIfNeeded: rng.next()) }, at: at)
                default:
                    guard !f.isEmpty else { continue }
                    let at = Int(rng.next() % UInt64(f.count))
                    f.removeSubrange(at..<min(f.count, at + 1 + Int(rng.next() % 4)))
                }
            }
            return f
        }

        static func isKnownStricterThanLibzstd(_ error: PureZstdError, input: [UInt8]) -> Bool {
            KnownZstdDifferences.isStricterThanLibzstd(refusing: error.message, input: input)
        }

        @Test func damagedFramesAgreeWithLibzstd() async {
            let seed = TestSeed.make("damagedFramesAgreeWithLibzstd")
            var rng = SeededRandom(seed: seed)
            var disagreements: [String] = []
            var accepted = 0
            var refused = 0
            for i in 0..<3000 {
                await Task.yield() // a long test shares the cooperative threads with the rest
                let (name, input) = Corpus.sample(&rng, maxSize: 40_000)
                let level: Int32 = [-5, 1, 3, 9, 19][Int(rng.next() % 5)]
                let frame: [UInt8]
                switch rng.next() % 3 {
                case 0: frame = LibZstd.compress(input, level: level, checksum: false)
                case 1: frame = LibZstd.compressStreaming(input, level: level, checksum: rng.next() % 2 == 0, chunk: 3000)
                default: frame = LibZstd.compress(input, level: level, checksum: true, contentSize: rng.next() % 2 == 0)
                }
                let damaged = Self.damage(frame, &rng)
                let capacity = input.count + 4096
                let theirs = LibZstd.decompress(damaged, capacity: capacity)
                var oursError: PureZstdError?
                var ours: [UInt8]?
                do throws(PureZstdError) {
                    ours = try PureZstd.decompress(damaged, limit: capacity, maximumWindowLog: 31)
                } catch {
                    oursError = error
                }
                switch (ours as [UInt8]?, theirs as [UInt8]?) {
                case let (o?, t?):
                    accepted += 1
                    if o != t { disagreements.append("#\(i) \(name) level \(level): both accept, outputs differ") }
                case (nil, nil):
                    refused += 1
                case (nil, _?):
                    if let e = oursError, Self.isKnownStricterThanLibzstd(e, input: damaged) { continue }
                    disagreements.append(
                        "#\(i) \(name) level \(level): libzstd accepts, we refuse: \(oursError.map(String.init(describing:)) ?? "?")")
                case (_?, nil):
                    disagreements.append(
                        "#\(i) \(name) level \(level): we accept, libzstd refuses: \(LibZstd.errorName(damaged, capacity: capacity))")
                }
            }
            print("damaged frames: \(accepted) accepted by both, \(refused) refused by both, \(disagreements.count) disagreements")
            for d in disagreements.prefix(20) { print(d) }
            #expect(disagreements.isEmpty, "seed \(seed)")
        }

        /// Random bytes behind a zstd magic number and a plausible header: reaches
        /// table descriptions and block types that damaged real frames rarely do.
        @Test func randomBodiesAgreeWithLibzstd() async {
            let seed = TestSeed.make("randomBodiesAgreeWithLibzstd")
            var rng = SeededRandom(seed: seed)
            var disagreements: [String] = []
            for i in 0..<30_000 {
                await Task.yield() // a long test shares the cooperative threads with the rest
                var body: [UInt8] = [0x28, 0xB5, 0x2F, 0xFD]
                // Single segment, content size flag random, checksum random, no dictionary.
                let descriptor = UInt8(truncatingIfNeeded: rng.next()) & 0xC4 | 0x20
                body.append(descriptor)
                body += Corpus.random([1, 2, 4, 8][Int(descriptor >> 6)], &rng)
                // A compressed block of random content, sometimes after a raw block.
                let size = Int(rng.next() % 200)
                if rng.next() % 4 == 0 { body += [0x50, 0x00, 0x00] + Corpus.random(10, &rng) }
                let header = 1 | 2 << 1 | size << 3
                body += [
                    UInt8(truncatingIfNeeded: header), UInt8(truncatingIfNeeded: header >> 8), UInt8(truncatingIfNeeded: header >> 16),
                ]
                body += Corpus.random(size + Int(rng.next() % 6), &rng)
                let capacity = 1 << 12
                let theirs = LibZstd.decompress(body, capacity: capacity)
                var ours: [UInt8]?
                var oursError: PureZstdError?
                do throws(PureZstdError) {
                    ours = try PureZstd.decompress(body, limit: capacity, maximumWindowLog: 31)
                } catch {
                    oursError = error
                }
                switch (ours as [UInt8]?, theirs as [UInt8]?) {
                case let (o?, t?):
                    if o != t { disagreements.append("#\(i): both accept, outputs differ") }
                case (nil, _?):
                    if let e = oursError, Self.isKnownStricterThanLibzstd(e, input: body) { continue }
                    disagreements.append("#\(i): libzstd accepts, we refuse: \(oursError.map(String.init(describing:)) ?? "?")")
                case (_?, nil):
                    disagreements.append("#\(i): we accept, libzstd refuses: \(LibZstd.errorName(body, capacity: capacity))")
                case (nil, nil):
                    break
                }
            }
            for d in disagreements.prefix(20) { print(d) }
            #expect(disagreements.isEmpty, "seed \(seed)")
        }
    }
#endif
