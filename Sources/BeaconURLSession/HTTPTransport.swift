import Beacon
import BeaconHTTP
import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// A `Transport` through `URLSession` (FoundationNetworking on Linux), for what Beacon's own
/// client does not speak (SOCKS or `https://` proxies). In its own module and product,
/// `BeaconURLSession`, so that a service that does not use it does not load FoundationNetworking
/// and libcurl: `import BeaconURLSession`, then `config.transport = HTTPTransport()`.
///
/// Each request gets its own timeout (30 s by default, from `DeliveryConfiguration.requestTimeout`),
/// enforced by this type as well as by `URLSession`: on Linux `URLSession` rounds timeouts down to
/// whole seconds and treats a value below one second as "no timeout", so the session is given at
/// least one second and the precise deadline is kept by cancelling the task. Nothing of a request
/// (its body included) stays in memory once its answer is returned: the deadlines of all requests
/// share one timer.
///
/// ```swift
/// let transport = HTTPTransport()
/// ```
public final class HTTPTransport: Transport {
    let session: URLSession
    /// The requests and bodies of this transport still in memory (for tests).
    let live = LiveCounts()

    /// A transport with its own ephemeral `URLSession` (no cookies, no cache).
    public init() {
        self.session = URLSession(configuration: Self.sessionConfiguration())
    }

    /// The session settings: ephemeral, no cookies, no cache, one connection per host. The
    /// benchmark's plain URLSession loop uses the same, so that it measures the same client.
    package static func sessionConfiguration() -> URLSessionConfiguration {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpCookieStorage = nil
        configuration.urlCache = nil
        configuration.httpShouldSetCookies = false
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpMaximumConnectionsPerHost = 1
        return configuration
    }

    deinit {
        session.finishTasksAndInvalidate()
    }

    public func send(_ request: TransportRequest) async throws -> TransportResponse {
        let seconds = Self.seconds(request.timeout)
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = request.method
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        urlRequest.httpBody = live.countedData(request.body)
        // Whole seconds, at least one: below one second URLSession on Linux would not time out at all.
        urlRequest.timeoutInterval = max(1, seconds.rounded(.up))
        let exchange = HTTPExchange(url: request.url, seconds: seconds, live: live)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<TransportResponse, any Error>) in
                guard exchange.begin(continuation) else { return }
                let task = session.dataTask(with: urlRequest) { data, response, error in
                    exchange.complete(data: data, response: response, error: error)
                }
                guard exchange.attach(task) else { return }
                // The precise deadline, whatever URLSession does with sub-second timeouts.
                exchange.arm(deadline: .now() + .nanoseconds(Int(min(max(0, seconds), 1e9) * 1e9)))
                task.resume()
            }
        } onCancel: {
            exchange.cancel(TransportError(.cancelled, "the request to \(RedactedURL(request.url)) was cancelled"))
        }
    }

    static func seconds(_ duration: Duration) -> Double { duration.seconds }
}

/// One request's life: the continuation to resume (at most once, by the answer, the deadline or a
/// cancellation, whichever comes first), the running `URLSessionTask` and its deadline. It is released as soon as the request is answered, cancelled or timed out: the task's
/// completion handler, the cancellation handler and the deadline all let go of it then.
final class HTTPExchange: Sendable {
    private struct State {
        var once: ResumeOnce<TransportResponse, any Error>?
        var task: URLSessionTask?
        var deadline: DeadlineTimer.Entry?
        /// Why the request ended early (timeout or cancellation); set once.
        var endedEarly: TransportError?
        var finished = false
    }

    private let state = Mutex(State())
    private let url: URL
    private let seconds: Double
    private let live: LiveCounts

    init(url: URL, seconds: Double, live: LiveCounts) {
        self.url = url
        self.seconds = seconds
        self.live = live
        live.exchanges.add(1, ordering: .relaxed)
    }

    deinit {
        live.exchanges.subtract(1, ordering: .relaxed)
    }

