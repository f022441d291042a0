import BeaconHTTP
import COpenSSL
import Glibc
import Synchronization

/// The socket BIO every TLS stream uses: `send` with `MSG_NOSIGNAL` and `recv` (see `shim.h`).
nonisolated(unsafe) private let socketMethod: OpaquePointer? = beacon_bio_method_new()

/// TLS over a connected non-blocking socket, through OpenSSL: the handshake (verification, SNI,
/// session resumption) and then records. It does not own the socket.
final class TLSStream: TLSByteStream {
    private let ssl: OpaquePointer
    /// The socket (the BIO keeps it too; `SSL_get_fd` does not see a custom BIO's).
    private let fd: Int32
    private let context: TLSContext
    private let peer: TLSPeerName
    /// Host and port, the key of the session to resume, and how failures name the server.
    private let key: String
    private var handshakeDone = false
    /// A fatal error happened: no goodbye is said and the session is not kept.
    private var broken = false
    private var closed = false
    /// Where a request's head and the start of its body are put together, so that a small request
    /// goes as one record.
    private var scratch: UnsafeMutableRawBufferPointer?
    private static let coalesce = 16 << 10

    /// A stream over `fd`, for `host` (as written in the URL) and `port`; ``handshake()`` starts it.
    init(fd: Int32, host: String, port: UInt16, context: TLSContext) throws(TLSFailure) {
        self.context = context
        self.fd = fd
        peer = TLSPeerName(host: host)
        key = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        ERR_clear_error()
        func setUpFailed() -> TLSFailure {
            TLSFailure(message: "cannot set up TLS: \(TLSContext.lastError() ?? "out of memory")", isConfiguration: false)
        }
        guard let method = socketMethod, let ssl = SSL_new(context.context) else { throw setUpFailed() }
        guard let bio = beacon_bio_new(method, fd) else {
            SSL_free(ssl)
            throw setUpFailed()
        }
        // From here `deinit` frees the SSL (and the BIO it owns), also when a check below throws.
        self.ssl = ssl
        SSL_set_bio(ssl, bio, bio)
        SSL_set_connect_state(ssl)
        // Names are checked against subjectAltName only, never a CN.
        X509_VERIFY_PARAM_set_hostflags(SSL_get0_param(ssl), beacon_host_check_flags())
        switch peer {
        case .dns(let name):
            guard SSL_set1_host(ssl, name) == 1, beacon_SSL_set_tlsext_host_name(ssl, name) == 1 else {
                throw TLSFailure(message: "'\(name)' cannot be checked against a certificate", isConfiguration: true)
            }
        case .ip(let address):
            guard X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), address) == 1 else {
                throw TLSFailure(message: "'\(address)' cannot be checked against a certificate", isConfiguration: true)
            }
        }
        if let session = context.takeSession(for: key) {
            _ = SSL_set_session(ssl, session)
            SSL_SESSION_free(session)
        }
    }

    deinit {
        close()
        SSL_free(ssl)
        scratch?.deallocate()
    }

    /// Whether the last completed handshake resumed a session.
    var resumed: Bool { SSL_session_reused(ssl) == 1 }

    /// One step of the handshake: `.done(0)` once it is complete.
    package func handshake() -> StreamResult {
        ERR_clear_error()
        let result = SSL_connect(ssl)
        if result == 1 {
            handshakeDone = true
            context.handshakes.add(1, ordering: .relaxed)
            if resumed { context.resumedHandshakes.add(1, ordering: .relaxed) }
            return .done(0)
        }
        let code = errno
        switch SSL_get_error(ssl, result) {
        case SSL_ERROR_WANT_READ: return .wait(Int16(POLLIN))
        case SSL_ERROR_WANT_WRITE: return .wait(Int16(POLLOUT))
        case SSL_ERROR_SYSCALL where code != 0:
            broken = true
            return .failed(code)
        case SSL_ERROR_SSL where !Self.closedWithoutGoodbye():
            broken = true
            return .tls(describe(during: true))
        default:
            broken = true
            return .tls(TLSFailure(message: "the TLS handshake with \(key) failed: the server closed the connection", isConfiguration: false))
        }
    }

    package func write(_ head: UnsafeRawBufferPointer, _ body: UnsafeRawBufferPointer) -> StreamResult {
        if head.isEmpty { return write(UnsafeRawBufferPointer(rebasing: body[..<min(body.count, Int(Int32.max))])) }
        guard head.count < Self.coalesce else { return write(head) }
        let buffer = scratch ?? UnsafeMutableRawBufferPointer.allocate(byteCount: Self.coalesce, alignment: 16)
        scratch = buffer
        let take = min(body.count, Self.coalesce - head.count)
        buffer.copyMemory(from: head)
        if take > 0 { UnsafeMutableRawBufferPointer(rebasing: buffer[head.count...]).copyMemory(from: UnsafeRawBufferPointer(rebasing: body[..<take])) }
        return write(UnsafeRawBufferPointer(rebasing: buffer[..<(head.count + take)]))
    }

    private func write(_ bytes: UnsafeRawBufferPointer) -> StreamResult {
        transfer { SSL_write_ex(ssl, bytes.baseAddress, bytes.count, &$0) }
    }

    package func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamResult {
        transfer { SSL_read_ex(ssl, buffer.baseAddress, buffer.count, &$0) }
    }

    /// One `SSL_write_ex` or `SSL_read_ex`: the bytes it moved, or what stopped it. The error
    /// queue is cleared first and `errno` taken right after, so that ``outcome(of:errno:)``
    /// sees this call's failure only.
    private func transfer(_ call: (inout Int) -> Int32) -> StreamResult {
        ERR_clear_error()
        var count = 0
        let result = call(&count)
        if result == 1 { return .done(count) }
        return outcome(of: result, errno: errno)
    }

    package func isIdle() -> Bool {
        guard !broken, SSL_has_pending(ssl) == 0 else { return false }
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&p, 1, 0) != 0 else { return true }
        // Readable: a session ticket or key update is fine; data or a goodbye is not.
        ERR_clear_error()
        var byte: UInt8 = 0
        var count = 0
        let result = SSL_peek_ex(ssl, &byte, 1, &count)
        if result == 1 { return false }
        switch SSL_get_error(ssl, result) {
        case SSL_ERROR_WANT_READ: return true
        case SSL_ERROR_ZERO_RETURN: return false  // a clean goodbye: the session stays resumable
        default:
            broken = true
            return false
        }
    }

    /// Says goodbye (one try, without waiting) and keeps the session for the next connection.
    package func close() {
        guard !closed else { return }
        closed = true
        guard handshakeDone, !broken else { return }
        if let session = SSL_get1_session(ssl) {
            if SSL_SESSION_is_resumable(session) == 1 { context.keep(session, for: key) } else { SSL_SESSION_free(session) }
        }
        ERR_clear_error()
        _ = SSL_shutdown(ssl)
        ERR_clear_error()
    }

    /// A read's or write's failure.
    private func outcome(of result: Int32, errno code: Int32) -> StreamResult {
        switch SSL_get_error(ssl, result) {
        case SSL_ERROR_WANT_READ: return .wait(Int16(POLLIN))
        case SSL_ERROR_WANT_WRITE: return .wait(Int16(POLLOUT))
        case SSL_ERROR_ZERO_RETURN: return .done(0)
        case SSL_ERROR_SYSCALL:
            broken = true
            return code == 0 ? .truncated : .failed(code)
        case SSL_ERROR_SSL where Self.closedWithoutGoodbye():
            broken = true
            ERR_clear_error()
            return .truncated
        case SSL_ERROR_SSL:
            broken = true
            return .tls(describe(during: false))
        default:
            broken = true
            return .tls(TLSFailure(message: "TLS with \(key) failed", isConfiguration: false))
        }
    }

    /// Whether the last `SSL_ERROR_SSL` is the peer closing TCP without close_notify (the BIO
    /// reports the end, `BIO_CTRL_EOF`): a broken connection, not a refusal.
    private static func closedWithoutGoodbye() -> Bool {
        ERR_GET_REASON(ERR_peek_last_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING
    }

    /// What the last `SSL_ERROR_SSL` was: the verification result when a certificate failed,
    /// else the reason in OpenSSL's error queue; with a hint.
    private func describe(during handshake: Bool) -> TLSFailure {
        let verify = SSL_get_verify_result(ssl)
        if handshake, verify != X509_V_OK {
            ERR_clear_error()
            let check = String(cString: X509_verify_cert_error_string(verify))
            return TLSFailure(message: "the certificate of \(key) failed verification: \(check)\(Self.hint(verify: Int32(verify), peer))", isConfiguration: true)
        }
        let code = ERR_get_error()
        ERR_clear_error()
        let reason = ERR_GET_REASON(code)
        let text = code == 0 ? "a TLS protocol error" : ERR_reason_error_string(code).map { String(cString: $0) } ?? "OpenSSL error \(String(code, radix: 16))"
        let refused = Self.certificateAlerts.contains(reason)
        let hint = Self.hint(reason: reason)
        if handshake {
            return TLSFailure(message: "the TLS handshake with \(key) failed: \(text)\(hint)", isConfiguration: true)
        }
        return TLSFailure(message: "TLS with \(key) failed: \(text)\(hint)", isConfiguration: refused)
    }

    /// Alerts a server sends when it refuses the client's certificate (or its absence): after a
    /// TLS 1.3 handshake they arrive with the answer.
    private static let certificateAlerts: Set<Int32> = [
        SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED, SSL_R_SSLV3_ALERT_BAD_CERTIFICATE, SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED,
        SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED, SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN, SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE,
        SSL_R_TLSV1_ALERT_UNKNOWN_CA, SSL_R_TLSV1_ALERT_ACCESS_DENIED, SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE,
    ]

    static func hint(verify code: Int32, _ peer: TLSPeerName) -> String {
        switch code {
        case X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH:
            let name = switch peer { case .dns(let name): "host name '\(name)'"; case .ip(let address): "IP address \(address)" }
            return " (the certificate does not name \(name): check the URL's host)"
        case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT, X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN,
             X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT, X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
            return " (its CA is not trusted: name the collector's CA, e.g. beacon send --cacert FILE)"
        case X509_V_ERR_CERT_HAS_EXPIRED, X509_V_ERR_CERT_NOT_YET_VALID:
            return " (renew the server's certificate, or check this machine's clock)"
        default:
            return ""
        }
    }

    static func hint(reason: Int32) -> String {
        switch reason {
        case SSL_R_UNSUPPORTED_PROTOCOL, SSL_R_TLSV1_ALERT_PROTOCOL_VERSION, SSL_R_NO_PROTOCOLS_AVAILABLE:
            " (the server offers no TLS version Beacon accepts: TLS 1.2 or later)"
        case SSL_R_WRONG_VERSION_NUMBER, SSL_R_PACKET_LENGTH_TOO_LONG:
            " (does the port speak TLS? an http:// URL may be meant)"
        case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
            " (the server asks for a client certificate: beacon send --cert FILE --key FILE)"
        case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE, SSL_R_TLSV1_ALERT_UNKNOWN_CA, SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
            " (the server refused the client certificate)"
        default:
            ""
        }
    }
}
