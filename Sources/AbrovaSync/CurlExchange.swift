#if canImport(CCurl)
    import CCurl
    import Dispatch
    import Foundation
    import AbrovaLocking

    /// `HTTPExchange` over libcurl's easy interface, the one on Linux.
    ///
    /// `curl_easy_perform` blocks, so each transfer runs on its handle's own serial dispatch queue,
    /// never on a Swift concurrency thread; the caller waits on a continuation, and cancelling it
    /// resumes the caller at once while libcurl aborts at its next progress call (about once a
    /// second while nothing arrives, as in a long poll), closing the connection. Handles go back to
    /// a small pool after each transfer and keep their connections open, so requests to one server
    /// reuse a connection (a push per batch would otherwise pay a TCP handshake each).
    ///
    /// libcurl is set so that it behaves as `HTTPExchange` asks: the timeout in milliseconds for
    /// the whole transfer, no redirects followed, content encodings left alone (no
    /// `CURLOPT_ACCEPT_ENCODING`), no cookie engine, no `Expect: 100-continue`, only `http` and
    /// `https`. Proxies named by the environment (`http_proxy`, `https_proxy`, `no_proxy`) are used,
    /// as libcurl and URLSession on Linux do: that is where Linux keeps its proxy settings.
    final class CurlExchange: HTTPExchange {
        private let maximumAnswerBytes: Int
        /// Handles not in use, each with its open connections.
        private let idle = Protected<[CurlHandle]>([])
        /// How many idle handles are kept: the engine sends one request at a time, a probe may overlap.
        private static let keptHandles = 4

        /// An exchange that abandons answers past `maximumAnswerBytes`.
        init(maximumAnswerBytes: Int) {
            self.maximumAnswerBytes = maximumAnswerBytes
        }

        func send(_ request: HTTPExchangeRequest) async throws(HTTPExchangeFailure) -> HTTPAnswer {
            guard let handle = idle.withLock({ $0.popLast() }) ?? CurlHandle() else {
                throw HTTPExchangeFailure(reason: "libcurl could not be started")
            }
            let transfer = CurlTransfer()
            let limit = maximumAnswerBytes
            let outcome = await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<CurlTransfer.Outcome, Never>) in
                    guard transfer.wait(with: continuation) else {
                        // Cancelled before it started.
                        putBack(handle)
                        continuation.resume(returning: .failure(CurlTransfer.cancelled))
                        return
                    }
                    handle.queue.async {
                        let outcome = handle.perform(request, answerLimit: limit, transfer: transfer)
                        // Back in the pool before the caller resumes, so that its next request finds
                        // the open connection.
                        self.putBack(handle)
                        transfer.finish(outcome)
                    }
                }
            } onCancel: {
                transfer.cancel()
            }
            return try outcome.get()
        }

        private func putBack(_ handle: CurlHandle) {
            idle.withLock { idle in
                if idle.count < Self.keptHandles { idle.append(handle) }
            }
        }
    }

    /// One transfer as its caller and its queue share it: the caller's continuation and the
    /// cancellation flag that libcurl's progress callback reads.
    private final class CurlTransfer: Sendable {
        typealias Outcome = Result<HTTPAnswer, HTTPExchangeFailure>

        static let cancelled = HTTPExchangeFailure(reason: "the request was cancelled")

        private enum State {
            case notStarted
            case waiting(CheckedContinuation<Outcome, Never>)
            case ended
        }

        /// Set once the caller is cancelled; the transfer then aborts.
        let isCancelled = Protected<Bool>(false)
        private let state = Protected(State.notStarted)

        /// Keeps `continuation` for the outcome; false when the caller was cancelled already (the
        /// continuation is not kept, the transfer must not start).
        func wait(with continuation: CheckedContinuation<Outcome, Never>) -> Bool {
            state.withLock { state in
                guard case .notStarted = state else { return false }
                state = .waiting(continuation)
                return true
            }
        }

        /// Resumes the caller with a cancellation at once and flags the transfer to abort.
        func cancel() {
            isCancelled.withLock { $0 = true }
            let waiting = state.withLock { state -> CheckedContinuation<Outcome, Never>? in
                defer { state = .ended }
                guard case .waiting(let continuation) = state else { return nil }
                return continuation
            }
            waiting?.resume(returning: .failure(Self.cancelled))
        }

        /// Resumes the caller with `outcome`, unless a cancellation did already.
        func finish(_ outcome: Outcome) {
            let waiting = state.withLock { state -> CheckedContinuation<Outcome, Never>? in
                guard case .waiting(let continuation) = state else { return nil }
                state = .ended
                return continuation
            }
            waiting?.resume(returning: outcome)
        }
    }

    /// One libcurl easy handle with the connections it keeps open, freed in `deinit`.
    ///
    /// `@unchecked Sendable`: libcurl lets a handle move between threads but never be used by two at
    /// once, and a handle is always owned by one party: it sits in `CurlExchange`'s pool (behind its
    /// mutex) or is used by exactly one transfer, on `queue`.
    private final class CurlHandle: @unchecked Sendable {
        /// Where this handle's transfers run: a serial queue, so `curl_easy_perform` blocks a
        /// dispatch thread of its own, never one of Swift concurrency's.
        let queue = DispatchQueue(label: "AbrovaSync.CurlExchange")
        private let easy: UnsafeMutableRawPointer
        /// libcurl's sentence for the last failure (CURLOPT_ERRORBUFFER).
        private let errorBuffer: UnsafeMutablePointer<CChar>

        /// `curl_global_init`, once per process (a static `let` is initialized once, thread-safely).
        private static let libraryStart = abrova_curl_global_init()

        /// A new handle; `nil` when libcurl cannot start or make one.
        init?() {
            guard Self.libraryStart == CURLE_OK, let easy = curl_easy_init() else { return nil }
            self.easy = easy
            errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE))
            errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
        }

        deinit {
            curl_easy_cleanup(easy)
            errorBuffer.deallocate()
        }

        /// Runs one transfer to its end, blocking: call it on `queue`.
        func perform(_ request: HTTPExchangeRequest, answerLimit: Int, transfer: CurlTransfer) -> CurlTransfer.Outcome {
            // Options back to their defaults; the open connections stay.
            curl_easy_reset(easy)
            errorBuffer[0] = 0
            var headers: UnsafeMutablePointer<curl_slist>?
            defer { curl_slist_free_all(headers) }
            var lines = request.headers.map { "\($0.key): \($0.value)" }
            // No `Expect: 100-continue` wait before a body; no form content type of libcurl's own.
            lines.append("Expect:")
            if request.body != nil || request.method == "POST",
                !request.headers.keys.contains(where: { $0.lowercased() == "content-type" })
            {
                lines.append("Content-Type:")
            }
            for line in lines {
                guard let appended = curl_slist_append(headers, line) else {
                    return .failure(HTTPExchangeFailure(reason: "libcurl ran out of memory"))
                }
                headers = appended
            }

            // The answer is received into `answer`, which the callbacks reach through an unretained
            // pointer: `withExtendedLifetime` keeps it alive until `curl_easy_perform` returns, and
            // libcurl calls them only within it.
            let answer = ReceivedAnswer(limit: answerLimit, transfer: transfer)
            return withExtendedLifetime(answer) { () -> CurlTransfer.Outcome in
                let context = Unmanaged.passUnretained(answer).toOpaque()
                var setup = CURLE_OK
                func set(_ code: CURLcode) { if setup == CURLE_OK { setup = code } }
                set(setString(CURLOPT_URL, request.url.absoluteString))
                set(setString(CURLOPT_PROTOCOLS_STR, "http,https"))
                set(abrova_curl_set_long(easy, CURLOPT_NOSIGNAL, 1))
                set(abrova_curl_set_long(easy, CURLOPT_FOLLOWLOCATION, 0))
                set(abrova_curl_set_long(easy, CURLOPT_HTTP_CONTENT_DECODING, 0))
                set(abrova_curl_set_long(easy, CURLOPT_TIMEOUT_MS, Self.milliseconds(request.timeout)))
                set(abrova_curl_set_long(easy, CURLOPT_FRESH_CONNECT, request.isOnFreshConnection ? 1 : 0))
                set(abrova_curl_set_long(easy, CURLOPT_FORBID_REUSE, request.isOnFreshConnection ? 1 : 0))
                set(abrova_curl_set_pointer(easy, CURLOPT_ERRORBUFFER, errorBuffer))
                set(abrova_curl_set_pointer(easy, CURLOPT_HTTPHEADER, headers))
                set(
                    abrova_curl_set_data_callback(easy, CURLOPT_HEADERFUNCTION) { buffer, size, count, context in
                        guard let buffer, let context else { return 0 }
                        let answer = Unmanaged<ReceivedAnswer>.fromOpaque(context).takeUnretainedValue()
                        answer.receiveHeaderLine(UnsafeRawBufferPointer(start: buffer, count: size * count))
                        return size * count
                    })
                set(abrova_curl_set_pointer(easy, CURLOPT_HEADERDATA, context))
                set(
                    abrova_curl_set_data_callback(easy, CURLOPT_WRITEFUNCTION) { buffer, size, count, context in
                        guard let buffer, let context else { return 0 }
                        let answer = Unmanaged<ReceivedAnswer>.fromOpaque(context).takeUnretainedValue()
                        // 0 (less than was given) aborts the transfer: the body is past the limit.
                        return answer.receiveBody(UnsafeRawBufferPointer(start: buffer, count: size * count)) ? size * count : 0
                    })
                set(abrova_curl_set_pointer(easy, CURLOPT_WRITEDATA, context))
                set(
                    abrova_curl_set_progress_callback(
                        easy,
                        { context, _, _, _, _ in
                            guard let context else { return 0 }
                            let answer = Unmanaged<ReceivedAnswer>.fromOpaque(context).takeUnretainedValue()
                            return answer.transfer.isCancelled.value ? 1 : 0
                        }, context))
                switch request.method {
                case "GET" where request.body == nil: set(abrova_curl_set_long(easy, CURLOPT_HTTPGET, 1))
                case "POST": break
                case "HEAD": set(abrova_curl_set_long(easy, CURLOPT_NOBODY, 1))
                default: set(setString(CURLOPT_CUSTOMREQUEST, request.method))
                }
                guard setup == CURLE_OK else {
                    return .failure(HTTPExchangeFailure(reason: "libcurl refused an option: \(Self.describe(setup))"))
                }
                let code: CURLcode
                if let body = request.body {
                    code = body.withUnsafeBytes { bytes in
                        // The body is not copied: it is sent from `bytes`, valid until perform returns.
                        let set = abrova_curl_set_body(easy, bytes.baseAddress, curl_off_t(bytes.count))
                        return set == CURLE_OK ? curl_easy_perform(easy) : set
                    }
                } else if request.method == "POST" {
                    code = abrova_curl_set_body(easy, nil, 0) == CURLE_OK ? curl_easy_perform(easy) : CURLE_OUT_OF_MEMORY
                } else {
                    code = curl_easy_perform(easy)
                }
                return outcome(of: code, answer, timeout: request.timeout)
            }
        }

        private func outcome(of code: CURLcode, _ answer: ReceivedAnswer, timeout: Duration) -> CurlTransfer.Outcome {
            var status = 0
            if abrova_curl_get_long(easy, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK { status = 0 }
            if code == CURLE_WRITE_ERROR, answer.exceedsLimit, answer.isHeadComplete {
                return .success(HTTPAnswer(statusCode: status, headers: answer.headers, body: [], exceedsLimit: true))
            }
            guard code == CURLE_OK else { return .failure(HTTPExchangeFailure(reason: reason(for: code, timeout: timeout, answer))) }
            // libcurl takes a connection closed in order where a header line ends for the end of
            // the answer; without its blank line the head was cut short.
            guard answer.isHeadComplete, (200...999).contains(status) else {
                return .failure(HTTPExchangeFailure(reason: "the connection was lost (the answer ended within its head)"))
            }
            return .success(HTTPAnswer(statusCode: status, headers: answer.headers, body: answer.body))
        }

        /// A sentence for a transfer that ended without a whole answer, as URLSession's are worded.
        private func reason(for code: CURLcode, timeout: Duration, _ answer: ReceivedAnswer) -> String {
            let what: String
            switch code {
            case CURLE_OPERATION_TIMEDOUT:
                return "no answer within \(timeout)"
            case CURLE_ABORTED_BY_CALLBACK where answer.transfer.isCancelled.value:
                return CurlTransfer.cancelled.reason
            case CURLE_COULDNT_CONNECT:
                var error = 0
                _ = abrova_curl_get_long(easy, CURLINFO_OS_ERRNO, &error)
                what =
                    switch Int32(truncatingIfNeeded: error) {
                    case ENETUNREACH, ENETDOWN: "there is no network"
                    case EHOSTUNREACH: "the server's host cannot be reached"
                    default: "the connection was refused"
                    }
            case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY:
                what = "the server's host name cannot be resolved"
            case CURLE_GOT_NOTHING, CURLE_PARTIAL_FILE, CURLE_RECV_ERROR, CURLE_SEND_ERROR, CURLE_HTTP2, CURLE_HTTP2_STREAM,
                CURLE_HTTP3:
                what = "the connection was lost"
            case CURLE_WEIRD_SERVER_REPLY:
                what = "the answer is not HTTP"
            case CURLE_UNSUPPORTED_PROTOCOL, CURLE_URL_MALFORMAT:
                what = "the server URL cannot be used (http or https only)"
            case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER,
                CURLE_SSL_CACERT_BADFILE, CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS,
                CURLE_SSL_CRL_BADFILE, CURLE_SSL_SHUTDOWN_FAILED, CURLE_SSL_ENGINE_INITFAILED, CURLE_SSL_CLIENTCERT,
                CURLE_USE_SSL_FAILED:
                what = "the secure connection failed"
            case CURLE_OUT_OF_MEMORY:
                what = "libcurl ran out of memory"
            default:
                what = "libcurl error \(code.rawValue)"
            }
            return what + " (\(describe(code)))"
        }

        /// libcurl's sentence for the last failure, or for `code`.
        private func describe(_ code: CURLcode) -> String {
            let detail = String(cString: errorBuffer).trimmingCharacters(in: .whitespacesAndNewlines)
            return detail.isEmpty ? Self.describe(code) : detail
        }

        private static func describe(_ code: CURLcode) -> String {
            curl_easy_strerror(code).map { String(cString: $0) } ?? "libcurl error \(code.rawValue)"
        }

        /// Sets a string option; libcurl copies the string.
        private func setString(_ option: CURLoption, _ value: String) -> CURLcode {
            value.withCString { abrova_curl_set_pointer(easy, option, UnsafeMutableRawPointer(mutating: $0)) }
        }

        /// `duration` in whole milliseconds, rounded up, at least 1 (0 would mean no timeout).
        private static func milliseconds(_ duration: Duration) -> Int {
            let (seconds, attoseconds) = duration.components
            let milliseconds = (Double(seconds) * 1e3 + Double(attoseconds) / 1e15).rounded(.up)
            return Int(min(max(1, milliseconds), Double(Int32.max)))
        }
    }

    /// The answer of one transfer as libcurl's callbacks hand it over, on the handle's queue only.
    private final class ReceivedAnswer {
        let limit: Int
        let transfer: CurlTransfer
        /// The headers of the last answer head (after any 1xx), by lowercased name; repeated ones
        /// joined with commas, as URLSession does.
        private(set) var headers: [String: String] = [:]
        /// Whether a status line came.
        private var hasStatusLine = false
        /// Whether the head's closing blank line came.
        private(set) var isHeadComplete = false
        private(set) var body: [UInt8] = []
        /// The body grew past `limit` and was dropped.
        private(set) var exceedsLimit = false
        private var lastName: String?

        init(limit: Int, transfer: CurlTransfer) {
            self.limit = limit
            self.transfer = transfer
        }

        /// One line of a head, its line break included: a status line, a header, a folded
        /// continuation or the closing blank line. Lines after a complete head (trailers) are left out.
        func receiveHeaderLine(_ bytes: UnsafeRawBufferPointer) {
            var line = Substring(String(decoding: bytes, as: UTF8.self))
            while let last = line.last, last.isNewline { line.removeLast() }
            if line.hasPrefix("HTTP/") {
                // A status line: a new head (the one after a 1xx replaces it).
                headers = [:]
                lastName = nil
                hasStatusLine = true
                isHeadComplete = false
                return
            }
            guard hasStatusLine, !isHeadComplete else { return }
            if line.isEmpty {
                isHeadComplete = true
                if let length = headers["content-length"].flatMap({ Int($0) }), length > 0 { body.reserveCapacity(min(length, limit)) }
                return
            }
            if let first = line.first, first == " " || first == "\t" {
                // obs-fold: the previous header goes on.
                if let lastName { headers[lastName, default: ""] += " " + Self.trimmed(line) }
                return
            }
            guard let colon = line.firstIndex(of: ":") else { return }
            let name = Self.trimmed(line[..<colon]).lowercased()
            let value = Self.trimmed(line[line.index(after: colon)...])
            if let earlier = headers[name] { headers[name] = earlier + ", " + value } else { headers[name] = value }
            lastName = name
        }

        /// Body bytes as they arrive; false (abandon the transfer) once the body is past the limit.
        func receiveBody(_ bytes: UnsafeRawBufferPointer) -> Bool {
            guard !exceedsLimit, bytes.count <= limit - body.count else {
                exceedsLimit = true
                body = []
                return false
            }
            body.append(contentsOf: bytes)
            return true
        }

        private static func trimmed(_ text: Substring) -> String {
            var text = text
            while let first = text.first, first == " " || first == "\t" { text.removeFirst() }
            while let last = text.last, last == " " || last == "\t" { text.removeLast() }
            return String(text)
        }
    }
#endif
