import AbrovaCore
import AbrovaStore
import Foundation

/// The store's write operations made from the app's calls (`setData`, `updateData`), for a
/// document reference and a `WriteBatch` alike.
enum WriteOperations {
    /// `setData(_:merge:)`: values, `serverTimestamp()` (the device's clock until the server's time
    /// comes) and `increment(_:)` (a counter when merged; the amount itself when the document is
    /// replaced).
    ///
    /// - Throws: `AbrovaSyncError` `.refused` (`invalid`) for the sentinels only `updateData` takes.
    static func set(_ data: [String: any AbrovaSync.FieldValueConvertible], merge: Bool) throws(AbrovaSyncError) -> WriteOperation {
        var values: [String: Value] = [:]
        var stamps: Set<String> = []
        var increments: [String: Value] = [:]
        let now = Timestamp(Date())
        for (name, field) in data {
            switch field.fieldValue.change {
            case .assign(let value): values[name] = value
            case .serverTimestamp:
                values[name] = .timestamp(now)
                stamps.insert(name)
            // Merged, the field counts; replacing the document, it starts from the amount.
            case .increment(let amount) where merge: increments[name] = amount
            case .increment(let amount): values[name] = amount
            case .remove, .setAdd, .setRemove:
                throw AbrovaSyncError(
                    .refused, reason: .invalid,
                    message: "\(name): setData takes values and serverTimestamp(); delete(), arrayUnion and arrayRemove are for updateData")
            }
        }
        return merge
            ? .setMerging(values, serverTimestamps: stamps, increments: increments)
            : .set(values, serverTimestamps: stamps)
    }

    /// `updateData(_:)`: values, removals, set changes, server timestamps and increments by dotted path.
    ///
    /// - Throws: `AbrovaSyncError` `.refused` naming a path that is not one.
    static func update(_ fields: [String: AbrovaSync.FieldValue]) throws(AbrovaSyncError) -> WriteOperation {
        var assignments: [FieldPath: Value] = [:]
        var removals: [FieldPath] = []
        var adds: [FieldPath: [Value]] = [:]
        var removes: [FieldPath: [Value]] = [:]
        var stamps: [FieldPath: Timestamp] = [:]
        var increments: [FieldPath: Value] = [:]
        let now = Timestamp(Date())
        for (dotted, change) in fields {
            let path: FieldPath
            do {
                path = try FieldPath(dotted)
            } catch {
                throw AbrovaSyncError(.refused, reason: error.reason, message: error.description)
            }
            switch change.change {
            case .assign(let value): assignments[path] = value
            case .remove: removals.append(path)
            case .setAdd(let elements): adds[path] = elements
            case .setRemove(let elements): removes[path] = elements
            case .serverTimestamp: stamps[path] = now
            case .increment(let amount): increments[path] = amount
            }
        }
        return .update(
            set: assignments, remove: removals, setAdd: adds, setRemove: removes, serverTimestamps: stamps, increments: increments)
    }
}
