/// How `SocketTransport` verifies an `https://` collector and, for mutual TLS, proves who it is.
///
/// Verification is always on: the collector's certificate must chain to a trusted CA, be valid
/// now, and name the URL's host (a DNS or IP subject alternative name; a CN alone is refused);
/// TLS 1.2 is the oldest version spoken. There is no switch to turn that off. A collector behind a private CA is trusted
/// by naming its CA here, not by trusting anything.
///
/// ```swift
/// var tls = TLSConfiguration()
/// tls.caFile = "/etc/beacon/collector-ca.pem"      // instead of the system's trust store
/// tls.certificateFile = "/etc/beacon/client.pem"   // mutual TLS
/// tls.privateKeyFile = "/etc/beacon/client.key"
/// configuration.transport = try SocketTransport(tls: tls)
/// ```
public struct TLSConfiguration: Sendable, Hashable {
    /// Whether the system's trust store (OpenSSL's default paths, `/etc/ssl/certs` on Debian) is
    /// trusted. True by default; ``init(caFile:caDirectory:trustsSystemRoots:certificateFile:privateKeyFile:)``
    /// turns it off when a CA file or directory is given, like curl's `--cacert`.
    public var trustsSystemRoots: Bool
    /// A PEM file of CA certificates to trust.
    public var caFile: String?
    /// A directory of CA certificates to trust, named by subject hash (`openssl rehash`).
    public var caDirectory: String?
    /// The client certificate (PEM, the chain after it), sent when the server asks (mutual TLS).
    public var certificateFile: String?
    /// The client certificate's private key (PEM, unencrypted).
    public var privateKeyFile: String?

    /// The system's trust store, no client certificate.
    public init() {
        trustsSystemRoots = true
    }

    /// Trusts `caFile` and `caDirectory` (instead of the system's trust store unless
    /// `trustsSystemRoots` says otherwise) and sends a client certificate when both of its files
    /// are given.
    public init(caFile: String? = nil, caDirectory: String? = nil, trustsSystemRoots: Bool? = nil, certificateFile: String? = nil, privateKeyFile: String? = nil) {
        self.caFile = caFile
        self.caDirectory = caDirectory
        self.trustsSystemRoots = trustsSystemRoots ?? (caFile == nil && caDirectory == nil)
        self.certificateFile = certificateFile
        self.privateKeyFile = privateKeyFile
    }
}
