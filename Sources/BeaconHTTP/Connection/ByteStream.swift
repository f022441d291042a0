import Glibc

/// What one read or write on a connection's ``ByteStream`` did.
package enum StreamResult {
    /// Bytes moved; 0 from a read means the peer closed the connection.
    case done(Int)
    /// Nothing moved yet: poll the socket for these events (`POLLIN`, `POLLOUT`) and call again
    /// with the same arguments.
    case wait(Int16)
    /// The system call failed with this `errno` (`ECONNRESET`, `EPIPE`...).
    case failed(Int32)
    /// TLS failed: the handshake, a certificate, or a record.
    case tls(TLSFailure)
    /// The peer closed the TCP connection without TLS's close_notify: the bytes read so far may
    /// not be all that was sent (a close can be forged), so an answer that runs until the close is
    /// incomplete, not ended (RFC 9112 §9.8).
    case truncated
}

/// The bytes of one connection as ``SocketConnection`` reads and writes them: the plain socket
/// (``PlainStream``) or TLS over it (a ``TLSByteStream``: BeaconTLS's `TLSStream`). Non-blocking:
/// a call that would block says what to wait for instead. The connection owns the socket; ``close()`` ends the stream's use of
/// it (and, for TLS, says goodbye and keeps the session for the next connection).
package protocol ByteStream: AnyObject {
    /// Writes the start of `head` followed by `body`; returns how many bytes went.
    func write(_ head: UnsafeRawBufferPointer, _ body: UnsafeRawBufferPointer) -> StreamResult
    /// Reads into `buffer`.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamResult
    /// Whether an idle connection can take another request: the peer neither closed it nor sent
    /// anything unasked.
    func isIdle() -> Bool
    /// Ends the stream before the socket is closed.
    func close()
}

/// The plain socket: `sendmsg` (without `SIGPIPE`) and `recv`.
final class PlainStream: ByteStream {
    let fd: Int32

    init(fd: Int32) {
        self.fd = fd
    }

    func write(_ head: UnsafeRawBufferPointer, _ body: UnsafeRawBufferPointer) -> StreamResult {
        var parts = (iovec(), iovec())
        var count = 0
        withUnsafeMutableBytes(of: &parts) { raw in
            let iov = raw.bindMemory(to: iovec.self)
            if head.count > 0 {
                iov[count] = iovec(iov_base: UnsafeMutableRawPointer(mutating: head.baseAddress!), iov_len: head.count)
                count += 1
            }
            if body.count > 0 {
                iov[count] = iovec(iov_base: UnsafeMutableRawPointer(mutating: body.baseAddress!), iov_len: body.count)
                count += 1
            }
        }
        guard count > 0 else { return .done(0) }
        while true {
            let n = withUnsafeMutableBytes(of: &parts) { raw in
                var message = msghdr()
                message.msg_iov = raw.baseAddress!.assumingMemoryBound(to: iovec.self)
                message.msg_iovlen = count
                return sendmsg(fd, &message, Int32(MSG_NOSIGNAL))
            }
            if n >= 0 { return .done(n) }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wait(Int16(POLLOUT))
            case let code: return .failed(code)
            }
        }
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamResult {
        while true {
            let n = recv(fd, buffer.baseAddress, buffer.count, 0)
            if n >= 0 { return .done(n) }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wait(Int16(POLLIN))
            case let code: return .failed(code)
            }
        }
    }

    func isIdle() -> Bool {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&p, 1, 0) == 0
    }

    func close() {}
}
