import Glibc

/// What the loopback collector and the metrics server share about their listening socket.
enum ListeningSocket {
    /// The port a bound socket listens on (the one the system picked for port 0).
    static func port(of fd: Int32) -> UInt16 {
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return UInt16(bigEndian: actual.sin_port)
    }

    /// The next connection on `listener`; nil once it is shut down (`stopped`) or fails for good.
    /// Retried on `EINTR`, and after 10 ms when the process is out of file descriptors.
    static func accept(_ listener: Int32, stopped: () -> Bool) -> Int32? {
        while true {
            let fd = Glibc.accept(listener, nil, nil)
            if fd >= 0 { return fd }
            if errno == EINTR { continue }
            if stopped() { return nil }
            if errno == EMFILE || errno == ENFILE || errno == ECONNABORTED { usleep(10_000); continue }
            return nil
        }
    }
}
