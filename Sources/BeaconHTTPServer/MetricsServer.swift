import BeaconHTTP
import Foundation
import Glibc
import Synchronization

/// A small HTTP/1.1 server for `GET /metrics` (`beacon send --metrics ADDR`): what `metrics`
/// answers for the scraper's `Accept` header (Prometheus' text format, or OpenMetrics when it asks
/// for it: `BeaconMetrics.ExpositionFormat(accept:)`).
///
/// One thread accepts connections and one short-lived thread serves each (blocking POSIX calls,
/// keep-alive honoured), as ``LoopbackCollector`` does; at most ``maxConnections`` at once, a
/// connection idle for 30 s is closed. `metrics` is called on the connection's thread for every
/// scrape. (BeaconTesting adds an `init` taking a `BeaconMetrics.ExpositionFormat` instead.)
///
/// ```swift
/// let server = try MetricsServer(address: "127.0.0.1:9464") { accept in
///     let format = BeaconMetrics.ExpositionFormat(accept: accept)
///     return (format.contentType, snapshot().prometheusText(format))
/// }
/// ```
public final class MetricsServer: Sendable {
    /// The most connections served at once; more are closed at once.
    public static let maxConnections = 16

    struct State {
        var connections: Set<Int32> = []
        var stopped = false
    }

    let state = Mutex(State())
    let listener: Int32
    let metrics: @Sendable (_ accept: String?) -> (contentType: String, body: String)
    /// The port it listens on (the one asked for, or the one the system picked for port 0).
    public let port: UInt16
    /// The address it listens on, `HOST:PORT`.
    public let address: String

    /// Listens on `address` (`HOST:PORT`, an IPv4 address such as `127.0.0.1:9464` or
    /// `0.0.0.0:9464`, or `:PORT` for every interface) and starts serving. `metrics` gets the
    /// scrape's `Accept` header and returns the answer's `Content-Type` and body.
    public init(address: String, metrics: @escaping @Sendable (_ accept: String?) -> (contentType: String, body: String)) throws {
        guard let colon = address.lastIndex(of: ":"), let port = UInt16(address[address.index(after: colon)...]) else {
            throw MetricsServerError("--metrics takes HOST:PORT (an IPv4 address and a port, e.g. 127.0.0.1:9464), not '\(address)'")
        }
        let host = address[..<colon].isEmpty ? "0.0.0.0" : String(address[..<colon])
        var ip = in_addr()
        guard inet_pton(AF_INET, host, &ip) == 1 else {
            throw MetricsServerError("--metrics: '\(host)' is not an IPv4 address (use 127.0.0.1 to serve this machine only, 0.0.0.0 for every interface)")
        }
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw MetricsServerError("socket() failed: \(String(cString: strerror(errno)))") }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var bindAddress = sockaddr_in()
        bindAddress.sin_family = sa_family_t(AF_INET)
        bindAddress.sin_port = port.bigEndian
        bindAddress.sin_addr = ip
        let bound = withUnsafePointer(to: &bindAddress) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            let reason = String(cString: strerror(errno))
            Glibc.close(fd)
            throw MetricsServerError("cannot listen on \(host):\(port) for --metrics: \(reason)\(errno == EADDRINUSE ? " (another process uses the port: pick another one)" : "")")
        }
        self.listener = fd
        self.port = ListeningSocket.port(of: fd)
        self.address = "\(host):\(self.port)"
        self.metrics = metrics
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "beacon.metrics.accept"
        thread.start()
    }

    deinit {
        stop()
    }

    /// Stops listening and closes every connection. Calling it again does nothing.
    public func stop() {
        state.withLock { s in
            if s.stopped { return }
            s.stopped = true
            for fd in s.connections { shutdown(fd, Int32(SHUT_RDWR)) }
            shutdown(listener, Int32(SHUT_RDWR))
        }
    }

    func acceptLoop() {
        while let fd = ListeningSocket.accept(listener, stopped: { state.withLock { $0.stopped } }) {
            let accepted = state.withLock { s -> Bool in
                guard !s.stopped, s.connections.count < Self.maxConnections else { return false }
                s.connections.insert(fd)
                return true
            }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            guard accepted else {
                Glibc.close(fd)
                if state.withLock({ $0.stopped }) { break }
                continue
            }
            var timeout = timeval(tv_sec: 30, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let thread = Thread { [self] in
                serve(fd)
                state.withLock { s in
                    s.connections.remove(fd)
                    Glibc.close(fd)
                }
            }
            thread.name = "beacon.metrics.connection"
            thread.stackSize = 256 * 1024
            thread.start()
        }
        Glibc.close(listener)
    }

    func serve(_ fd: Int32) {
        var reader = SocketReader(CollectorSocket(fd: fd))
        while let head = reader.readHead() {
            // A scrape has no body; anything else with one is read and answered 405.
            let length = Int(head.headers["content-length"] ?? "0") ?? 0
            guard length >= 0, length <= 1 << 20, reader.read(count: length) != nil else { return }
            let path = head.path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? head.path
            var status = 200, type = "text/plain; charset=utf-8", body = ""
            var allow = false
            if path != "/metrics" {
                (status, body) = (404, "not found: the metrics are at /metrics\n")
            } else if head.method != "GET" && head.method != "HEAD" {
                (status, body, allow) = (405, "only GET /metrics\n", true)
            } else {
                (type, body) = metrics(head.headers["accept"])
            }
            let bytes = Array(body.utf8)
            var response = "HTTP/1.1 \(status) \(status == 200 ? "OK" : status == 404 ? "Not Found" : "Method Not Allowed")\r\n"
            response += "Content-Type: \(type)\r\nContent-Length: \(bytes.count)\r\n"
            if allow { response += "Allow: GET, HEAD\r\n" }
            let closeAfter = head.headers["connection"]?.lowercased() == "close"
            response += closeAfter ? "Connection: close\r\n\r\n" : "\r\n"
            guard reader.send(Array(response.utf8) + (head.method == "HEAD" ? [] : bytes)) else { return }
            if closeAfter { return }
        }
    }
}

/// Why ``MetricsServer`` could not start, for people.
public struct MetricsServerError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
