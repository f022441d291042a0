/// A request that got no HTTP answer.
public struct TransportError: Error, Sendable, CustomStringConvertible {
    /// Why no answer came. Only the library makes codes; the set may grow, so keep a default
    /// case. A transport of your own throws one of these.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Wrapped: String, Sendable {
            case timeout, network, tls, cancelled
        }

        private let wrapped: Wrapped
        private init(_ wrapped: Wrapped) { self.wrapped = wrapped }

        /// A stable identifier without spaces, for metric labels: `"timeout"`.
        public var name: String { wrapped.rawValue }
        public var description: String { name }

        /// The request took longer than its timeout.
        public static let timeout = Code(.timeout)
        /// The connection could not be made or broke (refused, reset, DNS, a TLS record).
        public static let network = Code(.network)
        /// TLS refused for a reason retrying will not fix: the collector's certificate failed
        /// verification (unknown CA, another host name, expired), no TLS version in common, the
        /// client certificate missing or refused, a CA or key file unreadable. The uploader treats
        /// it like a 401: delivery pauses with backoff, every event is kept, and it is reported.
        public static let tls = Code(.tls)
        /// The request was cancelled (shutdown deadline).
        public static let cancelled = Code(.cancelled)
    }
    /// Why no answer came.
    public var code: Code
    /// What happened, for people.
    public var message: String
    /// The error underneath, when there is one (a system call's, OpenSSL's); its text is already
    /// in `message`.
    public var cause: (any Error)?

    /// A failure of `code`, described for people by `message` (never a header value or a secret).
    public init(_ code: Code, _ message: String, cause: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.cause = cause
    }

    public var description: String { "transport error (\(code)): \(message)" }
}
