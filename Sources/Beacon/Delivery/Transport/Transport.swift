import Foundation

/// One HTTP request the uploader asks a ``Transport`` to send: a POST of `body` with `headers`.
public struct TransportRequest: Sendable {
    /// Where to send it.
    public var url: URL
    /// The HTTP method. The uploader always uses `POST`.
    public var method: String
    /// Header fields in the order they are sent. May hold secrets (`Authorization`): never log them.
    public var headers: HTTPHeaders
    /// The request body, already encoded (and compressed, when `Content-Encoding: gzip` is set).
    public var body: [UInt8]
    /// How long the transport may take before it gives up with ``TransportError/Code/timeout``.
    public var timeout: Duration

    /// A request to `url`: a POST of `body` by default, given up after `timeout`.
    public init(url: URL, method: String = "POST", headers: HTTPHeaders = [:], body: [UInt8], timeout: Duration = .seconds(30)) {
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
        self.timeout = timeout
    }
}

/// What a collector answered: the status code, the header fields and the body.
public struct TransportResponse: Sendable {
    /// The HTTP status code.
    public var status: Int
    /// Header fields as received, in order (names as the server spelled them, repeated ones kept).
    public var headers: HTTPHeaders
    /// The response body (often an error message for 4xx answers).
    public var body: [UInt8]

    /// An answer with `status`, and the `headers` and `body` that came with it.
    public init(status: Int, headers: HTTPHeaders = [:], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// Sends upload requests. ``SocketTransport`` is the default; `HTTPTransport` (URLSession, product
/// `BeaconURLSession`) is another; `BeaconTesting` has an in-memory one.
///
/// A transport throws for anything that is not an HTTP answer (connection refused, reset, DNS,
/// timeout, cancellation) and returns every HTTP answer, whatever its status: the uploader decides
/// what a status means. It must honour task cancellation by throwing promptly.
public protocol Transport: Sendable {
    /// Sends `request` and returns the collector's answer.
    func send(_ request: TransportRequest) async throws -> TransportResponse
}

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
