import BeaconHTTP
import Dispatch
import Foundation

extension SocketTransport: ReachabilityProbing {
    /// Whether `url`'s collector accepts a connection now, on a connection of the probe's own
    /// (the one requests use is left alone): resolve, `connect(2)`, the proxy's `CONNECT` tunnel
    /// for `https://` through a proxy, and the TLS handshake (certificate verified) for
    /// `https://`; then the connection is closed. No request is sent. Through a proxy to a plain
    /// `http://` collector only the proxy is reached.
    package func probe(_ url: URL, timeout: Duration, cancellation: ProbeCancellation) -> Bool {
        guard let endpoint = try? endpoint(for: url) else { return false }
        let connection = SocketConnection(maxResponseBodyBytes: 4096, readBufferBytes: 4096, lookup: connection.lookup, runLookup: connection.runLookup)
        cancellation.onCancel { [waker = connection.waker] in waker.wake() }
        defer { connection.disconnect() }
        let deadline = DispatchTime.now().uptimeNanoseconds &+ UInt64(min(max(0, timeout.seconds), 3600) * 1e9)
        do throws(SocketConnection.Failure) {
            try connection.connect(endpoint, deadline: deadline) { cancellation.isCancelled }
            return true
        } catch {
            return false
        }
    }
}
