import BeaconHTTP
import BeaconLog

/// Prompt resume: the probe the delivery loop runs while backing off (``ResumeProbe``).
extension Uploader {
    /// Whether the collector accepts a connection now (``ReachabilityProbing``), probed on the
    /// uploader's ``probeLane`` (Beacon's pool threads), never on Swift's concurrency pool; at most
    /// ``ResumeProbe/timeout`` (or `requestTimeout`, if shorter), less when ``stop()`` or
    /// ``shutdown(timeout:)`` cancels it (then false).
    func probeCollector() async -> Bool {
        guard let prober = transport as? any ReachabilityProbing else { return false }
        let cancellation = ProbeCancellation()
        let cancelled = scheduling.withLock { s -> Bool in
            s.probe = cancellation
            return s.machine.cancelsWork || s.machine.isShuttingDown
        }
        defer { scheduling.withLock { s in if s.probe === cancellation { s.probe = nil } } }
        if cancelled { return false }
        let url = configuration.url
        let timeout = min(configuration.requestTimeout, scheduling.withLock { $0.machine.probing.timeout })
        return await withCheckedContinuation { continuation in
            probeLane.async {
                continuation.resume(returning: prober.probe(url, timeout: timeout, cancellation: cancellation))
            }
        }
    }
}

extension DeliveryError {
    /// A transient failure without an answer from the collector (connection refused or reset, a
    /// timeout, DNS): the collector may be down, and a probe can tell when it is back.
    package var isUnanswered: Bool {
        guard code == .transient, status == nil, let cause = cause as? TransportError else { return false }
        return cause.code == .network || cause.code == .timeout
    }
}
