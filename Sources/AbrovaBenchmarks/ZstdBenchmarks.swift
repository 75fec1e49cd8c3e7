#if ABROVA_SYSTEM_ZSTD
    import AbrovaCore
    import AbrovaWire
    import AbrovaZstd

    /// The pure-Swift zstd codec (what Apple builds use) against libzstd (what Linux builds use)
    /// on 1 MiB of sync JSON, at the wire's level 3: size, and compress and decompress speed.
    struct ZstdBenchmarks {
        let options: BenchmarkOptions

        func run(into report: inout BenchmarkReport) {
            guard options.runs("zstd-pure") else { return }
            print("## zstd")
            let body = Self.syncJSON(byteCount: options.isQuick ? 256 << 10 : 1 << 20)
            let repetitions = options.isQuick ? 3 : 7
            let ours = PureZstd.compress(body, level: 3)
            let theirs = (try? Zstd.compress(body, level: 3)) ?? []
            let sizeRatio = Double(ours.count) / Double(max(theirs.count, 1))
            report.add(
                BenchmarkRow(
                    name: "zstd-pure size (1 MiB of sync JSON, level 3)", figure: "\(ours.count) B",
                    baseline: "\(theirs.count) B (libzstd)", ratio: sizeRatio, goal: "≤ 1.15×", isGoalMet: sizeRatio <= 1.15))
            let compress = compare(
                operations: body.count, repetitions: repetitions,
                ours: { blackHole(PureZstd.compress(body, level: 3)) },
                baseline: { blackHole(try? Zstd.compress(body, level: 3)) })
            report.add(
                BenchmarkRow(
                    name: "zstd-pure compress (level 3)", figure: Self.megabytes(compress.ours),
                    baseline: Self.megabytes(compress.baseline) + " (libzstd)", ratio: compress.ours / compress.baseline, goal: "-",
                    isGoalMet: nil))
            let decompress = compare(
                operations: body.count, repetitions: repetitions,
                ours: { blackHole(try? PureZstd.decompress(theirs, limit: body.count)) },
                baseline: { blackHole(try? Zstd.decompress(theirs, limit: body.count)) })
            report.add(
                BenchmarkRow(
                    name: "zstd-pure decompress (libzstd's frame)", figure: Self.megabytes(decompress.ours),
                    baseline: Self.megabytes(decompress.baseline) + " (libzstd)", ratio: decompress.ours / decompress.baseline,
                    goal: "-", isGoalMet: nil))
        }

        static func megabytes(_ bytesPerSecond: Double) -> String {
            String(format: "%.0f MB/s", bytesPerSecond / 1e6)
        }

        /// A pull answer's worth of documents, as JSON.
        static func syncJSON(byteCount: Int) -> [UInt8] {
            var bytes: [UInt8] = Array(#"{"documents":["#.utf8)
            var index = 0
            while bytes.count < byteCount {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                bytes += Array(Value.map(ServerBenchmarks.document(index)).canonicalJSON.utf8)
                index += 1
            }
            return bytes + Array(#"],"hasMore":false}"#.utf8)
        }
    }
#endif
