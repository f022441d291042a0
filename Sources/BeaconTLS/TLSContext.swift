import BeaconHTTP
import COpenSSL
import Glibc
import Synchronization

/// One transport's TLS settings made into an OpenSSL `SSL_CTX` (built once: loading the trust
/// store is the costly part), and the session of its last connection, resumed by the next one.
package final class TLSContext: @unchecked Sendable {
    /// The `SSL_CTX`; OpenSSL makes `SSL_new` on it safe from any thread.
    let context: OpaquePointer
    /// The last connection's session, for the same host and port: (key, `SSL_SESSION`).
    private let session = Mutex<Session?>(nil)
    /// Handshakes completed, and how many of them resumed a session (for tests and the benchmark).
    package let handshakes = Atomic<Int>(0)
    package let resumedHandshakes = Atomic<Int>(0)

    private struct Session: @unchecked Sendable {
        var key: String
        var pointer: OpaquePointer
    }

    /// OpenSSL set up without its exit handler (`OPENSSL_INIT_NO_ATEXIT`), once, before the first
    /// context: with it, `exit()` frees OpenSSL's per-thread state while Beacon's threads may still
    /// be ending, whose own thread-exit destructors then free it again (AddressSanitizer caught
    /// this double free in `beacon send` over TLS, in libcrypto, as the process exited). Without
    /// it each thread's state is freed by its own exit, and the process's by the kernel. A host
    /// that initialised OpenSSL first keeps its own choice.
    private static let openSSLInitialized: Bool = OPENSSL_init_crypto(UInt64(OPENSSL_INIT_NO_ATEXIT), nil) == 1

    package init(_ configuration: TLSConfiguration) throws(TLSFailure) {
        _ = Self.openSSLInitialized
        ERR_clear_error()
        guard let context = SSL_CTX_new(TLS_client_method()) else {
            throw TLSFailure(message: "cannot set up TLS: \(Self.lastError() ?? "out of memory")", isConfiguration: true)
        }
        self.context = context
        _ = beacon_SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION)
        _ = SSL_CTX_set_options(context, beacon_SSL_OP_flags())
        _ = beacon_SSL_CTX_set_mode(context, beacon_SSL_MODE_flags())
        // Read what the socket has, not a record header and then its body: half the recv calls.
        beacon_SSL_CTX_set_read_ahead(context, 1)
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        if configuration.trustsSystemRoots {
            _ = SSL_CTX_set_default_verify_paths(context)
        }
        ERR_clear_error()
        if configuration.caFile != nil || configuration.caDirectory != nil {
            for path in [configuration.caFile, configuration.caDirectory].compactMap({ $0 }) where access(path, R_OK) != 0 {
                throw TLSFailure(message: "cannot read the CA certificates '\(path)': \(String(cString: strerror(errno)))", isConfiguration: true)
            }
            guard SSL_CTX_load_verify_locations(context, configuration.caFile, configuration.caDirectory) == 1 else {
                let path = configuration.caFile ?? configuration.caDirectory ?? ""
                throw TLSFailure(message: "cannot load the CA certificates '\(path)': \(Self.lastError() ?? "no certificate in it") (a PEM file, or a directory named by subject hash)", isConfiguration: true)
            }
        } else if !configuration.trustsSystemRoots {
            throw TLSFailure(message: "no certificate to trust: name a CA file or directory, or trust the system's", isConfiguration: true)
        }
        switch (configuration.certificateFile, configuration.privateKeyFile) {
        case (nil, nil):
            break
        case (let certificate?, let key?):
            for path in [certificate, key] where access(path, R_OK) != 0 {
                throw TLSFailure(message: "cannot read '\(path)': \(String(cString: strerror(errno)))", isConfiguration: true)
            }
            guard SSL_CTX_use_certificate_chain_file(context, certificate) == 1 else {
                throw TLSFailure(message: "cannot load the client certificate '\(certificate)': \(Self.lastError() ?? "not a PEM certificate")", isConfiguration: true)
            }
            guard SSL_CTX_use_PrivateKey_file(context, key, SSL_FILETYPE_PEM) == 1 else {
                throw TLSFailure(message: "cannot load the private key '\(key)': \(Self.lastError() ?? "not an unencrypted PEM key")", isConfiguration: true)
            }
            guard SSL_CTX_check_private_key(context) == 1 else {
                throw TLSFailure(message: "the private key '\(key)' does not belong to the client certificate '\(certificate)'", isConfiguration: true)
            }
        default:
            throw TLSFailure(message: "a client certificate needs both its certificate and its key file", isConfiguration: true)
        }
    }

    deinit {
        session.withLock { kept in
            if let kept { SSL_SESSION_free(kept.pointer) }
            kept = nil
        }
        SSL_CTX_free(context)
    }

    /// The kept session for `key`, with a reference of the caller's (nil when there is none).
    func takeSession(for key: String) -> OpaquePointer? {
        session.withLock { kept in
            guard let kept, kept.key == key else { return nil }
            _ = SSL_SESSION_up_ref(kept.pointer)
            return kept.pointer
        }
    }

    /// Keeps `pointer` (whose reference it takes over) as the session to resume for `key`.
    func keep(_ pointer: OpaquePointer, for key: String) {
        let old = session.withLock { kept in
            defer { kept = Session(key: key, pointer: pointer) }
            return kept?.pointer
        }
        if let old { SSL_SESSION_free(old) }
    }

    /// The first error in this thread's OpenSSL queue, for people (the queue is emptied).
    static func lastError() -> String? {
        let code = ERR_get_error()
        ERR_clear_error()
        guard code != 0 else { return nil }
        if let reason = ERR_reason_error_string(code) { return String(cString: reason) }
        return "OpenSSL error \(String(code, radix: 16))"
    }
}

extension TLSContext: TLSProvider {
    package func stream(fd: Int32, host: String, port: UInt16) throws(TLSFailure) -> any TLSByteStream {
        try TLSStream(fd: fd, host: host, port: port, context: self)
    }
}
