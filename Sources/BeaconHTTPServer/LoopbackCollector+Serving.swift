import BeaconHTTP
import Foundation
import Glibc

// Serving: one thread accepts connections and one thread per connection reads requests, answers
// them as scripted and records them.
extension LoopbackCollector {
    func acceptLoop() {
        while let fd = ListeningSocket.accept(listener, stopped: { state.withLock { $0.stopped } }) {
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
            // Closed under the lock `stop()` shuts connections down under: once closed, the number
            // may belong to another socket of this process at once, which `stop()` must not touch.
            state.withLock { s in
                s.connections.remove(fd)
                close(fd)
            }
        }
        serve(CollectorSocket(fd: fd))
    }

    /// Reads requests from `connection` and answers them until it ends or a request cannot be
    /// read (then the connection is closed without an answer).
    func serve(_ connection: some CollectorConnection) {
        var reader = SocketReader(connection)
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
            var decodeError: GzipError?
            if head.headers["content-encoding"]?.lowercased() == "gzip" {
                let limit = state.withLock { $0.maxDecodedBodyBytes }
                do { request.body = try Gzip.decompress(raw, limit: limit) } catch { decodeError = error }
            }
            if decodeError == nil { request.events = BatchSplitter.events(in: request.body) }
            let reply = decide(request, decodeError: decodeError)
            var (status, headers, body, wait) = (0, HTTPHeaders(), "", Duration.zero)
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
                let microseconds = wait / .microseconds(1)
                usleep(microseconds >= Double(UInt32.max) ? .max : UInt32(microseconds))
            }
            if drop { return }
            if hang {
                // Hold the connection until the client closes it or the collector stops.
                var scratch = [UInt8](repeating: 0, count: 4096)
                while scratch.withUnsafeMutableBytes({ reader.connection.receive(into: $0) }) > 0 {}
                return
            }
            let offset = state.withLock { $0.clockOffset }
            var response = "HTTP/1.1 \(status) \(Self.reasonPhrase(status))\r\n"
            response += "Date: \(Self.httpDate(Date().addingTimeInterval(offset / .seconds(1))))\r\n"
            response += "Content-Length: \(body.utf8.count)\r\n"
            for (name, value) in headers { response += "\(name): \(value)\r\n" }
            let closeAfter = head.headers["connection"]?.lowercased() == "close"
            response += closeAfter ? "Connection: close\r\n\r\n" : "Connection: keep-alive\r\n\r\n"
            if let onRequest = state.withLock({ $0.onRequest }) { onRequest(request) }
            guard reader.send(Array(response.utf8) + Array(body.utf8)) else { return }
            if closeAfter { return }
        }
    }

    func decide(_ request: Request, decodeError: GzipError?) -> Reply {
        state.withLock { s -> Reply in
            if let decodeError, decodeError.exceedsLimit {
                return .status(413, body: "the gzip body of \(request.rawBody.count) bytes inflates to more than \(s.maxDecodedBodyBytes) bytes, the collector's limit")
            }
            if let decodeError { return .status(400, body: "cannot decode the gzip body: \(decodeError.message)") }
            if let max = s.maxBodyBytes, request.rawBody.count > max {
                return .status(413, body: "body of \(request.rawBody.count) bytes is larger than \(max)")
            }
            if let marker = s.rejectMarker, ByteSearch.contains(request.body, marker) {
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
    public static func httpDate(_ date: Date) -> String { HTTPDate.format(date) }
}
