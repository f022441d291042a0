import Foundation
import Synchronization

/// A transport that can tell whether its collector accepts connections without sending a
/// request: what prompt resume (``ResumeProbe``) asks while delivery backs off. ``SocketTransport``
/// is one; a transport that is not (a test's, ``HTTPTransport``) backs off as before.
package protocol ReachabilityProbing: Sendable {
    /// Whether `url`'s collector accepts a connection now: a TCP connect (through the proxy's
    /// tunnel, if any) and, for `https://`, the TLS handshake; no request is sent. Blocks the
    /// calling thread (one of Beacon's own) for at most `timeout`, less when `cancellation` fires.
    func probe(_ url: URL, timeout: Duration, cancellation: ProbeCancellation) -> Bool
}

/// Ends a probe early (shutdown, stop): sets the flag the probe checks and wakes its `poll`.
package final class ProbeCancellation: Sendable {
    private struct State {
        var cancelled = false
        var wake: (@Sendable () -> Void)?
    }

    private let state = Mutex(State())

    package init() {}

    package var isCancelled: Bool { state.withLock { $0.cancelled } }

    /// Calls `wake` when cancelled (at once if it already is).
    package func onCancel(_ wake: @escaping @Sendable () -> Void) {
        let now = state.withLock { s -> Bool in
            s.wake = wake
            return s.cancelled
        }
        if now { wake() }
    }

    package func cancel() {
        let wake = state.withLock { s -> (@Sendable () -> Void)? in
            s.cancelled = true
            return s.wake
        }
        wake?()
    }
}
