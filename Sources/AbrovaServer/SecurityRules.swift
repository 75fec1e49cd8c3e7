import AbrovaCore
import AbrovaWire

/// A document as the server keeps it: its state, the version of its last change and its owner
/// (the user who created it). Version and owner are the server's: no client can set them.
public struct StoredDocument: Hashable, Sendable {
    /// Which document.
    public var key: DocumentKey
    /// The user who created it.
    public var owner: String
    /// The version of its last change.
    public var version: Version
    /// Its state; a deleted document keeps its fields (an edit that wins over the delete brings
    /// them back) and says it does not exist.
    public var state: DocumentState

    /// A stored document.
    public init(key: DocumentKey, owner: String, version: Version, state: DocumentState) {
        self.key = key
        self.owner = owner
        self.version = version
        self.state = state
    }

    /// The document's data, `nil` when it is deleted.
    public var data: Value? { state.document }

    /// The form the wire carries.
    public var serverDocument: ServerDocument { ServerDocument(key: key, version: version, state: state) }
}

/// The rules of one collection, checked on every push, pull and read; a pull never shows a
/// document whose read is refused, not even its id.
public protocol SecurityRules: Sendable {
    /// Whether `caller` may see `document` (which may be a tombstone).
    func allowsRead(_ document: StoredDocument, by caller: Caller) -> Bool
    /// Whether `caller` may see the document of `key` owned by `owner`, whatever it holds: `nil`
    /// when that depends on what it holds, and `allowsRead(_:by:)` decides on the document read.
    /// Rules that answer here let a pull send a document's state as stored, without reading it;
    /// the answer must be the one `allowsRead(_:by:)` gives.
    func allowsRead(_ key: DocumentKey, ownedBy owner: String, by caller: Caller) -> Bool?
    /// Whether `caller` may change `before` (`nil`: the document is new) into `after`.
    func allowsWrite(before: StoredDocument?, after: StoredDocument, by caller: Caller) -> Bool
    /// Why `caller` may not write to `key` whatever the document holds, or `nil`: judged on the
    /// key alone, before the document is read, so the refusal tells nothing of it.
    func refusal(ofWritesTo key: DocumentKey, by caller: Caller) -> String?
    /// Checks the document a write leaves (deleted documents included).
    ///
    /// - Throws: `Refusal` `.invalid` saying what is wrong.
    func validate(_ document: StoredDocument) throws(Refusal)
    /// Names what `allowsRead` allows; it must change whenever that does. Pull cursors carry a tag
    /// of it, so that after a change every device pulls again and drops what it may no longer
    /// read. Rules whose reads never change may keep the default.
    var readRevision: String { get }
}

extension SecurityRules {
    public var readRevision: String { "" }
    public func allowsRead(_ key: DocumentKey, ownedBy owner: String, by caller: Caller) -> Bool? { nil }
    public func refusal(ofWritesTo key: DocumentKey, by caller: Caller) -> String? { nil }
}

/// Rules made without code, from three choices: who reads, who writes, which fields must exist.
public struct PresetRules: SecurityRules, Hashable {
    /// Who may read.
    public enum ReadAccess: String, Hashable, Sendable, CaseIterable {
        /// Only the document's owner.
        case owner
        /// Any signed-in user.
        case authenticated
        /// Anyone with the API key, signed in or not.
        case `public`
    }

    /// Who may write.
    public enum WriteAccess: String, Hashable, Sendable, CaseIterable {
        /// Any signed-in user creates; only the owner changes or deletes.
        case owner
        /// Any signed-in user.
        case authenticated
        /// Nobody (documents are written by other means, such as an admin tool).
        case nobody
    }

    /// Which ids a user may create.
    public enum IDs: String, Hashable, Sendable, CaseIterable {
        /// Any id not taken.
        case any
        /// Ids that begin with the creator's user id and `:` (`ana:groceries`): each user has a
        /// namespace nobody else can create in, so nobody can take an id before its owner.
        case ownerPrefixed = "owner-prefixed"
    }

    /// Who may read.
    public var read: ReadAccess
    /// Who may write.
    public var write: WriteAccess
    /// Fields every existing document must have.
    public var requiredFields: [FieldPath]
    /// Which ids a user may create.
    public var ids: IDs

    /// Rules from the choices.
    public init(read: ReadAccess, write: WriteAccess, requiredFields: [FieldPath] = [], ids: IDs = .any) {
        self.read = read
        self.write = write
        self.requiredFields = requiredFields
        self.ids = ids
    }

    /// Private documents: each user reads and writes their own.
    public static let ownerOnly = PresetRules(read: .owner, write: .owner)
    /// Shared documents: every signed-in user reads and writes them.
    public static let anyAuthenticatedUser = PresetRules(read: .authenticated, write: .authenticated)
    /// Published documents: anyone reads; signed-in users create, owners change.
    public static let publicRead = PresetRules(read: .public, write: .owner)

    public var readRevision: String { "read=\(read.rawValue)" }

    public func allowsRead(_ document: StoredDocument, by caller: Caller) -> Bool {
        allowsRead(document.key, ownedBy: document.owner, by: caller) ?? false
    }

    /// Reads depend on the owner and the caller alone: never `nil`.
    public func allowsRead(_ key: DocumentKey, ownedBy owner: String, by caller: Caller) -> Bool? {
        switch read {
        case .owner: caller.userID == owner
        case .authenticated: caller.userID != nil
        case .public: true
        }
    }

    public func allowsWrite(before: StoredDocument?, after: StoredDocument, by caller: Caller) -> Bool {
        guard let user = caller.userID else { return false }
        if before == nil && ids == .ownerPrefixed && !Self.isInNamespace(after.key.id, of: user) { return false }
        switch write {
        case .owner: return (before?.owner ?? user) == user
        case .authenticated: return true
        case .nobody: return false
        }
    }

