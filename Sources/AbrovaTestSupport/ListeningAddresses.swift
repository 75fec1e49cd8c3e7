import Foundation

#if os(Linux)
    /// The local IPv4 addresses listening on `port`, in hex as /proc/net/tcp writes them
    /// (`0100007F` is 127.0.0.1, `00000000` every interface).
    ///
    /// - Throws: `RawHTTPConnection.Failure` when /proc/net/tcp cannot be read.
    public func listeningAddresses(port: UInt16) throws -> [String] {
        // Read to the end: /proc files report no size, and a busy table is longer than one read.
        guard let file = FileHandle(forReadingAtPath: "/proc/net/tcp") else {
            throw RawHTTPConnection.Failure(description: "no /proc/net/tcp")
        }
        defer { try? file.close() }
        let table = String(decoding: try file.readToEnd() ?? Data(), as: UTF8.self)
        let portSuffix = ":" + String(format: "%04X", port)
        return table.split(separator: "\n").dropFirst().compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count > 3, fields[1].hasSuffix(portSuffix), fields[3] == "0A" else { return nil }
            return String(fields[1].dropLast(portSuffix.count))
        }
    }
#endif
