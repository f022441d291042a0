import Dispatch
import Foundation
import Glibc

/// Where a ``SocketTransport`` sends a URL's requests: host, port, `Host` field and request target,
/// worked out once per URL.
struct SocketEndpoint: Sendable {
    let url: URL
    /// The host name or address to resolve (an IPv6 address without its brackets).
    let host: String
    let port: UInt16
    /// The `Host` header field's value.
    let hostField: String
    /// The path and query as written in the URL ("/" when empty).
    let target: String
    /// Whether the URL is `https://`.
    let secure: Bool
    /// The transport's TLS context, for an `https://` URL.
    var tls: TLSContext?

    init(_ url: URL) throws(TransportError) {
        let scheme = url.scheme?.lowercased() ?? ""
        guard scheme == "http" || scheme == "https" else {
            throw TransportError(.network, "\(RedactedURL(url)): SocketTransport needs an http:// or https:// URL")
        }
        secure = scheme == "https"
        guard var host = url.host, !host.isEmpty else {
            throw TransportError(.network, "\(RedactedURL(url)): the URL has no host")
        }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let defaultPort = secure ? 443 : 80
        let port = url.port ?? defaultPort
        guard (1...65535).contains(port) else {
            throw TransportError(.network, "\(RedactedURL(url)): port \(port) is out of range")
        }
        self.url = url
        self.host = host
        self.port = UInt16(port)
        let shown = host.contains(":") ? "[\(host)]" : host
        hostField = port == defaultPort ? shown : "\(shown):\(port)"
        target = Self.target(of: url.absoluteString)
    }

    /// The path and query of `text` (everything after the authority, up to a fragment), exactly as
    /// written: percent escapes stay escaped.
    static func target(of text: String) -> String {
        var rest = Substring(text)
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }
        if let separator = rest.range(of: "://") { rest = rest[separator.upperBound...] }
        guard let start = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) else { return "/" }
        let target = rest[start...]
        return target.first == "?" ? "/" + target : String(target)
    }
}

/// Wakes a thread waiting in `poll` (a non-blocking socket pair): how a cancellation reaches a
/// blocked exchange.
final class SocketWaker: Sendable {
    /// The end `poll` watches; -1 when the pair could not be made (no file descriptor left): then
    /// waits are cut into slices of ``sliceWithoutPair`` milliseconds to notice a cancellation.
    let fd: Int32
    private let writeEnd: Int32
    static let sliceWithoutPair: UInt64 = 100

    init() {
        var ends: (Int32, Int32) = (-1, -1)
        let made = withUnsafeMutableBytes(of: &ends) { socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, $0.baseAddress!.assumingMemoryBound(to: Int32.self)) }
        fd = made == 0 ? ends.0 : -1
        writeEnd = made == 0 ? ends.1 : -1
    }

    deinit {
        if fd >= 0 { close(fd) }
        if writeEnd >= 0 { close(writeEnd) }
    }

    func wake() {
        var one: UInt8 = 1
        _ = write(writeEnd, &one, 1)
    }

    func drain() {
        var bytes = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        while withUnsafeMutableBytes(of: &bytes, { read(fd, $0.baseAddress, $0.count) }) > 0 {}
    }
}

/// One keep-alive HTTP/1.1 connection and its read buffer, used by one request at a time.
///
/// Confined to its transport's serial queue: only the exchange running there touches it.
final class SocketConnection: @unchecked Sendable {
    /// Why an exchange failed, before it is told to people as a ``TransportError``.
    enum Failure: Error {
        case timeout
        case cancelled
        /// A system call failed: what was being done and `errno`.
        case system(String, Int32)
        /// The connection closed (or was reset) before any byte of the answer: a reused
        /// connection may be stale, and the request can be sent once more on a new one.
        case closedBeforeAnswer(Int32?)
        case malformed(String)
        case resolve(String)
        /// TLS failed (see ``TLSFailure/isConfiguration``).
        case tls(TLSFailure)
    }

    private(set) var fd: Int32 = -1
    /// How the open connection's bytes are read and written: the socket itself or TLS over it.
    private var stream: (any ByteStream)?
    /// The host and port the open connection goes to.
    private var peer: (host: String, port: UInt16, secure: Bool)?
    let waker: SocketWaker
    private var parser: HTTPResponseParser
    private let buffer: UnsafeMutableRawBufferPointer
    /// Connections opened so far (for tests and the benchmark).
    private(set) var opened = 0

