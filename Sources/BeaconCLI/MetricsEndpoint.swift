import Beacon
import BeaconHTTPServer
import Dispatch
import Synchronization

/// `beacon send --metrics HOST:PORT`: serves the uploader's ``BeaconMetrics`` at `GET /metrics`.
enum MetricsEndpoint {
    /// Starts the server for `uploader`; a scrape takes the snapshot on the connection's own
    /// thread (waiting up to 5 s for the uploader between its requests).
    static func start(_ address: String, uploader: Uploader) throws -> MetricsServer {
        // The snapshot in the format the scrape's `Accept` asks for.
        let text: @Sendable (BeaconMetrics.ExpositionFormat) -> String = { format in
            let box = Mutex<BeaconMetrics?>(nil)
            let done = DispatchSemaphore(value: 0)
            Task {
                let snapshot = await uploader.metrics
                box.withLock { $0 = snapshot }
                done.signal()
            }
            guard done.wait(timeout: .now() + 5) == .success, let snapshot = box.withLock({ $0 }) else {
                return "# the uploader did not answer within 5 s (a request or the disk is slow)\n" + (format == .openMetrics ? "# EOF\n" : "")
            }
            return snapshot.prometheusText(format)
        }
        do {
            return try MetricsServer(address: address) { accept in
                let format = BeaconMetrics.ExpositionFormat(accept: accept)
                return (format.contentType, text(format))
            }
        } catch let error as MetricsServerError {
            throw CLIError(.usage, error.description)
        }
    }
}
