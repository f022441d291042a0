import Dispatch
import Foundation
import Glibc
import Synchronization

/// A TCP proxy that delays each direction by a fixed time without capping bandwidth: the round
/// trip of a collector far away, on loopback (this kernel has no `netem`).
///
/// Each connection gets a thread per direction. A thread reads whatever arrives (up to 256 KiB at
/// a time), stamps the chunk with the time it is due (read time + `oneWay`) and queues it; it
/// writes each chunk to the other side when it is due, waiting in `poll` for whichever comes
/// first, the next due time or more bytes to read. Nothing sleeps per chunk on the reading path,
/// so a stream of chunks arrives `oneWay` later at the rate it was sent. A close (or reset) on one
/// side is passed on after the bytes before it.
///
/// ```swift
/// let proxy = try DelayProxy(to: 8080, oneWay: .milliseconds(50))  // RTT 100 ms
/// // connect to 127.0.0.1:proxy.port
/// proxy.stop()
/// ```
public final class DelayProxy: Sendable {
    /// The port it listens on (127.0.0.1).
    public let port: UInt16
    /// The delay of each direction (half the round trip it adds).
    public let oneWay: Duration
    private let listener: Int32
    private let targetPort: UInt16
    private let state = Mutex(State())

    private struct State {
        var stopped = false
        var connections = 0
        var sockets: Set<Int32> = []
    }

    /// Listens on 127.0.0.1:`listenPort` (0: a free port) and forwards each connection to
    /// 127.0.0.1:`targetPort`, each direction delayed by `oneWay`.
    public init(listenPort: UInt16 = 0, to targetPort: UInt16, oneWay: Duration) throws {
        self.oneWay = oneWay
        self.targetPort = targetPort
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Self.error("socket") }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = Self.loopback(listenPort)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(fd, 512) == 0 else {
            let error = Self.error("bind/listen on 127.0.0.1:\(listenPort)")
            close(fd)
            throw error
        }
        var bound4 = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &bound4) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        listener = fd
        port = UInt16(bigEndian: bound4.sin_port)
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "delay-proxy.accept"
        thread.start()
    }

    /// Connections accepted so far.
    public var connections: Int { state.withLock { $0.connections } }

    /// Stops accepting and cuts every connection.
    public func stop() {
        let sockets = state.withLock { s -> Set<Int32> in
            s.stopped = true
            return s.sockets
        }
        shutdown(listener, Int32(SHUT_RDWR))
        for fd in sockets { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    deinit { stop() }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                break
            }
            if state.withLock({ $0.stopped }) { close(client); break }
            let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var address = Self.loopback(targetPort)
            let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            guard server >= 0, connected == 0 else {
                // The collector is down: the client sees its connection reset, as it would directly.
                var hard = linger(l_onoff: 1, l_linger: 0)
                setsockopt(client, SOL_SOCKET, SO_LINGER, &hard, socklen_t(MemoryLayout<linger>.size))
                close(client)
                if server >= 0 { close(server) }
                continue
            }
            var one: Int32 = 1
            for fd in [client, server] { setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size)) }
            state.withLock { s in
                s.connections += 1
                s.sockets.formUnion([client, server])
            }
            let ends = Ends(client: client, server: server)
            for (from, to, name) in [(client, server, "up"), (server, client, "down")] {
                let thread = Thread { [self] in
                    pump(from: from, to: to)
                    if ends.finished() {
                        state.withLock { s in
                            s.sockets.remove(client)
                            s.sockets.remove(server)
                            close(client)
                            close(server)
                        }
                    }
                }
                thread.name = "delay-proxy.\(name)"
                thread.stackSize = 256 << 10
                thread.start()
            }
        }
        close(listener)
    }

    /// Both directions of a connection: the second to finish closes the sockets.
    private final class Ends: Sendable {
        let client: Int32, server: Int32
        private let done = Atomic<Int>(0)
        init(client: Int32, server: Int32) { self.client = client; self.server = server }
        func finished() -> Bool { done.add(1, ordering: .acquiringAndReleasing).newValue == 2 }
    }

    /// One direction: read what arrives, write it `oneWay` after it was read.
    private func pump(from source: Int32, to sink: Int32) {
        let delay = UInt64(oneWay.components.seconds) * 1_000_000_000 + UInt64(oneWay.components.attoseconds / 1_000_000_000)
        var queue: [(due: UInt64, bytes: [UInt8])] = []
        var head = 0
        var ended = false
        let bufferSize = 256 << 10
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: bufferSize, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let now = DispatchTime.now().uptimeNanoseconds
            // Everything due goes out now, in order.
            while head < queue.count, queue[head].due <= now {
                if !writeAll(sink, queue[head].bytes) {
                    shutdown(source, Int32(SHUT_RDWR))
                    return
                }
                queue[head].bytes = []
                head += 1
            }
            if head > 64, head * 2 > queue.count {
                queue.removeFirst(head)
                head = 0
            }
            if ended && head == queue.count {
                shutdown(sink, Int32(SHUT_WR))
                return
            }
            var timeout: Int32 = -1
            if head < queue.count {
                let wait = queue[head].due - now
                timeout = Int32(min((wait + 999_999) / 1_000_000, 60_000))
            }
            if ended {
                usleep(UInt32(max(timeout, 0)) * 1000)
                continue
            }
            var fds = [pollfd(fd: source, events: Int16(POLLIN), revents: 0)]
            let ready = poll(&fds, 1, timeout)
            if ready < 0 && errno != EINTR { return }
            guard ready > 0 else { continue }
            let n = read(source, buffer.baseAddress, bufferSize)
            if n > 0 {
                let stamp = DispatchTime.now().uptimeNanoseconds
                queue.append((stamp + delay, Array(UnsafeRawBufferPointer(rebasing: buffer[..<n]))))
            } else if n == 0 || (errno != EINTR && errno != EAGAIN) {
                ended = true
            }
        }
    }

    private func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EINTR { continue }
                return false
            }
            sent += n
        }
        return true
    }

    private static func loopback(_ port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    private static func error(_ what: String) -> any Error {
        NSError(domain: "DelayProxy", code: Int(errno), userInfo: [NSLocalizedDescriptionKey: "\(what) failed: \(String(cString: strerror(errno)))"])
    }
}
