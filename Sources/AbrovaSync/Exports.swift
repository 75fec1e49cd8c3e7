// The value types of the lower modules that apps name, and only those: the rest of AbrovaCore and
// AbrovaStore (the CRDT state, the device store, the codec) stays out of an app's namespace.

@_exported import struct AbrovaCore.Conflict
@_exported import enum AbrovaCore.ConflictStrategy
@_exported import struct AbrovaCore.DocumentKey
@_exported import struct AbrovaCore.FieldPath
@_exported import struct AbrovaCore.Refusal
@_exported import enum AbrovaCore.Value
@_exported import struct AbrovaCore.ValueError
@_exported import enum AbrovaCore.ValueLimits
@_exported import struct AbrovaStore.DocumentQuery
@_exported import struct AbrovaStore.DocumentSnapshot
@_exported import enum AbrovaStore.OperationType
@_exported import struct AbrovaStore.SnapshotMetadata
