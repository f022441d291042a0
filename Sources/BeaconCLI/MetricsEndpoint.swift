import Beacon
import BeaconHTTPServer

/// `beacon send --metrics HOST:PORT`: serves the uploader's ``BeaconMetrics`` at `GET /metrics`.
enum MetricsEndpoint {
    /// Starts the server for `uploader`; a scrape takes the snapshot on the connection's own
    /// thread, without waiting for the uploader (``Uploader/metrics``): it answers while a request
    /// is slow or the disk stalls an acknowledgement.
    static func start(_ address: String, uploader: Uploader) throws -> MetricsServer {
        do {
            return try MetricsServer(address: address) { accept in
                let format = BeaconMetrics.ExpositionFormat(accept: accept)
                return (format.contentType, uploader.metrics.prometheusText(format))
            }
        } catch let error as MetricsServerError {
            throw CLIError(.usage, error.description)
        }
    }
}
