import AbrovaCore
import AbrovaWire

/// The server's push body decoder, `PushRequest(body:limits:)`.
///
/// Oracle: a refusal is a `Refusal` with a 4xx status and a message; an accepted body gives
/// a request whose canonical body decodes to the same request and encodes to the same bytes (what
/// the retry check and the dedupe digest rely on).
public struct PushBodyTarget: FuzzTarget {
    public let name = "push"
    public let seeds: [[UInt8]]
    public let dictionary = jsonDictionary
    /// Small, so that mutations that repeat a change reach the limit.
    let limits = WireLimits(maximumChanges: 16)

    /// The target, seeded with the fixtures' push bodies and the bodies built in code.
    public init(fixtures: WireCorpus) {
        seeds = fixtures.pushBodies + BuiltSeeds.pushBodies
    }

    public func check(_ input: [UInt8]) -> String? {
        let request: PushRequest
        do {
            request = try PushRequest(body: input, limits: limits)
        } catch {
            return refusalProblem(error, of: "PushRequest(body:)")
        }
        let canonical = request.body
        do {
            let again = try PushRequest(body: canonical, limits: limits)
            guard again == request else {
                return "the canonical body of an accepted push decodes to another request: \(FuzzFinding.preview(canonical))"
            }
            guard again.body == canonical else {
                return
                    "the canonical body of an accepted push is not stable: \(FuzzFinding.preview(canonical)) then \(FuzzFinding.preview(again.body))"
            }
        } catch {
            return "the canonical body of an accepted push is refused (\(error)): \(FuzzFinding.preview(canonical))"
        }
        return nil
    }
}

/// The SDK's decoders of the server's answers: a hostile or broken server must not crash an app.
/// Every input goes to `PushResponse(body:)`, `PullResponse(body:)`, `ServerDocument(body:)` and
/// `Refusal(body:)`.
///
/// Oracle: each decoder refuses with a 4xx `Refusal` and a message, or gives a value whose
/// canonical body decodes to the same value and encodes to the same bytes; an error answer read
/// has a status in 100...599.
public struct AnswerBodyTarget: FuzzTarget {
    public let name = "answers"
    public let seeds: [[UInt8]]
    public let dictionary = jsonDictionary

    /// The target, seeded with the fixtures' answers and the answers built in code.
    public init(fixtures: WireCorpus) {
        seeds = fixtures.answerBodies + BuiltSeeds.answerBodies
    }

    public func check(_ input: [UInt8]) -> String? {
        if let problem = roundTripProblem(
            input, "PushResponse(body:)", decode: { bytes throws(Refusal) in try PushResponse(body: bytes) },
            encode: \.body)
        {
            return problem
        }
        if let problem = roundTripProblem(
            input, "PullResponse(body:)", decode: { bytes throws(Refusal) in try PullResponse(body: bytes) },
            encode: \.body)
        {
            return problem
        }
        if let problem = roundTripProblem(
            input, "ServerDocument(body:)", decode: { bytes throws(Refusal) in try ServerDocument(body: bytes) },
            encode: \.body)
        {
            return problem
        }
        if let error = ErrorBody(input), !(100...599).contains(error.statusCode) {
            return "ErrorBody read status \(error.statusCode)"
        }
        return nil
    }

    private func roundTripProblem<Answer: Equatable>(
        _ input: [UInt8], _ decoder: String, decode: ([UInt8]) throws(Refusal) -> Answer, encode: (Answer) -> [UInt8]
    ) -> String? {
        let answer: Answer
        do {
            answer = try decode(input)
        } catch {
            return refusalProblem(error, of: decoder)
        }
        let canonical = encode(answer)
        do {
            let again = try decode(canonical)
            guard again == answer else {
                return "\(decoder): the canonical body decodes to another value: \(FuzzFinding.preview(canonical))"
            }
            guard encode(again) == canonical else {
                return "\(decoder): the canonical body is not stable: \(FuzzFinding.preview(canonical))"
            }
        } catch {
            return "\(decoder): the canonical body of an accepted answer is refused (\(error)): \(FuzzFinding.preview(canonical))"
        }
        return nil
    }
}

/// What is wrong with a decoder's refusal: `nil` for a 4xx with a message.
func refusalProblem(_ error: Refusal, of decoder: String) -> String? {
    guard (400...499).contains(error.statusCode) else {
        return "\(decoder) refused with status \(error.statusCode), not 4xx: \(error.message)"
    }
    guard !error.message.isEmpty else { return "\(decoder) refused with \(error.statusCode) and no message" }
    return nil
}

/// The keys and values of the protocol's bodies, quoted, and JSON's own words.
let jsonDictionary: [[UInt8]] = {
    let names = [
        "batchSeq", "changes", "clientId", "strategy", "collection", "delta", "id", "writes", "group", "version", "owner",
        "create", "assignments", "removals", "fieldRemovals", "setChanges", "add", "remove", "base", "delete",
        "results", "status", "statusCode", "message", "state", "conflicts", "path", "outcome", "serverValue",
        "clientValue", "documents", "cursor", "hasMore", "deleted", "data", "e", "f", "s", "v", "r",
        "merge", "manual", "serverWins", "clientWins", "applied", "conflict", "rejected",
        "serverWon", "clientWon", "merged", "unresolved", "a.b", "a..b", ".", "..", "", "x'; DROP TABLE documents; --",
    ]
    let words = [
        "null", "true", "false", "{}", "[]", "[[]]", #"{"":0}"#, ",", ":", #"\u0000"#, "-", "e", "\"\":", "[0,0]",
        "[1,9223372036854775807]",
    ]
    return names.map { Array("\"\($0)\"".utf8) } + words.map { Array($0.utf8) }
}()
