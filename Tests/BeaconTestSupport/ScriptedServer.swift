import Foundation
import Glibc
import Synchronization

/// A TCP server on 127.0.0.1 that misbehaves as a test scripts it: each accepted connection is
/// handed to `serve` (with its number, from 0) on a thread of its own, with blocking socket calls.
public final class ScriptedServer: Sendable {
    public let listener: Int32
    public let port: UInt16
    private let counts = Mutex((accepted: 0, requests: 0))

    /// Listens on 127.0.0.1, or on ::1 with `ipv6`.
    public init(ipv6: Bool = false, serve: @escaping @Sendable (ScriptedConnection, Int) -> Void) throws {
        let (fd, port) = try ipv6 ? Self.boundIPv6() : Self.bound()
        guard listen(fd, 64) == 0 else { throw POSIXError(.EADDRINUSE) }
        listener = fd
        self.port = port
        let thread = Thread { [self] in
            while true {
                let client = accept(fd, nil, nil)
                if client < 0 {
                    if errno == EINTR { continue }
                    break
                }
                let index = counts.withLock { c in
                    defer { c.accepted += 1 }
                    return c.accepted
                }
                let connection = ScriptedConnection(fd: client, server: self)
                let worker = Thread {
                    serve(connection, index)
                    connection.close()
                }
                worker.start()
            }
        }
        thread.start()
    }

    /// A socket bound to a free port of 127.0.0.1, not listening yet.
    public static func bound() throws -> (Int32, UInt16) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound else { throw POSIXError(.EADDRINUSE) }
        return (fd, UInt16(bigEndian: address.sin_port))
    }

    /// A socket bound to a free port of ::1, not listening yet.
    public static func boundIPv6() throws -> (Int32, UInt16) {
        let fd = socket(AF_INET6, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in6()
        address.sin6_family = sa_family_t(AF_INET6)
        address.sin6_addr = in6addr_loopback
        var length = socklen_t(MemoryLayout<sockaddr_in6>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard fd >= 0, bound else {
            if fd >= 0 { close(fd) }
            throw POSIXError(.EADDRNOTAVAIL)
        }
        return (fd, UInt16(bigEndian: address.sin6_port))
    }

    /// A port of 127.0.0.1 where nothing listens (bound, read back and closed).
    public static func closedPort() throws -> UInt16 {
        let (fd, port) = try bound()
        Glibc.close(fd)
        return port
    }

    /// A URL of this server with a secret in its query, which no message may show.
    public var url: URL { URL(string: "http://127.0.0.1:\(port)/events?user=u&password=s3cret")! }

    public var accepted: Int { counts.withLock { $0.accepted } }
    public var requests: Int { counts.withLock { $0.requests } }

    fileprivate func countRequest() { counts.withLock { $0.requests += 1 } }

    public func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }
}

/// One connection of a ``ScriptedServer``.
public final class ScriptedConnection: @unchecked Sendable {
    private var fd: Int32
    private var pending: [UInt8] = []
    private let server: ScriptedServer?

    fileprivate init(fd: Int32, server: ScriptedServer) {
        self.fd = fd
        self.server = server
    }

    /// A connection this test made itself (to an upstream, say), with blocking calls.
    public init(connectedFD fd: Int32) {
        self.fd = fd
        server = nil
    }

    /// Reads the head of a request (up to its blank line), leaving its body unread; nil when the
    /// client closed first.
    public func readHead() -> String? {
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        var end: Int?
        while true {
            if let found = pending.firstRange(of: separator) { end = found.upperBound; break }
            guard fill() else { return nil }
        }
        let head = String(decoding: pending[..<end!], as: UTF8.self)
        pending.removeFirst(end!)
        return head
    }

    /// Reads one request (its head and a `Content-Length` body); nil when the client closed.
    public func readRequest() -> (head: String, body: [UInt8])? {
        guard let head = readHead() else { return nil }
        var length = 0
        for line in head.split(separator: "\r\n") where line.lowercased().hasPrefix("content-length:") {
            length = Int(line.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) ?? 0
        }
        while pending.count < length { guard fill() else { return nil } }
        let body = Array(pending[..<length])
        pending.removeFirst(length)
        server?.countRequest()
        return (head, body)
    }

    /// Exactly `count` bytes (fewer when the peer closes first).
    public func readBytes(_ count: Int) -> [UInt8] {
        while pending.count < count { guard fill() else { break } }
        let taken = Array(pending.prefix(count))
        pending.removeFirst(taken.count)
        return taken
    }

    /// What arrived (already read, or the next bytes to come); nil once the peer closed.
    public func readSome() -> [UInt8]? {
        if pending.isEmpty { guard fill() else { return nil } }
        defer { pending.removeAll() }
        return pending
    }

    /// Relays bytes both ways between this connection and `other` until either side closes, then
    /// closes `other`.
    public func relay(with other: ScriptedConnection) {
        // Joined through a lock rather than `Thread.isFinished`, whose hand-off ThreadSanitizer
        // does not see (it reported `other.close()` racing the thread's last read).
        let finished = ScriptedFlag()
        let back = Thread {
            while let chunk = other.readSome() { self.write(chunk) }
            shutdown(self.fd, Int32(SHUT_RDWR))
            finished.set()
        }
        back.start()
        while let chunk = readSome() { other.write(chunk) }
        shutdown(other.fd, Int32(SHUT_RDWR))
        while !finished.isSet { usleep(1000) }
        other.close()
    }

    /// Waits until the client closes the connection (reading and dropping whatever it sends).
    public func waitForClose() {
        while fill() { pending.removeAll() }
    }

    private func fill() -> Bool {
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { return false }
        pending += chunk[..<n]
        return true
    }

    public func write(_ text: String) { write(Array(text.utf8)) }

    public func write(_ bytes: [UInt8]) {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { return }
            sent += n
        }
    }

    /// An answer with a `Content-Length` body.
    public func answer(_ status: Int, _ body: String = "", headers: String = "") {
        write("HTTP/1.1 \(status) X\r\n\(headers)Content-Length: \(body.utf8.count)\r\n\r\n\(body)")
    }

    public func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }
}

/// A flag one thread sets and another polls, under a lock.
final class ScriptedFlag: Sendable {
    private let value = Mutex(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
}