    /// Under `write: owner`, an id of another user's namespace is that user's document or none:
    /// refused alike either way. (Under `write: authenticated` others may change it, and only a
    /// create is refused, by `allowsWrite`.)
    public func refusal(ofWritesTo key: DocumentKey, by caller: Caller) -> String? {
        guard ids == .ownerPrefixed, write == .owner, let user = caller.userID, !Self.isInNamespace(key.id, of: user) else { return nil }
        guard Self.hasNamespace(user) else {
            return
                "ids in \(key.collection) begin with their owner's user id and \":\"; a user id with \":\" or characters ids may not hold has none"
        }
        return "ids in \(key.collection) begin with their owner's user id and \":\"; \(key) is not in yours"
    }

    /// The namespace is the id up to its first `:`. A user id that holds a `:` has none (user
    /// `org` owns `org:bob:list`, so user `org:bob` cannot), nor one that an id cannot begin with.
    private static func isInNamespace(_ id: String, of user: String) -> Bool {
        hasNamespace(user) && id.utf8.count > user.utf8.count + 1 && id.hasPrefix(user + ":")
    }

    private static func hasNamespace(_ user: String) -> Bool {
        (try? DocumentKey(collection: "x", id: user).validate()) != nil && !user.contains(":")
    }

    public func validate(_ document: StoredDocument) throws(Refusal) {
        // The document is built only when there is something to check in it.
        guard !requiredFields.isEmpty, let data = document.data else { return }
        for field in requiredFields where data[field] == nil {
            throw Refusal.invalid("\(document.key.collection) documents must have the field \"\(field)\"")
        }
    }
}

/// The rules of every collection: some named, the rest under a default.
public struct RuleBook: Sendable {
    /// Rules for named collections.
    public var collections: [String: any SecurityRules]
    /// Rules for every other collection.
    public var fallback: any SecurityRules

    /// A rule book; without arguments every collection is owner-only.
    public init(collections: [String: any SecurityRules] = [:], fallback: any SecurityRules = PresetRules.ownerOnly) {
        self.collections = collections
        self.fallback = fallback
    }

    /// The rules of `collection`.
    public func rules(for collection: String) -> any SecurityRules { collections[collection] ?? fallback }

    /// What every collection's `readRevision` names, together: it changes when any collection's
    /// reads do.
    public var readRevision: String {
        let named = collections.keys.sorted().map { "\($0):\(collections[$0]?.readRevision ?? "")" }
        return (["*:\(fallback.readRevision)"] + named).joined(separator: "\n")
    }

    /// Reads a rules configuration file:
    ///
    ///     {"default": {"read": "owner", "write": "owner"},
    ///      "collections": {"catalog": {"read": "public", "write": "nobody"},
    ///                      "carts": {"read": "owner", "write": "owner", "required": ["items"]}}}
    ///
    /// `read` is `owner`, `authenticated` or `public`; `write` is `owner`, `authenticated` or
    /// `nobody`; `required` lists fields every document must have; `ids` is `any` (the default) or
    /// `owner-prefixed` (a user creates only ids that begin with their user id and `:`). A missing
    /// `default` is owner-only.
    ///
    /// - Throws: `Refusal` `.invalid` naming what is malformed.
    public init(json: some Collection<UInt8>) throws(Refusal) {
        let value: Value
        do { value = try Value(json: json) } catch { throw Refusal(error, context: "the rules configuration is not JSON") }
        guard let parts = value.mapValue else { throw Refusal.invalid("the rules configuration must be a JSON object") }
        if let unknown = parts.keys.first(where: { $0 != "default" && $0 != "collections" }) {
            throw Refusal.invalid("the rules configuration has an unknown key \"\(unknown)\"; allowed: collections, default")
        }
        var collections: [String: any SecurityRules] = [:]
        for (name, entry) in parts["collections"]?.mapValue ?? [:] {
            do {
                try DocumentKey(collection: name, id: "x").validate()
            } catch {
                throw Refusal(error, context: "the rules configuration")
            }
            collections[name] = try Self.preset(entry, named: "collections.\(name)")
        }
        self.init(
            collections: collections,
            fallback: try parts["default"].map { value throws(Refusal) in try Self.preset(value, named: "default") }
                ?? PresetRules.ownerOnly)
    }

    private static func preset(_ value: Value, named name: String) throws(Refusal) -> PresetRules {
        guard let parts = value.mapValue,
            let read = parts["read"]?.stringValue.flatMap(PresetRules.ReadAccess.init(rawValue:)),
            let write = parts["write"]?.stringValue.flatMap(PresetRules.WriteAccess.init(rawValue:)),
            parts.keys.allSatisfy({ ["read", "write", "required", "ids"].contains($0) }),
            let ids = parts["ids"].map({ $0.stringValue.flatMap(PresetRules.IDs.init(rawValue:)) }) ?? .any
        else {
            throw Refusal.invalid(
                "rules \(name) need \"read\" (owner, authenticated, public) and \"write\" (owner, authenticated, nobody), and may list \"required\" fields and say \"ids\" (any, owner-prefixed)"
            )
        }
        var required: [FieldPath] = []
        for field in parts["required"]?.arrayValue ?? [] {
            guard let dotted = field.stringValue else { throw Refusal.invalid("rules \(name): required fields are texts") }
            guard !dotted.isEmpty else { throw Refusal.invalid("rules \(name): a required field is empty") }
            do {
                required.append(try FieldPath(dotted))
            } catch {
                throw Refusal(error, context: "rules \(name)")
            }
        }
        return PresetRules(read: read, write: write, requiredFields: required, ids: ids)
    }
}
