import Beacon
import Foundation
import Glibc
import Synchronization

/// A small HTTP/1.1 collector on 127.0.0.1 for tests, the benchmark and `beacon collect`.
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
        case status(Int, headers: [String: String] = [:], body: String = "")
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
        /// Header fields, names lowercased.
        public var headers: [String: String]
        /// The body as received (compressed when `content-encoding` is gzip).
        public var rawBody: [UInt8]
        /// The body after gzip decoding.
        public var body: [UInt8]
        /// The events in the body (nil when it is not a batch).
        public var events: [[UInt8]]?
        /// The status answered; nil when the collector dropped the connection or never answered.
        public var status: Int?

        /// The value of header `name` (any case).
        public func header(_ name: String) -> String? { headers[name.lowercased()] }
    }

    struct State {
        var script: [Reply] = []
        var defaultReply: Reply = .status(200)
        var rejectMarker: [UInt8]?
        var maxBodyBytes: Int?
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
    public init(port: UInt16 = 0, onRequest: (@Sendable (Request) -> Void)? = nil) throws {
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
        guard bound == 0, listen(fd, 128) == 0 else {
            let error = Self.error("bind/listen on 127.0.0.1:\(port)")
            close(fd)
            throw error
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.listener = fd
        self.port = UInt16(bigEndian: actual.sin_port)
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
        let (connections, watchers) = state.withLock { s -> (Set<Int32>, [CheckedContinuation<Void, Never>]) in
            if s.stopped { return ([], []) }
            s.stopped = true
            let w = s.watchers.map(\.continuation)
            s.watchers = []
            return (s.connections, w)
        }
        for fd in connections { shutdown(fd, Int32(SHUT_RDWR)) }
        shutdown(listener, Int32(SHUT_RDWR))
        for w in watchers { w.resume() }
    }

    // MARK: Serving

    func acceptLoop() {
        while true {
            let fd = accept(listener, nil, nil)
            if fd < 0 {
                if errno == EINTR { continue }
                if state.withLock({ $0.stopped }) { break }
                if errno == EMFILE || errno == ENFILE { usleep(10_000); continue }
                break
            }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let accepted = state.withLock { s -> Bool in
                if s.stopped { return false }
                s.connections.insert(fd)
                return true
            }
            guard accepted else { close(fd); break }
            let thread = Thread { [self] in serve(fd) }
            thread.name = "beacon.collector.connection"
            thread.stackSize = 512 * 1024
            thread.start()
        }
        close(listener)
    }

    func serve(_ fd: Int32) {
        defer {
            state.withLock { _ = $0.connections.remove(fd) }
            close(fd)
        }
        var reader = SocketReader(fd: fd)
        while let head = reader.readHead() {
            if head.headers["expect"]?.lowercased() == "100-continue" {
                guard reader.send(Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)) else { return }
            }
            let raw: [UInt8]
            if head.headers["transfer-encoding"]?.lowercased().contains("chunked") == true {
                guard let chunked = reader.readChunked() else { return }
                raw = chunked
            } else {
                let length = Int(head.headers["content-length"] ?? "0") ?? -1
                guard length >= 0, let body = reader.read(count: length) else { return }
                raw = body
            }
            var request = Request(method: head.method, path: head.path, headers: head.headers, rawBody: raw, body: raw, events: nil, status: nil)
            var decodeError: String?
            if head.headers["content-encoding"]?.lowercased() == "gzip" {
                do { request.body = try Gzip.decompress(raw) } catch { decodeError = "\(error)" }
            }
            if decodeError == nil { request.events = BatchSplitter.events(in: request.body) }
            let reply = decide(request, decodeError: decodeError)
            var (status, headers, body, wait) = (0, [String: String](), "", Duration.zero)
            var drop = false
            var hang = false
            var current = reply
            resolving: while true {
                switch current {
                case .status(let s, let h, let b): (status, headers, body) = (s, h, b); break resolving
                case .delayed(let d, let next): wait += d; current = next
                case .dropConnection: drop = true; break resolving
                case .never: hang = true; break resolving
                }
            }
            if !drop && !hang { request.status = status }
            record(request)
            if wait > .zero {
                let micros = wait.components.seconds * 1_000_000 + wait.components.attoseconds / 1_000_000_000_000
                usleep(UInt32(clamping: micros))
            }
            if drop { return }
            if hang {
                // Hold the connection until the client closes it or the collector stops.
                var scratch = [UInt8](repeating: 0, count: 4096)
                while recv(fd, &scratch, scratch.count, 0) > 0 {}
                return
            }
            let offset = state.withLock { $0.clockOffset }
            var response = "HTTP/1.1 \(status) \(Self.reasonPhrase(status))\r\n"
            response += "Date: \(Self.httpDate(Date().addingTimeInterval(Double(offset.components.seconds) + Double(offset.components.attoseconds) / 1e18)))\r\n"
            response += "Content-Length: \(body.utf8.count)\r\n"
            for (name, value) in headers { response += "\(name): \(value)\r\n" }
            let closeAfter = head.headers["connection"]?.lowercased() == "close"
            response += closeAfter ? "Connection: close\r\n\r\n" : "Connection: keep-alive\r\n\r\n"
            if let onRequest = state.withLock({ $0.onRequest }) { onRequest(request) }
            guard reader.send(Array(response.utf8) + Array(body.utf8)) else { return }
            if closeAfter { return }
        }
    }

    func decide(_ request: Request, decodeError: String?) -> Reply {
        state.withLock { s -> Reply in
            if let decodeError { return .status(400, body: "cannot decode the gzip body: \(decodeError)") }
            if let max = s.maxBodyBytes, request.rawBody.count > max {
                return .status(413, body: "body of \(request.rawBody.count) bytes is larger than \(max)")
            }
            if let marker = s.rejectMarker, Self.contains(request.body, marker) {
                return .status(400, body: "refused: the batch holds the marker \(String(decoding: marker, as: UTF8.self))")
            }
            if !s.script.isEmpty { return s.script.removeFirst() }
            return s.defaultReply
        }
    }

    func record(_ request: Request) {
        let ready = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.receivedBodyBytes += request.rawBody.count
            if let status = request.status, status / 100 == 2 { s.acceptedEventCount += request.events?.count ?? 0 }
            if s.retainsBodies {
                s.requests.append(request)
            } else {
                var light = request
                light.rawBody = []
                light.body = []
                light.events = nil
                s.requests.append(light)
            }
            var ready: [CheckedContinuation<Void, Never>] = []
            s.watchers.removeAll { w in
                guard s.requests.count >= w.count else { return false }
                ready.append(w.continuation)
                return true
            }
            return ready
        }
        for continuation in ready { continuation.resume() }
    }

    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, haystack.count >= needle.count else { return needle.isEmpty }
        return search(haystack[...], needle) != nil
    }

    static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 202: "Accepted"
        case 204: "No Content"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 408: "Request Timeout"
        case 413: "Content Too Large"
        case 422: "Unprocessable Content"
        case 429: "Too Many Requests"
        case 500: "Internal Server Error"
        case 503: "Service Unavailable"
        default: "Status"
        }
    }

    /// IMF-fixdate, for example `Sun, 06 Nov 1994 08:49:37 GMT`.
    public static func httpDate(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) \(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }
}

