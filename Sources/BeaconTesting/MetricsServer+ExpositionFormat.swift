import Beacon
import BeaconHTTPServer

extension MetricsServer {
    /// Listens on `address` (`HOST:PORT`) and answers each scrape with `metrics` in the format its
    /// `Accept` header asks for (`BeaconMetrics.ExpositionFormat(accept:)`), with that format's
    /// `Content-Type`.
    ///
    /// ```swift
    /// let server = try MetricsServer(address: "127.0.0.1:0") { format in snapshot.prometheusText(format) }
    /// ```
    public convenience init(address: String, metrics: @escaping @Sendable (BeaconMetrics.ExpositionFormat) -> String) throws {
        try self.init(address: address) { accept in
            let format = BeaconMetrics.ExpositionFormat(accept: accept)
            return (format.contentType, metrics(format))
        }
    }
}
