// abrova-store-writer: writes to a device store as fast as it can and prints the index of every
// write whose call returned. The kill test sends it SIGKILL at random moments and then checks that
// every printed write is in the store, whole.
//
//     abrova-store-writer <store path> <first index>

import AbrovaCore
import AbrovaStore
import Foundation

let arguments = CommandLine.arguments
guard arguments.count == 3, let first = Int(arguments[2]) else {
    FileHandle.standardError.write(Data("usage: abrova-store-writer <store path> <first index>\n".utf8))
    exit(2)
}

let store: LocalStore
do {
    store = try LocalStore(path: arguments[1])
} catch {
    FileHandle.standardError.write(Data("cannot open the store: \(error)\n".utf8))
    exit(1)
}
var index = first
while true {
    do {
        // Two fields that must always agree, and a second document touched in the same write run.
        try await store.setData(
            ["a": .int(Int64(index)), "b": .int(Int64(index))],
            for: DocumentKey(collection: "kill", id: "k\(index)"))
    } catch {
        FileHandle.standardError.write(Data("write \(index) failed: \(error)\n".utf8))
        exit(1)
    }
    // Unbuffered: the line is out before the next write starts.
    FileHandle.standardOutput.write(Data("\(index)\n".utf8))
    index += 1
}
