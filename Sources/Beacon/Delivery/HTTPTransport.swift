import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// The default ``Transport``: HTTP(S) through `URLSession` (FoundationNetworking on Linux).
///
/// Each request gets its own timeout (30 s by default, from ``DeliveryConfiguration/requestTimeout``),
/// enforced by this type as well as by `URLSession`: on Linux `URLSession` rounds timeouts down to
/// whole seconds and treats a value below one second as "no timeout", so the session is given at
/// least one second and the precise deadline is kept by cancelling the task.
///
/// ```swift
/// let transport = HTTPTransport()
/// ```
public final class HTTPTransport: Transport {
    let session: URLSession

    /// A transport with its own ephemeral `URLSession` (no cookies, no cache).
    public init() {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpCookieStorage = nil
        configuration.urlCache = nil
        configuration.httpShouldSetCookies = false
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpMaximumConnectionsPerHost = 1
        self.session = URLSession(configuration: configuration)
    }

    deinit {
        session.finishTasksAndInvalidate()
    }

    public func send(_ request: TransportRequest) async throws -> TransportResponse {
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = request.method
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        urlRequest.httpBody = Data(request.body)
        let seconds = Self.seconds(request.timeout)
        // Whole seconds, at least one: below one second URLSession on Linux would not time out at all.
        urlRequest.timeoutInterval = max(1, seconds.rounded(.up))
        let box = TaskBox()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<TransportResponse, any Error>) in
                let once = Once(continuation)
                box.setOnce(once)
                let task = session.dataTask(with: urlRequest) { data, response, error in
                    if let error {
                        let nsError = error as NSError
                        if nsError.domain == NSURLErrorDomain && nsError.code == NSURLErrorTimedOut {
                            once.resume(throwing: TransportError(.timeout, "no answer from \(RedactedURL(request.url)) within \(seconds) s"))
                        } else if nsError.domain == NSURLErrorDomain && nsError.code == NSURLErrorCancelled {
                            once.resume(throwing: box.cancelReason ?? TransportError(.cancelled, "the request to \(RedactedURL(request.url)) was cancelled"))
                        } else {
                            once.resume(throwing: TransportError(.network, "\(RedactedURL(request.url)): \(RedactedURL.scrub(error.localizedDescription, of: request.url))"))
                        }
                        return
                    }
                    guard let http = response as? HTTPURLResponse else {
                        once.resume(throwing: TransportError(.network, "\(RedactedURL(request.url)) answered with something that is not HTTP"))
                        return
                    }
                    var headers: [String: String] = [:]
                    for (key, value) in http.allHeaderFields {
                        if let key = key as? String, let value = value as? String { headers[key] = value }
                    }
                    once.resume(returning: TransportResponse(status: http.statusCode, headers: headers, body: data.map { [UInt8]($0) } ?? []))
                }
                box.set(task)
                task.resume()
                // The precise deadline, whatever URLSession does with sub-second timeouts.
                let nanos = Int(max(0, seconds) * 1_000_000_000)
                let timer = DispatchWorkItem {
                    box.cancel(reason: TransportError(.timeout, "no answer from \(RedactedURL(request.url)) within \(seconds) s"))
                }
                let cancelTimer = TimerCancel(timer)
                once.onResume = { cancelTimer.cancel() }
                DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(nanos), execute: timer)
            }
        } onCancel: {
            box.cancel(reason: TransportError(.cancelled, "the request to \(RedactedURL(request.url)) was cancelled"))
        }
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}

/// The running `URLSessionTask` and why it was cancelled, shared with the cancellation handler and
/// the deadline timer.
final class TaskBox: Sendable {
    private let state = Mutex<(task: URLSessionTask?, reason: TransportError?, cancelled: Bool)>((nil, nil, false))
    private let once = Mutex<Once<TransportResponse>?>(nil)

    /// The continuation to fail at once on cancellation or timeout, without waiting for URLSession.
    func setOnce(_ value: Once<TransportResponse>) {
        once.withLock { $0 = value }
    }

    func set(_ task: URLSessionTask) {
        let cancelNow = state.withLock { s -> Bool in
            s.task = task
            return s.cancelled
        }
        if cancelNow { task.cancel() }
    }

    func cancel(reason: TransportError) {
        let task = state.withLock { s -> URLSessionTask? in
            if s.cancelled { return nil }
            s.cancelled = true
            s.reason = reason
            return s.task
        }
        task?.cancel()
        once.withLock { $0 }?.resume(throwing: reason)
    }

    var cancelReason: TransportError? { state.withLock { $0.reason } }
}

/// A continuation resumed at most once.
final class Once<T: Sendable>: Sendable {
    private let continuation: Mutex<CheckedContinuation<T, any Error>?>
    private let cleanup = Mutex<(@Sendable () -> Void)?>(nil)

    init(_ continuation: CheckedContinuation<T, any Error>) {
        self.continuation = Mutex(continuation)
    }

    /// Runs once, after the continuation is resumed (cancels the deadline timer).
    var onResume: (@Sendable () -> Void)? {
        get { cleanup.withLock { $0 } }
        set { cleanup.withLock { $0 = newValue } }
    }

    // The continuation is taken out under the lock and resumed outside it: resuming can run task
    // machinery that takes the task's status lock, while a cancellation holding that lock calls
    // back into `resume` (a lock-order deadlock seen in the full test suite).
    func resume(returning value: T) {
        guard let pending = take() else { return }
        pending.resume(returning: value)
        finish()
    }

    func resume(throwing error: any Error) {
        guard let pending = take() else { return }
        pending.resume(throwing: error)
        finish()
    }

    private func take() -> CheckedContinuation<T, any Error>? {
        continuation.withLock { c in
            defer { c = nil }
            return c
        }
    }

    private func finish() {
        cleanup.withLock { c -> (@Sendable () -> Void)? in defer { c = nil }; return c }?()
    }
}

/// Cancels a `DispatchWorkItem` (thread-safe, but not marked `Sendable`).
final class TimerCancel: @unchecked Sendable {
    private let item: DispatchWorkItem
    init(_ item: DispatchWorkItem) { self.item = item }
    func cancel() { item.cancel() }
}
