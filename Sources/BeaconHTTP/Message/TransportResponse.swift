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
