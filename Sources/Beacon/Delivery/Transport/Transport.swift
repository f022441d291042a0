import BeaconHTTP

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