    init(maxResponseBodyBytes: Int, readBufferBytes: Int = 64 << 10) {
        waker = SocketWaker()
        parser = HTTPResponseParser(maxBodyBytes: maxResponseBodyBytes)
        buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: readBufferBytes, alignment: 16)
    }

    deinit {
        disconnect()
        buffer.deallocate()
    }

    func disconnect() {
        stream?.close()
        stream = nil
        if fd >= 0 { close(fd) }
        fd = -1
        peer = nil
        parser.reset()
    }

    /// Sends `request` to `endpoint` and reads its answer, before `deadline` (uptime nanoseconds).
    ///
    /// A connection that served earlier requests is reused; if it turns out closed before any
    /// byte of the answer arrived, the request is sent once more on a new connection.
    func exchange(_ request: TransportRequest, to endpoint: SocketEndpoint, deadline: UInt64, isCancelled: () -> Bool) throws(Failure) -> TransportResponse {
        let head = try Self.head(request, endpoint)
        var retried = false
        while true {
            if fd >= 0, peer?.host != endpoint.host || peer?.port != endpoint.port || peer?.secure != endpoint.secure || peerHasClosed() { disconnect() }
            let reused = fd >= 0
            if !reused { try connect(endpoint, deadline: deadline, isCancelled: isCancelled) }
            do {
                try write(head, request.body, deadline: deadline, isCancelled: isCancelled)
                return try readAnswer(deadline: deadline, isCancelled: isCancelled)
            } catch {
                disconnect()
                if case .closedBeforeAnswer = error, reused, !retried {
                    retried = true
                    continue
                }
                throw error
            }
        }
    }

    // MARK: - Request

    /// The request line and header fields. The transport sets `Host` (unless the request has one)
    /// and `Content-Length`; a request's own `Content-Length`, `Transfer-Encoding` and `Connection`
    /// are left out.
    static func head(_ request: TransportRequest, _ endpoint: SocketEndpoint) throws(Failure) -> [UInt8] {
        var text = "\(request.method) \(endpoint.target) HTTP/1.1\r\n"
        if request.header("Host") == nil { text += "Host: \(endpoint.hostField)\r\n" }
        for (name, value) in request.headers {
            guard !name.isEmpty, !name.utf8.contains(where: { $0 <= 0x20 || $0 == UInt8(ascii: ":") || $0 == 0x7F }) else {
                throw .malformed("header name '\(name)' is empty or holds a space, colon or control character")
            }
            guard !value.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0 }) else {
                throw .malformed("the value of header '\(name)' holds a line break")
            }
            switch name.lowercased() {
            case "content-length", "transfer-encoding", "connection": continue
            default: text += "\(name): \(value)\r\n"
            }
        }
        text += "Content-Length: \(request.body.count)\r\n\r\n"
        return Array(text.utf8)
    }

    // MARK: - Connecting

    private func connect(_ endpoint: SocketEndpoint, deadline: UInt64, isCancelled: () -> Bool) throws(Failure) {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_protocol = Int32(IPPROTO_TCP)
        hints.ai_flags = AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let resolved = getaddrinfo(endpoint.host, String(endpoint.port), &hints, &list)
        guard resolved == 0, let first = list else {
            let reason = resolved == EAI_SYSTEM ? String(cString: strerror(errno)) : String(cString: gai_strerror(resolved))
            throw .resolve("cannot resolve host '\(endpoint.host)': \(reason)")
        }
        defer { freeaddrinfo(first) }
        var lastError: Int32 = ECONNREFUSED
        var next: UnsafeMutablePointer<addrinfo>? = first
        while let info = next {
            next = info.pointee.ai_next
            let s = socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), info.pointee.ai_protocol)
            guard s >= 0 else { lastError = errno; continue }
            var result = Glibc.connect(s, info.pointee.ai_addr, info.pointee.ai_addrlen)
            if result != 0 && errno == EINPROGRESS {
                do {
                    try wait(on: s, for: Int16(POLLOUT), deadline: deadline, isCancelled: isCancelled)
                } catch {
                    close(s)
                    throw error
                }
                var problem: Int32 = 0
                var length = socklen_t(MemoryLayout<Int32>.size)
                getsockopt(s, SOL_SOCKET, SO_ERROR, &problem, &length)
                if problem == 0 { result = 0 } else { errno = problem }
            }
            guard result == 0 else {
                lastError = errno
                close(s)
                continue
            }
            var yes: Int32 = 1
            setsockopt(s, Int32(IPPROTO_TCP), TCP_NODELAY, &yes, socklen_t(MemoryLayout<Int32>.size))
            fd = s
            peer = (endpoint.host, endpoint.port, endpoint.secure)
            stream = PlainStream(fd: s)
            opened += 1
            guard endpoint.secure else { return }
            do {
                try startTLS(host: endpoint.host, port: endpoint.port, context: endpoint.tls, deadline: deadline, isCancelled: isCancelled)
            } catch {
                disconnect()
                throw error
            }
            return
        }
        throw .system("connect", lastError)
    }

    /// Whether the server closed the idle connection (or sent something unasked, which leaves it
    /// unusable too).
    private func peerHasClosed() -> Bool {
        !(stream?.isIdle() ?? false)
    }

    /// Starts TLS on the connected socket (directly, or through a proxy's tunnel): the handshake
    /// checks the certificate against `host` (as written in the URL) and resumes the session of
    /// the last connection to `host` and `port`. From then on requests go encrypted.
    func startTLS(host: String, port: UInt16, context: TLSContext?, deadline: UInt64, isCancelled: () -> Bool) throws(Failure) {
        guard let context else { throw .tls(TLSFailure(message: "no TLS context for \(host)", isConfiguration: true)) }
        let tls: TLSStream
        do { tls = try TLSStream(fd: fd, host: host, port: port, context: context) } catch { throw .tls(error) }
        stream = tls
        while true {
            switch tls.handshake() {
            case .done: return
            case .wait(let events): try wait(on: fd, for: events, deadline: deadline, isCancelled: isCancelled)
            case .failed(let code): throw .system("TLS handshake", code)
            case .tls(let failure): throw .tls(failure)
            }
        }
    }

    // MARK: - Waiting

    /// Waits until `socket` is ready for `events`, the deadline passes or the request is cancelled.
    func wait(on socket: Int32, for events: Int16, deadline: UInt64, isCancelled: () -> Bool) throws(Failure) {
        while true {
            if isCancelled() { throw .cancelled }
            let now = DispatchTime.now().uptimeNanoseconds
            guard now < deadline else { throw .timeout }
            var milliseconds = min((deadline - now + 999_999) / 1_000_000, UInt64(Int32.max))
            if waker.fd < 0 { milliseconds = min(milliseconds, SocketWaker.sliceWithoutPair) }
            var fds = (pollfd(fd: socket, events: events, revents: 0), pollfd(fd: waker.fd, events: Int16(POLLIN), revents: 0))
            let ready = withUnsafeMutableBytes(of: &fds) {
                poll($0.baseAddress!.assumingMemoryBound(to: pollfd.self), 2, Int32(milliseconds))
            }
            if ready < 0 {
                if errno == EINTR { continue }
                throw .system("poll", errno)
            }
            if fds.1.revents != 0 { waker.drain() }
            if fds.0.revents != 0 { return }
        }
    }

    // MARK: - Writing

    private func write(_ head: [UInt8], _ body: [UInt8], deadline: UInt64, isCancelled: () -> Bool) throws(Failure) {
        guard let stream else { throw .closedBeforeAnswer(nil) }
        let total = head.count + body.count
        var sent = 0
        while sent < total {
            let result = head.withUnsafeBytes { h in
                body.withUnsafeBytes { b in
                    sent < h.count
                        ? stream.write(UnsafeRawBufferPointer(rebasing: h[sent...]), b)
                        : stream.write(UnsafeRawBufferPointer(start: nil, count: 0), UnsafeRawBufferPointer(rebasing: b[(sent - h.count)...]))
                }
            }
            switch result {
            case .done(let n): sent += n
            case .wait(let events): try wait(on: fd, for: events, deadline: deadline, isCancelled: isCancelled)
            case .failed(let code) where code == EPIPE || code == ECONNRESET || code == ENOTCONN: throw .closedBeforeAnswer(code)
            case .failed(let code): throw .system("send", code)
            case .tls(let failure): throw .tls(failure)
            }
        }
    }

    // MARK: - Reading

    private func readAnswer(deadline: UInt64, isCancelled: () -> Bool) throws(Failure) -> TransportResponse {
        parser.reset()
        while true {
            guard let stream else { throw .closedBeforeAnswer(nil) }
            switch stream.read(into: buffer) {
            case .done(let n) where n > 0:
                let used: Int
                do {
                    used = try parser.consume(UnsafeRawBufferPointer(rebasing: buffer[..<n]))
                } catch {
                    throw .malformed(error.description)
                }
                guard parser.isComplete else { continue }
                // Bytes after the answer were not asked for: the connection cannot be trusted.
                let reusable = parser.keepsAlive && used == n
                let response = parser.takeResponse()
                if !reusable { disconnect() }
                return response
            case .done:
                if !parser.receivedAny { throw .closedBeforeAnswer(nil) }
                do { try parser.finish() } catch { throw .malformed(error.description) }
                let response = parser.takeResponse()
                disconnect()
                return response
            case .wait(let events): try wait(on: fd, for: events, deadline: deadline, isCancelled: isCancelled)
            case .failed(let code) where code == ECONNRESET && !parser.receivedAny: throw .closedBeforeAnswer(ECONNRESET)
            case .failed(let code): throw .system("recv", code)
            case .tls(let failure): throw .tls(failure)
            }
        }
    }
}
