import Dispatch
import Foundation
import Glibc
import Synchronization

/// One address to connect to: a `sockaddr_in` or `sockaddr_in6` with its port.
package struct SocketAddress: Sendable {
    let family: Int32
    private let storage: sockaddr_storage
    private let length: socklen_t

    init(_ address: UnsafePointer<sockaddr>, length: socklen_t) {
        var storage = sockaddr_storage()
        withUnsafeMutableBytes(of: &storage) { raw in
            raw.copyMemory(from: UnsafeRawBufferPointer(start: address, count: min(Int(length), raw.count)))
        }
        family = Int32(address.pointee.sa_family)
        self.storage = storage
        self.length = length
    }

    /// `text` (an IPv4 or IPv6 literal, without brackets) and `port`; nil when it is not one.
    init?(numeric text: String, port: UInt16) {
        var v4 = sockaddr_in()
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET, text, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = port.bigEndian
            self = withUnsafePointer(to: &v4) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { SocketAddress($0, length: socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        } else if inet_pton(AF_INET6, text, &v6.sin6_addr) == 1 {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = port.bigEndian
            self = withUnsafePointer(to: &v6) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { SocketAddress($0, length: socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
        } else {
            return nil
        }
    }

    func withSockaddr<T>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> T) -> T {
        withUnsafeBytes(of: storage) { body($0.baseAddress!.assumingMemoryBound(to: sockaddr.self), length) }
    }
}

/// Turns a host name into addresses within a request's deadline.
///
/// `localhost` and names under `.localhost` are both loopback addresses, 127.0.0.1 and ::1,
/// whatever `/etc/hosts` says (RFC 6761 §6.3, as curl does). An address literal is taken as it
/// is. Any other name is looked up with `getaddrinfo` by the connection's ``Runner`` (Beacon's
/// `BlockingPool.lookups`: bounded threads, not a thread per lookup): `getaddrinfo` cannot be
/// interrupted, so when the deadline passes (or the request is cancelled) first, the request stops
/// waiting and the lookup finishes alone, its result dropped; a lookup still queued when its
/// request gave up is not made.
package enum SocketResolver {
    /// Looks `host` up (blocking); the addresses in the order to try, or why there are none.
    package typealias Lookup = @Sendable (_ host: String, _ port: UInt16) -> Result<[SocketAddress], LookupFailure>

    /// Runs a lookup on a thread that may block (the lookup is `getaddrinfo`): returns at once.
    package typealias Runner = @Sendable (_ lookup: @escaping @Sendable () -> Void) -> Void

    package struct LookupFailure: Error {
        var reason: String
    }

    /// Whether `host` is `localhost` or a name under it (`a.localhost`), with or without a final dot.
    static func isLocalhost(_ host: String) -> Bool {
        var name = host.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        return name == "localhost" || name.hasSuffix(".localhost")
    }

    /// The addresses of `host` at `port`, in the order to try them.
    static func resolve(_ host: String, port: UInt16, lookup: @escaping Lookup, on runner: Runner, deadline: UInt64, waker: SocketWaker, isCancelled: () -> Bool) throws(SocketConnection.Failure) -> [SocketAddress] {
        if isLocalhost(host) {
            return [SocketAddress(numeric: "127.0.0.1", port: port)!, SocketAddress(numeric: "::1", port: port)!]
        }
        if let literal = SocketAddress(numeric: host, port: port) { return [literal] }
        let pending = PendingLookup()
        defer { pending.abandon() }
        runner { [pending] in
            guard !pending.isAbandoned else { return }
            pending.finish(lookup(host, port))
        }
        var fds = [pollfd(fd: pending.waker.fd, events: Int16(POLLIN), revents: 0)]
        while true {
            if let result = pending.result {
                switch result {
                case .success(let addresses) where !addresses.isEmpty: return addresses
                case .success: throw .resolve("cannot resolve host '\(host)': no address")
                case .failure(let failure): throw .resolve("cannot resolve host '\(host)': \(failure.reason)")
                }
            }
            // Without its socket pair the lookup cannot wake this thread: look every 10 ms.
            let until = pending.waker.fd < 0 ? min(deadline, DispatchTime.now().uptimeNanoseconds + 10_000_000) : deadline
            do {
                _ = try SocketWait.poll(&fds, until: until, deadline: deadline, waker: waker, isCancelled: isCancelled)
            } catch .timeout {
                throw .resolve("cannot resolve host '\(host)': no answer from the name service within the request's timeout")
            }
        }
    }

    /// `getaddrinfo` for TCP, addresses in the order the system prefers.
    package static let system: Lookup = { host, port in
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_protocol = Int32(IPPROTO_TCP)
        hints.ai_flags = AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let resolved = getaddrinfo(host, String(port), &hints, &list)
        guard resolved == 0, let first = list else {
            return .failure(LookupFailure(reason: resolved == EAI_SYSTEM ? String(cString: strerror(errno)) : String(cString: gai_strerror(resolved))))
        }
        defer { freeaddrinfo(first) }
        var addresses: [SocketAddress] = []
        var next: UnsafeMutablePointer<addrinfo>? = first
        while let info = next {
            next = info.pointee.ai_next
            guard let address = info.pointee.ai_addr, info.pointee.ai_family == AF_INET || info.pointee.ai_family == AF_INET6 else { continue }
            addresses.append(SocketAddress(address, length: info.pointee.ai_addrlen))
        }
        return .success(addresses)
    }

    /// A lookup's result, shared by the thread doing it and the request waiting for it.
    private final class PendingLookup: Sendable {
        let waker = SocketWaker()
        private let box = Mutex<Result<[SocketAddress], LookupFailure>?>(nil)
        private let abandoned = Atomic<Bool>(false)

        var result: Result<[SocketAddress], LookupFailure>? { box.withLock { $0 } }

        /// The request stopped waiting (answered, timed out or cancelled): a lookup not begun yet is skipped.
        func abandon() { abandoned.store(true, ordering: .relaxed) }
        var isAbandoned: Bool { abandoned.load(ordering: .relaxed) }

        func finish(_ result: Result<[SocketAddress], LookupFailure>) {
            box.withLock { $0 = result }
            waker.wake()
        }
    }
}

/// Connects to the first of several addresses that answers, within a deadline.
///
/// The attempts are staggered (Happy Eyeballs, RFC 8305 §5): an address that has not connected
/// after ``attemptDelay`` gets company from the next one, and one that fails lets the next start
/// at once, so an address that never answers (a black-holed IPv6 route, a full listen queue) costs
/// a quarter of a second, not the whole timeout. The first connection made wins; the others are
/// closed.
enum SocketConnector {
    static let attemptDelay: UInt64 = 250_000_000

    /// A connected non-blocking socket to one of `addresses`.
    static func connect(_ addresses: [SocketAddress], deadline: UInt64, waker: SocketWaker, isCancelled: () -> Bool) throws(SocketConnection.Failure) -> Int32 {
        var attempts: [Int32] = []
        defer { for s in attempts { close(s) } }
        var next = 0
        var nextStart: UInt64 = 0
        var lastError: Int32 = ECONNREFUSED
        while true {
            if isCancelled() { throw .cancelled }
            let now = DispatchTime.now().uptimeNanoseconds
            if next < addresses.count, attempts.isEmpty || now >= nextStart {
                let address = addresses[next]
                next += 1
                let s = socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), Int32(IPPROTO_TCP))
                guard s >= 0 else { lastError = errno; continue }
                if address.withSockaddr({ Glibc.connect(s, $0, $1) }) == 0 { return s }
                guard errno == EINPROGRESS else {
                    lastError = errno
                    close(s)
                    continue
                }
                attempts.append(s)
                nextStart = now + attemptDelay
                continue
            }
            if attempts.isEmpty { throw .system("connect", lastError) }
            var fds = attempts.map { pollfd(fd: $0, events: Int16(POLLOUT), revents: 0) }
            guard try SocketWait.poll(&fds, until: next < addresses.count ? min(nextStart, deadline) : deadline, deadline: deadline, waker: waker, isCancelled: isCancelled) else { continue }
            for index in fds.indices.reversed() where fds[index].revents != 0 {
                let s = attempts.remove(at: index)
                var problem: Int32 = 0
                var length = socklen_t(MemoryLayout<Int32>.size)
                if getsockopt(s, SOL_SOCKET, SO_ERROR, &problem, &length) != 0 { problem = errno }
                if problem == 0 { return s }
                lastError = problem
                close(s)
                nextStart = 0
            }
        }
    }
}

