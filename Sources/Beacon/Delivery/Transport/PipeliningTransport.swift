import BeaconHTTP
import Dispatch
import Foundation

/// A transport that keeps several requests outstanding on one connection (HTTP/1.1 pipelining),
/// their answers read in the order the requests were written. ``SocketTransport`` is one; the
/// uploader keeps a window of requests in flight through it, and one request at a time through
/// any other transport.
package protocol PipeliningTransport: Transport {
    /// Writes `request` whole without waiting for its answer (connecting first when nothing is
    /// outstanding). Throws a ``TransportError`` when it could not be written.
    func writePipelined(_ request: TransportRequest) async throws
    /// The answer to the oldest request written and not answered, within `timeout`;
    /// `keepsAlive` is false when the connection ended with it (`Connection: close`, HTTP/1.0):
    /// the requests behind it have no answer. Throws a ``TransportError``: the requests
    /// outstanding are then dropped with the connection.
    func readPipelined(timeout: Duration) async throws -> (response: TransportResponse, keepsAlive: Bool)
    /// Closes the connection: the requests outstanding get no answer.
    func dropPipeline()
}

extension SocketTransport: PipeliningTransport {
    package func writePipelined(_ request: TransportRequest) async throws {
        let endpoint = try endpoint(for: request.url)
        let timeout = request.timeout
        try await onConnection(url: request.url) { connection, isCancelled in
            let deadline = Self.deadline(after: timeout)
            do throws(SocketConnection.Failure) {
                try connection.writePipelined(request, to: endpoint, deadline: deadline, isCancelled: isCancelled)
                return .success(())
            } catch {
                return .failure(Self.error(error, endpoint.url, timeout))
            }
        }
    }

    package func readPipelined(timeout: Duration) async throws -> (response: TransportResponse, keepsAlive: Bool) {
        guard let url = endpoints.withLock({ $0?.url }) else { throw TransportError(.network, "no request was written") }
        return try await onConnection(url: url) { connection, isCancelled in
            guard connection.outstanding > 0 else {
                return Result<(response: TransportResponse, keepsAlive: Bool), TransportError>.failure(TransportError(.network, "\(RedactedURL(url)): the connection was closed before any answer"))
            }
            do throws(SocketConnection.Failure) {
                let answer = try connection.readPipelined(deadline: Self.deadline(after: timeout), isCancelled: isCancelled)
                return .success((answer.response, answer.keepsAlive))
            } catch {
                return .failure(Self.error(error, url, timeout))
            }
        }
    }

    package func dropPipeline() {
        close()
    }

    /// Runs `body` on the connection, in turn with other requests: right here on a thread of
    /// Beacon's own (the uploader's pass), else on the transport's queue. Cancelling the task
    /// wakes a wait in `body`.
    func onConnection<T: Sendable>(url: URL, _ body: @escaping @Sendable (SocketConnection, () -> Bool) -> Result<T, TransportError>) async throws -> T {
        let exchange = SocketExchange(waker: connection.waker, live: live)
        @Sendable func cancelled() -> TransportError { TransportError(.cancelled, "the request to \(RedactedURL(url)) was cancelled") }
        let connection = self.connection
        if IOThread.isCurrent {
            return try await withTaskCancellationHandler {
                if Task.isCancelled { throw cancelled() }
                return try queue.sync { try body(connection, { exchange.isCancelled }).get() }
            } onCancel: {
                exchange.cancel(cancelled())
            }
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                queue.async {
                    continuation.resume(with: body(connection, { exchange.isCancelled }).mapError { $0 as any Error })
                }
            }
        } onCancel: {
            exchange.cancel(cancelled())
        }
    }

    static func deadline(after timeout: Duration) -> UInt64 {
        DispatchTime.now().uptimeNanoseconds &+ UInt64(min(max(0, timeout.seconds), 1e9) * 1e9)
    }
}
