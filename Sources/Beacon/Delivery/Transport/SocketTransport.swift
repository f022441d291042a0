import BeaconLog
import BeaconHTTP
import BeaconTLS
import Dispatch
import Foundation
import Glibc
import Synchronization

/// A ``Transport`` for `http://` and `https://` collectors with Beacon's own small HTTP/1.1
/// client: one keep-alive connection, one request at a time.
///
/// It costs less CPU per request than `HTTPTransport` (`BeaconURLSession`) and its memory stays flat however long it
/// runs (`URLSession` on Linux keeps about 150 bytes per request for good). `https://` goes
/// through the system's OpenSSL: the certificate is always verified (see ``TLSConfiguration``),
/// TLS 1.2 or later, and a reconnection resumes the last session. A certificate that fails
/// verification throws ``TransportError/Code/tls``. Concurrent ``send(_:)`` calls wait their turn. A
/// connection the server closed is opened again; a request whose reused connection turns out
/// closed before any byte of the answer is sent once more on a new one (delivery is at least once,
/// and the idempotency key travels with it). The request's timeout covers resolving, connecting,
/// writing and reading; at most 1 MiB of an answer's body is kept, the rest is read and dropped.
/// User info in the URL (`http://user:password@host/`) is sent as `Authorization: Basic` unless
/// the request has its own `Authorization`. An answer that arrives while the body is still being
/// written (a 413 or 401 from the head alone) is read and returned, even when the server then
/// resets the connection. `localhost` is both 127.0.0.1 and ::1; a host's addresses are tried
/// staggered, the next after 250 ms without an answer.
///
/// Proxies are read from the environment when the transport is made, as curl reads them
/// (`http_proxy`, `https_proxy`/`HTTPS_PROXY`, `all_proxy`/`ALL_PROXY`, `no_proxy`/`NO_PROXY`):
/// plain http goes to an HTTP proxy in absolute form, https through a `CONNECT` tunnel with TLS to
/// the collector inside; credentials in the proxy URL go as `Proxy-Authorization: Basic`. A proxy
/// asking for credentials (407) is answered like a collector's 401: delivery pauses. SOCKS and
/// `https://` proxies are not spoken: requests then fail with a message saying so.
///
/// The blocking socket calls run one at a time on Beacon's own threads (a serial lane on its
/// bounded pool), never on Swift's concurrency pool; called from the uploader's own thread (a pass), they run right there, in turn
/// with other requests, with no hand-off per request.
///
/// ```swift
/// var configuration = Beacon.Configuration(directory: dir, serverURL: url)
/// configuration.transport = SocketTransport()
/// ```
public final class SocketTransport: Transport {
    /// Where the blocking socket calls run, one request at a time: the calling thread if it is
    /// Beacon's own (``SerialLane/sync(_:)``), else Beacon's pool threads.
    let queue = SerialLane(pool: .network)
    let connection: SocketConnection
    /// The last URL's endpoint, so that a URL is taken apart once, not per request.
    let endpoints = Mutex<SocketEndpoint?>(nil)
    /// Requests of this transport still in memory (for tests).
    let live = LiveCounts()
    /// The TLS context for `https://`, made once: at ``init(tls:)``, or at the first `https://`
    /// request with the system's trust store.
    private let tls: Mutex<Result<TLSContext, TLSFailure>?>
    /// The environment proxies are read from (the process's when the transport was made).
    private let environment: [String: String]

    /// A transport with no connection yet: the first request opens it. `https://` collectors are
    /// verified against the system's trust store.
    public convenience init() {
        self.init(maxResponseBodyBytes: 1 << 20)
    }

    /// A transport verifying `https://` collectors as `tls` says; it throws
    /// ``TransportError/Code/tls`` when a file it names cannot be read or loaded.
    public convenience init(tls: TLSConfiguration) throws(TransportError) {
        self.init(maxResponseBodyBytes: 1 << 20, tls: tls)
        if case .failure(let failure) = self.tls.withLock({ $0 }) { throw TransportError(.tls, failure.message) }
    }

    /// A transport keeping at most `maxResponseBodyBytes` of an answer's body.
    init(maxResponseBodyBytes: Int, tls configuration: TLSConfiguration? = nil, environment: [String: String] = ProcessInfo.processInfo.environment, lookup: @escaping SocketResolver.Lookup = SocketResolver.system) {
        self.environment = environment
        // On the uploader's pass thread, what it kept for the wait for an answer (reading the next
        // batch) runs once the request is written.
        connection = SocketConnection(maxResponseBodyBytes: maxResponseBodyBytes, lookup: lookup, runLookup: { BlockingPool.lookups.submit($0) }, beforeAwaitingAnswer: IOThread.runDeferred)
        tls = Mutex(configuration.map { configuration in Result { () throws(TLSFailure) in try TLSContext(configuration) } })
    }

    /// The TLS context, made with the system's trust store on first use.
    func tlsContext() throws(TLSFailure) -> TLSContext {
        try tls.withLock { made throws(TLSFailure) in
            if made == nil { made = Result { () throws(TLSFailure) in try TLSContext(TLSConfiguration()) } }
            return try made!.get()
        }
    }

    /// How many connections this transport opened (for tests and the benchmark).
    var connectionsOpened: Int {
        queue.sync { connection.opened }
    }

    /// Closes the open connection (TLS says goodbye and frees its state) on the calling thread,
    /// after the request in progress, if any. A later request opens a new one. Call it before the
    /// process exits, so that no deinitializer on another thread runs OpenSSL during `exit`.
    package func close() {
        queue.sync { connection.disconnect() }
    }

