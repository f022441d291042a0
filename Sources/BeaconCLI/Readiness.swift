import BeaconHTTP
import Glibc

/// Waiting in `poll` for descriptors to become readable (a ``SocketWaker``'s, inotify's,
/// ``Interruption/fd``) with no periodic wakeup.
enum Readiness {
    /// Waits until one of `fds` (with `POLLIN`) is readable or `timeout` passes (nil: no
    /// timeout); the indices of the readable ones. Interrupted waits (`EINTR`) go on with the time
    /// left. A negative fd is never ready.
    static func waitReadable(_ fds: [Int32], timeout: Duration?) -> [Int] {
        let clock = ContinuousClock()
        let end = timeout.map { clock.now + $0 }
        var polls = fds.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        while true {
            var milliseconds: Int32 = -1
            if let end {
                let left = clock.now.duration(to: end)
                if left <= .zero { return [] }
                milliseconds = Int32(min(Double(Int32.max), (Double(left.components.seconds) + Double(left.components.attoseconds) / 1e18) * 1000).rounded(.up))
            }
            let ready = poll(&polls, nfds_t(polls.count), milliseconds)
            if ready > 0 { return polls.indices.filter { polls[$0].revents != 0 } }
            if ready < 0 && errno != EINTR { return [] }
            if ready == 0 && end == nil { continue }
        }
    }
}
