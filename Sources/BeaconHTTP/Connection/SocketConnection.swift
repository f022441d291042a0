import Dispatch
import Foundation
import Glibc

/// One keep-alive HTTP/1.1 connection and its read buffer, used by one request at a time.
///
/// Confined to its transport's serial queue: only the exchange running there touches it.
package final class SocketConnection: @unchecked Sendable {
    /// Why an exchange failed, before it is told to people as a ``TransportError``.
    package enum Failure: Error {
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
        /// The proxy refused to open a tunnel: what it said.
        case proxyRefused(String)
        /// The proxy asked for credentials (407) to open a tunnel: its answer, told as one.
        case proxyAuthenticationRequired(TransportResponse)
    }

    private(set) var fd: Int32 = -1
    /// How the open connection's bytes are read and written: the socket itself or TLS over it.
    var stream: (any ByteStream)?
    /// The ``SocketEndpoint/connectionKey`` of the endpoint the open connection was made for.
    var peer: String?
    package let waker: SocketWaker
    private var parser: HTTPResponseParser
    let buffer: UnsafeMutableRawBufferPointer
    /// Connections opened so far (for tests and the benchmark).
    package private(set) var opened = 0
    /// How host names are looked up (`getaddrinfo`; tests slow it down or script it).
    package let lookup: SocketResolver.Lookup
    /// Where lookups run (Beacon's bounded pool of lookup threads).
    package let runLookup: SocketResolver.Runner
    /// Requests written by ``writePipelined(_:to:deadline:isCancelled:)`` and not answered yet.
    package var outstanding = 0
    /// The answers to pipelined requests, and the bytes read after the last one.
    var pipelined: PipelinedAnswers

    /// Work to do once a request is written, before its answer is waited for: Beacon's uploader
    /// reads its next batch then, on this thread (`IOThread.runDeferred`).
    let beforeAwaitingAnswer: () -> Void

    package init(maxResponseBodyBytes: Int, readBufferBytes: Int = 64 << 10, lookup: @escaping SocketResolver.Lookup = SocketResolver.system, runLookup: @escaping SocketResolver.Runner, beforeAwaitingAnswer: @escaping () -> Void = {}) {
        self.lookup = lookup
        self.runLookup = runLookup
        self.beforeAwaitingAnswer = beforeAwaitingAnswer
        waker = SocketWaker()
        parser = HTTPResponseParser(maxBodyBytes: maxResponseBodyBytes)
        pipelined = PipelinedAnswers(maxBodyBytes: maxResponseBodyBytes)
        buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: readBufferBytes, alignment: 16)
    }

    deinit {
        disconnect()
        buffer.deallocate()
    }

    package func disconnect() {
        stream?.close()
        stream = nil
        if fd >= 0 { close(fd) }
        fd = -1
        peer = nil
        parser.reset()
        pipelined.reset()
        outstanding = 0
    }

    /// Sends `request` to `endpoint` and reads its answer, before `deadline` (uptime nanoseconds).
    ///
    /// A connection that served earlier requests is reused; if it turns out closed before any
    /// byte of the answer arrived, the request is sent once more on a new connection.
    package func exchange(_ request: TransportRequest, to endpoint: SocketEndpoint, deadline: UInt64, isCancelled: () -> Bool) throws(Failure) -> TransportResponse {
        let head = try Self.head(request, endpoint)
        var retried = false
        while true {
            // A connection with pipelined requests outstanding cannot carry a request of its own.
            if fd >= 0, peer != endpoint.connectionKey || outstanding > 0 || !pipelined.leftover.isEmpty || peerHasClosed() { disconnect() }
            let reused = fd >= 0
            if !reused {
                do {
                    try connect(endpoint, deadline: deadline, isCancelled: isCancelled)
                } catch .proxyAuthenticationRequired(let answer) {
                    return answer
                }
            }
            do {
                parser.reset()
                if let early = try write(head, request.content, deadline: deadline, isCancelled: isCancelled) {
                    // Answered before the whole body was sent: the connection cannot carry another request.
                    disconnect()
                    return early
                }
                // While the collector answers: work the thread kept for then (the uploader reads
                // its next batch), on this thread.
                beforeAwaitingAnswer()
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
        // Built once per request: bytes appended in place, no string interpolation.
        var out: [UInt8] = []
        out.reserveCapacity(128 + endpoint.target.utf8.count + request.headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 4 })
        func line(_ name: String, _ value: String) {
            out.append(contentsOf: name.utf8)
            out.append(contentsOf: ": ".utf8)
            out.append(contentsOf: value.utf8)
            out.append(contentsOf: "\r\n".utf8)
        }
        out.append(contentsOf: request.method.utf8)
        out.append(UInt8(ascii: " "))
        out.append(contentsOf: endpoint.target.utf8)
        out.append(contentsOf: " HTTP/1.1\r\n".utf8)
        if request.headers["Host"] == nil { line("Host", endpoint.hostField) }
        if let authorization = endpoint.authorization, request.headers["Authorization"] == nil { line("Authorization", authorization) }
        if let authorization = endpoint.proxyAuthorization { line("Proxy-Authorization", authorization) }
        for (name, value) in request.headers {
            guard HTTPToken.isToken(name.utf8) else {
                throw .malformed("header name '\(name)' is not an HTTP token (empty, or holding a space, separator or control character)")
            }
            guard !value.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0 }) else {
                throw .malformed("the value of header '\(name)' holds a line break")
            }
            if HTTPFieldName.equal(name, "Content-Length") || HTTPFieldName.equal(name, "Transfer-Encoding") || HTTPFieldName.equal(name, "Connection") { continue }
            line(name, value)
        }
        line("Content-Length", String(request.content.count))
        out.append(contentsOf: "\r\n".utf8)
        return out
    }

    // MARK: - Connecting

    package func connect(_ endpoint: SocketEndpoint, deadline: UInt64, isCancelled: () -> Bool) throws(Failure) {
        let (host, port) = endpoint.connectsTo
        let addresses = try SocketResolver.resolve(host, port: port, lookup: lookup, on: runLookup, deadline: deadline, waker: waker, isCancelled: isCancelled)
        let s = try SocketConnector.connect(addresses, deadline: deadline, waker: waker, isCancelled: isCancelled)
        var yes: Int32 = 1
        setsockopt(s, Int32(IPPROTO_TCP), TCP_NODELAY, &yes, socklen_t(MemoryLayout<Int32>.size))
        fd = s
        peer = endpoint.connectionKey
        stream = PlainStream(fd: s)
        opened += 1
        do {
            if let proxy = endpoint.tunnel { try openTunnel(to: endpoint, through: proxy, deadline: deadline, isCancelled: isCancelled) }
            guard endpoint.secure else { return }
            try startTLS(host: endpoint.host, port: endpoint.port, context: endpoint.tls, deadline: deadline, isCancelled: isCancelled)
        } catch {
            disconnect()
            throw error
        }
    }

    /// Asks `proxy` for a tunnel to the collector (`CONNECT host:port`, RFC 9110 §9.3.6); the
    /// connection then carries TLS to the collector. A 407 is returned as the request's answer
    /// (a configuration problem: the proxy's credentials); any other refusal names the proxy.
    private func openTunnel(to endpoint: SocketEndpoint, through proxy: ProxyRoute.Proxy, deadline: UInt64, isCancelled: () -> Bool) throws(Failure) {
        let authority = "\(endpoint.host.contains(":") ? "[\(endpoint.host)]" : endpoint.host):\(endpoint.port)"
        var text = "CONNECT \(authority) HTTP/1.1\r\nHost: \(authority)\r\n"
        if let authorization = proxy.authorization { text += "Proxy-Authorization: \(authorization)\r\n" }
        text += "\r\n"
        parser.reset()
        parser.answersConnect = true
        let answer: TransportResponse
        do {
            if let early = try write(Array(text.utf8), .bytes([]), deadline: deadline, isCancelled: isCancelled) {
                answer = early
            } else {
                answer = try readAnswer(deadline: deadline, isCancelled: isCancelled)
            }
        } catch .closedBeforeAnswer(let code) {
            throw .proxyRefused("proxy \(proxy) closed the connection without answering CONNECT \(authority)\(code.map { " (\(String(cString: strerror($0))))" } ?? "")")
        }
        let said = answer.body.isEmpty ? "" : ": '\(HTTPResponseParser.excerpt(answer.body))'"
        switch answer.status {
        case 200..<300:
            // Bytes after the proxy's answer would be the collector's, which speaks only after TLS starts.
            guard fd >= 0 else { throw .proxyRefused("proxy \(proxy) sent more than its answer to CONNECT \(authority)") }
        case 407:
            disconnect()
            let message = "proxy \(proxy) answered 407 (Proxy Authentication Required) to CONNECT \(authority): put the proxy's user and password in the proxy URL (http://user:password@proxy:port)\(said)"
            throw .proxyAuthenticationRequired(TransportResponse(status: 407, headers: answer.headers, body: Array(message.utf8)))
        default:
            disconnect()
            throw .proxyRefused("proxy \(proxy) answered \(answer.status) to CONNECT \(authority)\(said)")
        }
    }

    /// Whether the server closed the idle connection (or sent something unasked, which leaves it
    /// unusable too).
    func peerHasClosed() -> Bool {
        !(stream?.isIdle() ?? false)
    }

    /// Starts TLS on the connected socket (directly, or through a proxy's tunnel): the handshake
    /// checks the certificate against `host` (as written in the URL) and resumes the session of
    /// the last connection to `host` and `port`. From then on requests go encrypted.
    func startTLS(host: String, port: UInt16, context: (any TLSProvider)?, deadline: UInt64, isCancelled: () -> Bool) throws(Failure) {
        guard let context else { throw .tls(TLSFailure(message: "no TLS context for \(host)", isConfiguration: true)) }
        let tls: any TLSByteStream
        do { tls = try context.stream(fd: fd, host: host, port: port) } catch { throw .tls(error) }
        stream = tls
        while true {
            switch tls.handshake() {
            case .done: return
            case .wait(let events): try wait(on: fd, for: events, deadline: deadline, isCancelled: isCancelled)
            case .failed(let code): throw .system("TLS handshake", code)
            case .tls(let failure): throw .tls(failure)
            case .truncated: throw .tls(TLSFailure(message: "the TLS handshake with \(host):\(port) failed: the server closed the connection", isConfiguration: false))
            }
        }
    }

    // MARK: - Waiting

    /// Waits until `socket` is ready for `events`, the deadline passes or the request is cancelled;
    /// the events that are ready.
    @discardableResult
    func wait(on socket: Int32, for events: Int16, deadline: UInt64, isCancelled: () -> Bool) throws(Failure) -> Int16 {
        var fds = [pollfd(fd: socket, events: events, revents: 0)]
        while try !SocketWait.poll(&fds, until: deadline, deadline: deadline, waker: waker, isCancelled: isCancelled) {}
        return fds[0].revents
    }

    // MARK: - Writing

    /// One write of `head` and `body` from byte `sent` of the two (one `sendmsg` of both, or of
    /// what is left of the body).
    static func write(_ head: [UInt8], _ body: RequestBody, from sent: Int, to stream: any ByteStream) -> StreamResult {
        head.withUnsafeBytes { h in
            body.withUnsafeBytes { b in
                sent < h.count
                    ? stream.write(UnsafeRawBufferPointer(rebasing: h[sent...]), b)
                    : stream.write(UnsafeRawBufferPointer(start: nil, count: 0), UnsafeRawBufferPointer(rebasing: b[(sent - h.count)...]))
            }
        }
    }

    /// Writes the request; returns an answer that came before the whole body was sent, if any.
    ///
    /// A server may answer before it has read the body, a 413 or a 401 from the head alone, and
    /// then stop reading or close (RFC 9112 §9.5). So with `watchingForAnswer`, while the body
    /// waits for room in the send buffer the socket is watched for an answer too, and when the
    /// peer resets or closes the connection mid-body, the answer it sent first is read from the
    /// socket before the failure is believed. Without it (a pipelined request, whose answer comes
    /// after those of the requests before it), answers that arrive meanwhile stay in the socket
    /// for ``readPipelined(deadline:isCancelled:)`` and a collector that closes fails the write.
    func write(_ head: [UInt8], _ body: RequestBody, deadline: UInt64, isCancelled: () -> Bool,
               watchingForAnswer: Bool = true) throws(Failure) -> TransportResponse? {
        guard let stream else { throw .closedBeforeAnswer(nil) }
        /// The answer the peer sent before it stopped taking the request, else the failure `code`.
        func answerSentFirst(else code: Int32) throws(Failure) -> TransportResponse? {
            guard watchingForAnswer else { throw .closedBeforeAnswer(code) }
            do {
                return try receive(deadline: deadline, isCancelled: isCancelled, waiting: true)
            } catch .closedBeforeAnswer(nil) {
                throw .closedBeforeAnswer(code)
            }
        }
        let total = head.count + body.count
        var sent = 0
        while sent < total {
            switch Self.write(head, body, from: sent, to: stream) {
            case .done(let n) where n > 0: sent += n
            case .done, .truncated:
                // Nothing moved (a TLS write after the peer closed): an answer it sent first is
                // read, else the request failed; never a loop that writes nothing.
                return try answerSentFirst(else: EPIPE)
            case .wait(let events):
                let watched = watchingForAnswer ? events | Int16(POLLIN) : events
                let ready = try wait(on: fd, for: watched, deadline: deadline, isCancelled: isCancelled)
                if watchingForAnswer, ready & Int16(POLLIN) != 0, events & Int16(POLLIN) == 0,
                   let answer = try receive(deadline: deadline, isCancelled: isCancelled, waiting: false) {
                    return answer
                }
            case .failed(let code) where code == EPIPE || code == ECONNRESET || code == ENOTCONN:
                return try answerSentFirst(else: code)
            case .failed(let code): throw .system("send", code)
            case .tls(let failure): throw .tls(failure)
            }
        }
        return nil
    }

    // MARK: - Reading

    /// What a read that brought no bytes and no wait means: the peer's end without TLS's
    /// close_notify (`truncated`), a reset, another error, TLS failing.
    static func failure(reading result: StreamResult, receivedAny: Bool) -> Failure {
        switch result {
        case .truncated where !receivedAny: return .closedBeforeAnswer(nil)
        case .truncated:
            return .malformed("the connection was closed without TLS close_notify before the answer was complete (its end cannot be trusted, RFC 9112 §9.8)")
        case .failed(let code) where code == ECONNRESET && !receivedAny: return .closedBeforeAnswer(ECONNRESET)
        case .failed(let code): return .system("recv", code)
        case .tls(let failure): return .tls(failure)
        case .done, .wait: preconditionFailure("Invalid state: a read that moved bytes or waits is not a failure")
        }
    }

    private func readAnswer(deadline: UInt64, isCancelled: () -> Bool) throws(Failure) -> TransportResponse {
        // Waiting, `receive` returns only with an answer.
        try receive(deadline: deadline, isCancelled: isCancelled, waiting: true)!
    }

    /// Reads the answer on from what the parser has: the whole answer, or nil when nothing more
    /// can be read now and `waiting` is false. A connection that cannot carry another request after
    /// the answer is closed.
    private func receive(deadline: UInt64, isCancelled: () -> Bool, waiting: Bool) throws(Failure) -> TransportResponse? {
        while true {
            guard let stream else { throw .closedBeforeAnswer(nil) }
            let result = stream.read(into: buffer)
            switch result {
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
            case .wait(let events):
                guard waiting else { return nil }
                try wait(on: fd, for: events, deadline: deadline, isCancelled: isCancelled)
            case .truncated, .failed, .tls:
                throw Self.failure(reading: result, receivedAny: parser.receivedAny)
            }
        }
    }
}