/// Waiting in `poll` for sockets, a deadline and a cancellation at once.
enum SocketWait {
    /// Waits until one of `fds` is ready (true), `until` passes (false, when before `deadline`), the
    /// deadline passes (`.timeout`) or the request is cancelled (`.cancelled`, noticed through
    /// `waker`).
    static func poll(_ fds: inout [pollfd], until: UInt64, deadline: UInt64, waker: SocketWaker, isCancelled: () -> Bool) throws(SocketConnection.Failure) -> Bool {
        fds.append(pollfd(fd: waker.fd, events: Int16(POLLIN), revents: 0))
        defer { fds.removeLast() }
        while true {
            if isCancelled() { throw .cancelled }
            let now = DispatchTime.now().uptimeNanoseconds
            guard now < deadline else { throw .timeout }
            guard now < until else { return false }
            var milliseconds = min((until - now + 999_999) / 1_000_000, UInt64(Int32.max))
            if waker.fd < 0 { milliseconds = min(milliseconds, SocketWaker.sliceWithoutPair) }
            let ready = Glibc.poll(&fds, nfds_t(fds.count), Int32(milliseconds))
            if ready < 0 {
                if errno == EINTR { continue }
                throw .system("poll", errno)
            }
            if fds[fds.count - 1].revents != 0 { waker.drain() }
            if fds.dropLast().contains(where: { $0.revents != 0 }) { return true }
        }
    }
}