/// Buffered blocking reads of HTTP/1.1 requests from one socket.
struct SocketReader {
    struct Head {
        var method: String
        var path: String
        var headers: [String: String]
    }

    let fd: Int32
    var buffer: [UInt8] = []
    var start = 0

    init(fd: Int32) { self.fd = fd }

    /// Reads more bytes; false at end of stream or error.
    mutating func fill() -> Bool {
        if start > 0 && start == buffer.count { buffer.removeAll(keepingCapacity: true); start = 0 }
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = recv(fd, &chunk, chunk.count, 0)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return false }
            buffer.append(contentsOf: chunk[0..<n])
            return true
        }
    }

    mutating func readHead() -> Head? {
        while true {
            if let end = find([0x0D, 0x0A, 0x0D, 0x0A]) {
                let text = String(decoding: buffer[start..<end], as: UTF8.self)
                start = end + 4
                var lines = text.components(separatedBy: "\r\n")
                let requestLine = lines.removeFirst().split(separator: " ")
                guard requestLine.count >= 2 else { return nil }
                var headers: [String: String] = [:]
                for line in lines {
                    guard let colon = line.firstIndex(of: ":") else { continue }
                    headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                }
                return Head(method: String(requestLine[0]), path: String(requestLine[1]), headers: headers)
            }
            if buffer.count - start > 1 << 20 { return nil }
            guard fill() else { return nil }
        }
    }

    func find(_ pattern: [UInt8]) -> Int? {
        guard buffer.count - start >= pattern.count else { return nil }
        return search(buffer[start...], pattern)
    }

    mutating func read(count: Int) -> [UInt8]? {
        while buffer.count - start < count {
            guard fill() else { return nil }
        }
        let bytes = Array(buffer[start..<(start + count)])
        start += count
        return bytes
    }

    mutating func readLine() -> String? {
        while true {
            if let end = find([0x0D, 0x0A]) {
                let line = String(decoding: buffer[start..<end], as: UTF8.self)
                start = end + 2
                return line
            }
            guard fill() else { return nil }
        }
    }

    mutating func readChunked() -> [UInt8]? {
        var body: [UInt8] = []
        while true {
            guard let line = readLine() else { return nil }
            let sizeText = line.split(separator: ";").first.map(String.init)?.trimmingCharacters(in: .whitespaces) ?? ""
            guard let size = Int(sizeText, radix: 16), size >= 0 else { return nil }
            if size == 0 {
                // Trailers until an empty line.
                while let trailer = readLine(), !trailer.isEmpty {}
                return body
            }
            guard let chunk = read(count: size), readLine() != nil else { return nil }
            body.append(contentsOf: chunk)
        }
    }

    func send(_ bytes: [UInt8]) -> Bool {
        var done = 0
        return bytes.withUnsafeBytes { raw -> Bool in
            while done < raw.count {
                let n = Glibc.send(fd, raw.baseAddress! + done, raw.count - done, Int32(MSG_NOSIGNAL))
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { return false }
                done += n
            }
            return true
        }
    }
}

/// The index in `haystack`'s base of the first occurrence of `needle`.
func search(_ haystack: ArraySlice<UInt8>, _ needle: [UInt8]) -> Int? {
    guard let first = needle.first, haystack.count >= needle.count else { return nil }
    return haystack.withUnsafeBufferPointer { h -> Int? in
        let last = h.count - needle.count
        var i = 0
        while i <= last {
            guard let p = memchr(h.baseAddress! + i, Int32(first), last - i + 1) else { return nil }
            i = h.baseAddress!.distance(to: p.assumingMemoryBound(to: UInt8.self))
            var match = true
            for k in 1..<needle.count where h[i + k] != needle[k] { match = false; break }
            if match { return haystack.startIndex + i }
            i += 1
        }
        return nil
    }
}
