#if LIBFUZZER
    import AbrovaFuzzing
    import CLibFuzzer
    import Foundation

    // abrova-fuzz built with `-Xswiftc -sanitize=fuzzer -Xswiftc -DLIBFUZZER` (Docs/TESTING.md, "Fuzzing"):
    // a libFuzzer binary for the target named by ABROVA_FUZZ_TARGET. Its arguments are libFuzzer's
    // (corpus folders, -max_total_time=60, -dict=...).

    /// The target ABROVA_FUZZ_TARGET names, made once, before libFuzzer starts.
    let libFuzzerTarget: any FuzzTarget = {
        let name = ProcessInfo.processInfo.environment["ABROVA_FUZZ_TARGET"] ?? ""
        do {
            return try FuzzTargets.make(name)
        } catch {
            FileHandle.standardError.write(
                Data("abrova-fuzz: set ABROVA_FUZZ_TARGET to one of \(FuzzTargets.names.joined(separator: ", ")): \(error)\n".utf8))
            exit(2)
        }
    }()

    /// libFuzzer's callback. A finding saves its input (the Swift runtime's backtracer may stop the
    /// process before libFuzzer writes its crash file) and aborts, which libFuzzer reports as a crash.
    @_cdecl("LLVMFuzzerTestOneInput")
    public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
        let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
        guard let problem = libFuzzerTarget.check(input) else { return 0 }
        let finding = FuzzFinding(target: libFuzzerTarget.name, message: problem, input: input)
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325 // FNV-1a: a stable name for the same input
        for byte in input { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01B3 }
        let path = "finding-\(finding.target)-\(String(hash, radix: 16))"
        let saved = FileManager.default.createFile(atPath: path, contents: Data(input))
        FileHandle.standardError.write(
            Data("\nabrova-fuzz FINDING \(finding)\n\(saved ? "input saved to \(path)" : "the input could not be saved")\n".utf8))
        abort()
    }

    /// The entry point: SwiftPM links `main` to `<module>_main` for an executable written in Swift,
    /// so libFuzzer's own main is not used and its driver is called from here.
    @_cdecl("AbrovaFuzz_main")
    func libFuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
        _ = libFuzzerTarget
        // libFuzzer ends with exit(), which never releases the target: its store is removed here.
        atexit { libFuzzerTarget.removeFiles() }
        var count = argc
        var arguments = argv
        return LLVMFuzzerRunDriver(&count, &arguments, fuzzOneInput)
    }
#endif
