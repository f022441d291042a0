import BeaconHTTP
import Foundation
import Glibc
import Synchronization

/// A small HTTP/1.1 collector on 127.0.0.1 for tests, the benchmark and `beacon collect`.
///
/// This module is internal to the package: users reach it through `BeaconTesting`, which
/// re-exports it; the `beacon` tool imports it directly.
///
/// It accepts POSTs with `Content-Length` or chunked bodies (gzip decoded), keeps connections
/// alive, records every request with its headers and events, and answers as scripted: statuses,
/// delays, `Retry-After`, dropped connections, no answer at all, 413 above a body size, or 400 for
/// bodies holding a marker. Each connection is served by its own thread with blocking POSIX
/// socket calls.
///
/// ```swift
/// let collector = try LoopbackCollector()
/// collector.enqueue(.status(503, headers: ["Retry-After": "1"]))
/// // … upload to collector.url …
/// let events = collector.acceptedEvents
/// collector.stop()
/// ```
public final class LoopbackCollector: Sendable {
    /// One scripted answer.
    public indirect enum Reply: Sendable {
        /// Answer with this status, extra headers and body.
        case status(Int, headers: HTTPHeaders = [:], body: String = "")
        /// Wait, then answer with `reply`.
        case delayed(Duration, Reply)
        /// Close the connection without answering (after reading the request).
        case dropConnection
        /// Never answer; the connection stays open until the client gives up or the collector stops.
        case never
    }

    /// One request as received.
    public struct Request: Sendable {
        /// The request method and path.
        public var method: String
        public var path: String
        /// Header fields in order, names as the client spelled them (look them up in any case:
        /// `headers["content-type"]`).
        public var headers: HTTPHeaders
        /// The body as received (compressed when `content-encoding` is gzip).
        public var rawBody: [UInt8]
        /// The body after gzip decoding.
        public var body: [UInt8]
        /// The events in the body (nil when it is not a batch).
        public var events: [[UInt8]]?
        /// The status answered; nil when the collector dropped the connection or never answered.
        public var status: Int?
    }

    struct State {
        var script: [Reply] = []
        var defaultReply: Reply = .status(200)
        var rejectMarker: [UInt8]?
        var maxBodyBytes: Int?
        var maxDecodedBodyBytes = 256 << 20
        var clockOffset: Duration = .zero
        var requests: [Request] = []
        var connections: Set<Int32> = []
        var stopped = false
        var watchers: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
        var onRequest: (@Sendable (Request) -> Void)?
        var retainsBodies = true
        var acceptedEventCount = 0
        var receivedBodyBytes = 0
    }

    let state = Mutex(State())
    let listener: Int32
    /// The TCP port the collector listens on.
    public let port: UInt16

