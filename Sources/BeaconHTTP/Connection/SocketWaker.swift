import Glibc

/// Wakes a thread waiting in `poll` (a non-blocking socket pair): how a cancellation reaches a
/// blocked exchange, and (in `beacon send`) how a finished task or a signal wakes the main thread.
/// ``wake()`` is a `write(2)` of one byte, safe in a signal handler through ``writeEnd``.
package final class SocketWaker: Sendable {
    /// The end `poll` watches; -1 when the pair could not be made (no file descriptor left): then
    /// waits are cut into slices of ``sliceWithoutPair`` milliseconds to notice a cancellation.
    package let fd: Int32
    /// The end ``wake()`` writes to.
    package let writeEnd: Int32
    static let sliceWithoutPair: UInt64 = 100

    package init() {
        var ends: (Int32, Int32) = (-1, -1)
        let made = withUnsafeMutableBytes(of: &ends) { socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, $0.baseAddress!.assumingMemoryBound(to: Int32.self)) }
        fd = made == 0 ? ends.0 : -1
        writeEnd = made == 0 ? ends.1 : -1
    }

    deinit {
        if fd >= 0 { close(fd) }
        if writeEnd >= 0 { close(writeEnd) }
    }

    package func wake() {
        var one: UInt8 = 1
        _ = write(writeEnd, &one, 1)
    }

    func drain() {
        var bytes = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        while withUnsafeMutableBytes(of: &bytes, { read(fd, $0.baseAddress, $0.count) }) > 0 {}
    }
}