    public func send(_ request: TransportRequest) async throws -> TransportResponse {
        let endpoint = try endpoint(for: request.url)
        let exchange = SocketExchange(waker: connection.waker, live: live)
        // Told only when it happens: redacting the URL costs more than a request's own work.
        let url = request.url
        var cancelled: TransportError { TransportError(.cancelled, "the request to \(RedactedURL(url)) was cancelled") }
        if IOThread.isCurrent {
            // A thread of Beacon's own (the uploader's pass): the exchange runs right here, in
            // turn with other requests (`sync` runs it on this thread), with no hand-off.
            return try await withTaskCancellationHandler {
                if Task.isCancelled { throw cancelled }
                return try queue.sync { [connection] in try Self.exchange(request, endpoint, connection, exchange).get() }
            } onCancel: {
                exchange.cancel(cancelled)
            }
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<TransportResponse, any Error>) in
                guard exchange.begin(ResumeOnce(continuation), cancelled: cancelled) else { return }
                queue.async { [connection] in
                    guard !exchange.isCancelled else { return }
                    exchange.finish(Self.exchange(request, endpoint, connection, exchange))
                }
            }
        } onCancel: {
            exchange.cancel(cancelled)
        }
    }

    /// Sends `request` on `connection`, on the transport's queue.
    private static func exchange(_ request: TransportRequest, _ endpoint: SocketEndpoint, _ connection: SocketConnection, _ exchange: SocketExchange) -> Result<TransportResponse, any Error> {
        // The deadline starts when the request gets the connection, not while it waits its turn.
        let deadline = DispatchTime.now().uptimeNanoseconds &+ UInt64(min(max(0, request.timeout.seconds), 1e9) * 1e9)
        do throws(SocketConnection.Failure) {
            return .success(try connection.exchange(request, to: endpoint, deadline: deadline) { exchange.isCancelled })
        } catch {
            return .failure(Self.error(error, endpoint.url, request.timeout))
        }
    }

    func endpoint(for url: URL) throws -> SocketEndpoint {
        if let known = endpoints.withLock({ $0 }), known.url == url { return known }
        var endpoint = try SocketEndpoint(url, route: ProxyRoute(for: url, environment: environment))
        if endpoint.secure {
            do { endpoint.tls = try tlsContext() } catch { throw TransportError(.tls, "\(RedactedURL(url)): \(error.message)") }
        }
        endpoints.withLock { $0 = endpoint }
        return endpoint
    }

    /// `failure` told to people: what failed, where (the URL redacted), what it means.
    static func error(_ failure: SocketConnection.Failure, _ url: URL, _ timeout: Duration) -> TransportError {
        let target = RedactedURL(url)
        switch failure {
        case .timeout:
            return TransportError(.timeout, "no answer from \(target) within \(timeout.seconds) s")
        case .cancelled:
            return TransportError(.cancelled, "the request to \(target) was cancelled")
        case .system(let call, let code):
            return TransportError(.network, "\(target): \(call) failed: \(String(cString: strerror(code)))")
        case .closedBeforeAnswer(let code):
            let how = code.map { String(cString: strerror($0)) } ?? "closed"
            return TransportError(.network, "\(target): the connection was \(how == "closed" ? "closed" : "lost (\(how))") before any answer")
        case .malformed(let what):
            return TransportError(.network, "\(target): \(what)")
        case .resolve(let what):
            return TransportError(.network, "\(target): \(what)")
        case .tls(let failure):
            return TransportError(failure.isConfiguration ? .tls : .network, "\(target): \(failure.message)")
        case .proxyRefused(let what):
            return TransportError(.network, "\(target): \(what)")
        case .proxyAuthenticationRequired(let answer):
            return TransportError(.network, "\(target): \(String(decoding: answer.body, as: UTF8.self))")
        }
    }
}

/// One request's state shared by the task awaiting it, its cancellation handler and the queue
/// running it: the continuation (resumed once) and whether it was cancelled.
final class SocketExchange: Sendable {
    private struct State {
        var once: ResumeOnce<TransportResponse, any Error>?
        var cancelled = false
    }

    private let state = Mutex(State())
    private let waker: SocketWaker
    private let live: LiveCounts

    init(waker: SocketWaker, live: LiveCounts) {
        self.waker = waker
        self.live = live
        live.exchanges.add(1, ordering: .relaxed)
    }

    deinit {
        live.exchanges.subtract(1, ordering: .relaxed)
    }

    var isCancelled: Bool { state.withLock { $0.cancelled } }

    /// Keeps the continuation; false (and resumed at once) when the request was already cancelled.
    func begin(_ once: ResumeOnce<TransportResponse, any Error>, cancelled: @autoclosure () -> TransportError) -> Bool {
        let early = state.withLock { s -> Bool in
            if s.cancelled { return true }
            s.once = once
            return false
        }
        if early { once.resume(throwing: cancelled()) }
        return !early
    }

    /// Ends the request now: the task resumes at once, the exchange on the queue stops at its next
    /// wait and closes the connection.
    func cancel(_ reason: TransportError) {
        let once = state.withLock { s in
            s.cancelled = true
            defer { s.once = nil }
            return s.once
        }
        waker.wake()
        once?.resume(throwing: reason)
    }

    func finish(_ result: Result<TransportResponse, any Error>) {
        let once = state.withLock { s in
            defer { s.once = nil }
            return s.once
        }
        once?.resume(with: result)
    }
}
