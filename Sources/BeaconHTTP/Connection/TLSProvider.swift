/// What starts TLS on a connected socket for ``SocketConnection``: BeaconTLS's `TLSContext`
/// (OpenSSL). A seam, so that the client links no TLS library and the loopback collector, which
/// uses the client's codec but never TLS, links none either.
package protocol TLSProvider: Sendable {
    /// A TLS stream over the connected socket `fd` to `host` (as written in the URL) and `port`;
    /// its ``TLSByteStream/handshake()`` starts it.
    func stream(fd: Int32, host: String, port: UInt16) throws(TLSFailure) -> any TLSByteStream
}

/// A ``ByteStream`` that must complete a handshake before it carries bytes.
package protocol TLSByteStream: ByteStream {
    /// One step of the handshake: `.done(0)` once it is complete.
    func handshake() -> StreamResult
}

/// Why TLS failed, told to people, and whether retrying can help.
package struct TLSFailure: Error, Sendable, Equatable {
    /// What failed and for which host, with a hint of what to do.
    package var message: String
    /// A configuration problem (a certificate failed verification, no common protocol version, a
    /// client certificate missing or refused, a CA file unreadable): reported like a 401 and not
    /// retried as a transient error. False for a connection that broke.
    package var isConfiguration: Bool

    package init(message: String, isConfiguration: Bool) {
        self.message = message
        self.isConfiguration = isConfiguration
    }
}
