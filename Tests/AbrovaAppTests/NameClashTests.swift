import AbrovaSync
import Testing

// An app's own types with the names of the SDK's: the app's win unqualified, and `AbrovaSync.X`
// still names the SDK's (the module and its main class share the name, so it names the class's).
enum Source { case mine }
struct Value { var mine = true }
enum SyncState { case mine }
struct DocumentSnapshot { var mine = true }
enum FieldValue { case mine }

@Suite struct NameClashTests {
    @Test func theSDKsTypesAreNamedThroughTheClassWhereAnAppHasItsOwn() {
        let source: AbrovaSync.Source = .cache
        let value: AbrovaSync.Value = ["qty": 2]
        let state: AbrovaSync.SyncState = .idle
        let change: AbrovaSync.FieldValue = .arrayUnion(["milk"])
        let strategy: AbrovaSync.ConflictStrategy = .merge
        let snapshots: [AbrovaSync.DocumentSnapshot] = []
        #expect("\(source) \(state) \(strategy)" == "cache idle merge")
        #expect(value.mapValue?["qty"] == 2 && change != .value(.null) && snapshots.isEmpty)
        #expect(Source.mine == .mine && Value().mine && SyncState.mine == .mine && DocumentSnapshot().mine && FieldValue.mine == .mine)
    }
}