    /// Listens on 127.0.0.1:`port` (0 picks a free port) and starts serving.
    ///
    /// - Parameter onRequest: called on the connection's thread for every request that gets an
    ///   answer, just before the answer is sent (for example to write accepted events out).
    public convenience init(port: UInt16 = 0, onRequest: (@Sendable (Request) -> Void)? = nil) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Self.error("socket") }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else {
            let error = Self.error("bind on 127.0.0.1:\(port)")
            close(fd)
            throw error
        }
        try self.init(boundSocket: fd, onRequest: onRequest)
    }

    /// Listens on `fd`, a TCP socket already bound, and starts serving; the collector owns `fd`
    /// from here on (closed if listening fails). For tests that keep a port from every other
    /// server while their collector is away, then bring it back on that very port.
    package init(boundSocket fd: Int32, onRequest: (@Sendable (Request) -> Void)? = nil) throws {
        guard listen(fd, 128) == 0 else {
            let error = Self.error("listen on 127.0.0.1:\(ListeningSocket.port(of: fd))")
            close(fd)
            throw error
        }
        self.listener = fd
        self.port = ListeningSocket.port(of: fd)
        state.withLock { $0.onRequest = onRequest }
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "beacon.collector.accept"
        thread.start()
    }

    deinit {
        stop()
    }

    static func error(_ what: String) -> any Error {
        NSError(domain: "LoopbackCollector", code: Int(errno), userInfo: [NSLocalizedDescriptionKey: "\(what) failed: \(String(cString: strerror(errno)))"])
    }

    /// `http://127.0.0.1:<port>/events`.
    public var url: URL { URL(string: "http://127.0.0.1:\(port)/events")! }

    // MARK: Script

    /// Adds answers to the script; they are used in order, one per request, before `defaultReply`.
    public func enqueue(_ replies: Reply...) {
        state.withLock { $0.script.append(contentsOf: replies) }
    }

    /// The answer when the script is empty. Default 200.
    public var defaultReply: Reply {
        get { state.withLock { $0.defaultReply } }
        set { state.withLock { $0.defaultReply = newValue } }
    }

    /// Bodies (after gzip decoding) containing this text are answered 400, before the script.
    public var rejectMarker: String? {
        get { state.withLock { $0.rejectMarker.map { String(decoding: $0, as: UTF8.self) } } }
        set { state.withLock { $0.rejectMarker = newValue.map { Array($0.utf8) } } }
    }

    /// Bodies larger than this (as received) are answered 413, before the script.
    public var maxBodyBytes: Int? {
        get { state.withLock { $0.maxBodyBytes } }
        set { state.withLock { $0.maxBodyBytes = newValue } }
    }

    /// gzip bodies that inflate to more than this are answered 413, and no more than this is held
    /// while inflating one (a small body can inflate to gigabytes). Default 256 MiB.
    public var maxDecodedBodyBytes: Int {
        get { state.withLock { $0.maxDecodedBodyBytes } }
        set { state.withLock { $0.maxDecodedBodyBytes = newValue } }
    }

    /// Added to the collector's `Date` header, to simulate a collector whose clock is off.
    public var clockOffset: Duration {
        get { state.withLock { $0.clockOffset } }
        set { state.withLock { $0.clockOffset = newValue } }
    }

    /// Keep each request's bodies and events in ``requests`` (default true). Turn it off for long
    /// runs (the benchmark): requests then keep their headers and status only, and the counters
    /// below still count.
    public var retainsBodies: Bool {
        get { state.withLock { $0.retainsBodies } }
        set { state.withLock { $0.retainsBodies = newValue } }
    }

    // MARK: What was received

    /// The number of events in requests answered 2xx (duplicates included).
    public var acceptedEventCount: Int { state.withLock { $0.acceptedEventCount } }

    /// Body bytes received as sent on the wire (before gzip decoding), over all requests.
    public var receivedBodyBytes: Int { state.withLock { $0.receivedBodyBytes } }

    /// Every request received, in order.
    public var requests: [Request] { state.withLock { $0.requests } }

    /// The events of the requests answered 2xx, in order (duplicates included).
    public var acceptedEvents: [[UInt8]] {
        state.withLock { s in s.requests.filter { ($0.status ?? 0) / 100 == 2 }.flatMap { $0.events ?? [] } }
    }

    /// Returns once at least `count` requests were received (answered or not).
    public func waitForRequests(count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { s -> Bool in
                if s.requests.count >= count || s.stopped { return true }
                s.watchers.append((count, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }

    /// Stops listening and closes every connection. Calling it again does nothing.
    public func stop() {
        let watchers = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            if s.stopped { return [] }
            s.stopped = true
            let w = s.watchers.map(\.continuation)
            s.watchers = []
            // Under the lock a connection is closed under (see `serve`): a number in the set is
            // still this collector's socket, never one the process reused for another.
            for fd in s.connections { shutdown(fd, Int32(SHUT_RDWR)) }
            shutdown(listener, Int32(SHUT_RDWR))
            return w
        }
        for w in watchers { w.resume() }
    }

}