    /// Keeps the continuation; false (and resumed at once) when the request was already cancelled.
    func begin(_ continuation: CheckedContinuation<TransportResponse, any Error>) -> Bool {
        let early = state.withLock { s -> TransportError? in
            if let reason = s.endedEarly {
                s.finished = true
                return reason
            }
            s.once = ResumeOnce(continuation)
            return nil
        }
        guard let early else { return true }
        continuation.resume(throwing: early)
        return false
    }

    /// Keeps the task so that a timeout or a cancellation can stop it; false (and the task
    /// cancelled) when the request already ended.
    func attach(_ task: URLSessionTask) -> Bool {
        let ended = state.withLock { s -> Bool in
            if s.finished { return true }
            s.task = task
            return false
        }
        if ended { task.cancel() }
        return !ended
    }

    /// Starts the deadline, unless the request already ended.
    func arm(deadline: DispatchTime) {
        let entry = DeadlineTimer.shared.add(at: deadline) { [weak self] in
            guard let self else { return }
            self.cancel(TransportError(.timeout, "no answer from \(RedactedURL(self.url)) within \(self.seconds) s"))
        }
        let ended = state.withLock { s -> Bool in
            if s.finished { return true }
            s.deadline = entry
            return false
        }
        if ended { DeadlineTimer.shared.remove(entry) }
    }

    /// Ends the request now with `reason` (timeout or cancellation) and cancels its task.
    func cancel(_ reason: TransportError) {
        let (once, task, deadline) = state.withLock { s in
            if s.endedEarly == nil && !s.finished { s.endedEarly = reason }
            return take(&s)
        }
        task?.cancel()
        if let deadline { DeadlineTimer.shared.remove(deadline) }
        once?.resume(throwing: reason)
    }

    /// The task's completion handler: resumes with the answer (unless the request already ended).
    func complete(data: Data?, response: URLResponse?, error: (any Error)?) {
        let (once, _, deadline) = state.withLock { take(&$0) }
        if let deadline { DeadlineTimer.shared.remove(deadline) }
        guard let once else { return }
        once.resume(with: Result { try answer(data: data, response: response, error: error) })
    }

    /// Takes everything out of the state, marking the request finished. The continuation is
    /// resumed outside this lock, as ``ResumeOnce`` resumes outside its own.
    private func take(_ s: inout State) -> (ResumeOnce<TransportResponse, any Error>?, URLSessionTask?, DeadlineTimer.Entry?) {
        s.finished = true
        defer {
            s.once = nil
            s.task = nil
            s.deadline = nil
        }
        return (s.once, s.task, s.deadline)
    }

    private func answer(data: Data?, response: URLResponse?, error: (any Error)?) throws -> TransportResponse {
        if let error {
            let nsError = error as NSError
            if nsError.domain == NSURLErrorDomain && nsError.code == NSURLErrorTimedOut {
                throw TransportError(.timeout, "no answer from \(RedactedURL(url)) within \(seconds) s")
            }
            if nsError.domain == NSURLErrorDomain && nsError.code == NSURLErrorCancelled {
                throw TransportError(.cancelled, "the request to \(RedactedURL(url)) was cancelled")
            }
            throw TransportError(.network, "\(RedactedURL(url)): \(RedactedURL.scrub(error.localizedDescription, of: url))")
        }
        guard let http = response as? HTTPURLResponse else {
            throw TransportError(.network, "\(RedactedURL(url)) answered with something that is not HTTP")
        }
        // URLSession joins repeated fields with ", " (RFC 9110 §5.3); each name comes once here.
        var headers = HTTPHeaders()
        for (key, value) in http.allHeaderFields {
            if let key = key as? String, let value = value as? String { headers.add(name: key, value: value) }
        }
        return TransportResponse(status: http.statusCode, headers: headers, body: data.map { [UInt8]($0) } ?? [])
    }
}
