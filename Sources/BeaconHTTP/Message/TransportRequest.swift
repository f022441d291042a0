import Foundation

/// One HTTP request the uploader asks a `Transport` (Beacon) to send: a POST of `body` with `headers`.
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
