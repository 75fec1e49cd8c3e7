import AbrovaLocking
import AbrovaSync
import Foundation
import Testing

@testable import AbrovaDemo

/// `abrova demo`'s story, run in-process as the command runs it.
@Suite struct ShoppingCartDemoTests {
    /// The story's printed lines, collected from whichever thread prints them.
    final class Lines: Sendable {
        private let storage = Protected<[String]>([])
        func append(_ line: String) { storage.withLock { $0.append(line) } }
        var all: [String] { storage.withLock { $0 } }
    }

    @Test func theStoryEndsWithOneMergedCartAConflictAndOneRefusal() async throws {
        let lines = Lines()
        // Alone it takes a fraction of a second; beside the rest of the suite on two cores, a step
        // may wait its turn, so each gets longer than the command gives it.
        let summary = try await ShoppingCartDemo.run(output: { lines.append($0) }, waitLimit: .seconds(60))

        // Eggs and apples both added, bread removed by the laptop; Ana's quantities stand,
        // including bread's, which she changed while Ben removed it; each added one milk, offline
        // at the same time, and both count.
        let expected: [String: Value] = ["items": ["apples", "eggs", "milk"], "qty": ["apples": 4, "bread": 3, "eggs": 6, "milk": 3]]
        #expect(summary.phoneCart == expected)
        #expect(summary.laptopCart == expected)
        #expect(summary.serverCart == expected)
        #expect(summary.devicesAgree)

        let outcomes = Dictionary(
            summary.conflicts.map { ($0.conflict.path.dotted, $0.conflict.outcome) }, uniquingKeysWith: { first, _ in first })
        #expect(outcomes == ["items": .merged, "qty.bread": .serverWon])
        #expect(summary.conflicts.allSatisfy { $0.device == "Ben's laptop" && $0.documentId == "household" })

        #expect(summary.rejections.count == 1)
        let rejection = try #require(summary.rejections.first)
        #expect(rejection.device == "Ben's laptop" && rejection.documentId == "freeship")
        #expect(rejection.operation == .create && rejection.statusCode == 403)
        #expect(summary.isRefusedDocumentRolledBack)
        #expect(summary.liveUpdateLatency != nil, "the laptop's listener never showed the phone's live write")
        #expect(summary.movedCart == ["items": ["eggs", "milk"], "qty": ["bread": 3, "eggs": 6, "milk": 4]])
        #expect(summary.savedForLater == ["apples": 4])

        #expect(!FileManager.default.fileExists(atPath: summary.folder), "the demo leaves nothing behind")
        let text = lines.all.joined(separator: "\n")
        #expect(text.contains("CONFLICT on carts/household, field qty.bread"))
        #expect(text.contains("REFUSED: create of freeship (403"))
        #expect(text.contains("Both devices and the server agree."))
        #expect(text.contains("Ben's laptop's listener shows milk 4, "))
        #expect(text.contains("qty.milk = 3: a counter"))
    }

    @Test func everyFieldOfTheCartIsExplained() throws {
        let conflicts = [
            ReportedConflict(
                device: "Ben's laptop", collection: "carts", documentId: "household",
                conflict: Conflict(
                    path: try FieldPath("qty.bread"), serverValue: 3, clientValue: nil,
                    outcome: .serverWon))
        ]
        let lines = ShoppingCartDemo.explanations(
            of: ["items": ["milk"], "qty": ["bread": 3, "eggs": 6, "milk": 3]], conflicts: conflicts, counters: ["qty.milk": "+1 twice"])
        #expect(lines.count == 4)
        #expect(lines[0].hasPrefix("items = [\"milk\"]: no conflict"))
        #expect(lines[1].hasPrefix("qty.bread = 3: Ben's laptop removed it, but the other device had changed it"))
        #expect(lines[2].hasPrefix("qty.eggs = 6: no conflict"))
        #expect(lines[3].hasPrefix("qty.milk = 3: a counter, +1 twice: every increment counts"))
    }
}
