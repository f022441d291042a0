import Glibc

/// A non-blocking pipe that one side writes a byte to and the other waits on with `poll`: how a
/// task finishing or a signal arriving wakes the main thread without it waking up periodically.
/// Writing is async-signal-safe (`write(2)`), so a signal handler may do it.
final class WakePipe: Sendable {
    /// The end to wait on (`POLLIN`); -1 when no pipe could be made.
    let readEnd: Int32
    /// The end to write to.
    let writeEnd: Int32

    init() {
        var ends: [Int32] = [-1, -1]
        if pipe(&ends) == 0 {
            for end in ends {
                _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
                _ = fcntl(end, F_SETFD, FD_CLOEXEC)
            }
        } else {
            ends = [-1, -1]
        }
        readEnd = ends[0]
        writeEnd = ends[1]
    }

    deinit {
        if readEnd >= 0 { close(readEnd) }
        if writeEnd >= 0 { close(writeEnd) }
    }

    func wake() {
        var one: UInt8 = 1
        _ = write(writeEnd, &one, 1)
    }

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
