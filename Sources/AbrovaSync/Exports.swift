import AbrovaCore
import AbrovaStore

// The value types of the lower modules that apps name, and only those: the rest of AbrovaCore and
// AbrovaStore (the CRDT state, the device store, the codec) stays out of an app's namespace.
@_exported import struct AbrovaCore.Conflict
@_exported import enum AbrovaCore.ConflictStrategy
@_exported import struct AbrovaCore.DocumentKey
@_exported import struct AbrovaCore.FieldPath
@_exported import struct AbrovaCore.Refusal
@_exported import struct AbrovaCore.Timestamp
@_exported import enum AbrovaCore.Value
@_exported import struct AbrovaCore.ValueError
@_exported import enum AbrovaCore.ValueLimits
@_exported import struct AbrovaStore.DocumentQuery
@_exported import struct AbrovaStore.DocumentSnapshot
@_exported import enum AbrovaStore.OperationType
@_exported import struct AbrovaStore.SnapshotMetadata

// The module and its main class share the name AbrovaSync, so in an app `AbrovaSync.X` names a
// member of the class: every type an app uses is one, and `AbrovaSync.Source` still means the
// SDK's where the app has a `Source` of its own.
extension AbrovaSync {
    public typealias Conflict = AbrovaCore.Conflict
    public typealias ConflictStrategy = AbrovaCore.ConflictStrategy
    public typealias DocumentKey = AbrovaCore.DocumentKey
    public typealias FieldPath = AbrovaCore.FieldPath
    public typealias Refusal = AbrovaCore.Refusal
    public typealias Timestamp = AbrovaCore.Timestamp
    public typealias Value = AbrovaCore.Value
    public typealias ValueError = AbrovaCore.ValueError
    public typealias ValueLimits = AbrovaCore.ValueLimits
    public typealias DocumentQuery = AbrovaStore.DocumentQuery
    public typealias DocumentSnapshot = AbrovaStore.DocumentSnapshot
    public typealias OperationType = AbrovaStore.OperationType
    public typealias SnapshotMetadata = AbrovaStore.SnapshotMetadata
    public typealias ConflictResolver = @Sendable (ConflictInfo) async -> ConflictResolution
}
