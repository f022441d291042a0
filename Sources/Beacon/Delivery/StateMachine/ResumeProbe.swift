/// Prompt resume: while delivery backs off after a failure that got no answer (connection
/// refused, reset, a timeout), a cheap probe of the collector (a TCP connect, then the TLS
/// handshake for `https://`; no request) runs every ``interval``, so that delivery resumes within
/// about an interval of the collector coming back instead of when a backoff of up to 5 minutes
/// runs out.
///
/// A pure state machine fed with monotonic times, like ``DeliveryTiming``. The rules:
/// - Only a failure without an answer starts probing. An answered failure (5xx, 408, 429, a
///   configuration problem) keeps its backoff: the collector is up and said so.
/// - A probe's success ends the backoff only after a probe of the same backoff failed: delivery
///   resumes when the collector was seen down and then up. A collector that accepts connections
///   but resets or never answers requests (a broken proxy, an overloaded server) is reachable at
///   the first probe, and then the backoff runs as before: no retry storm.
/// - A probe never shortens a collector's `Retry-After` (`notBefore`): a probe that succeeds
///   earlier resumes delivery when it ends.
/// - The backoff still ends at `retryAt` whatever the probes say, as it did without probes.
package struct ResumeProbe: Sendable, Equatable {
    /// The time between two probes. Default 500 ms.
    package let interval: Duration
    /// The longest a probe may take (a collector that drops packets). Default 1 s.
    package let timeout: Duration
    /// The backoff being probed, or nil when there is none to cut short.
    package private(set) var backoff: Backoff?

    package struct Backoff: Sendable, Equatable {
        /// When the backoff ends anyway.
        package var retryAt: Duration
        /// No attempt before this (the collector's `Retry-After`).
        package var notBefore: Duration
        /// When the next probe is due.
        package var nextProbe: Duration
        /// A probe of this backoff failed: the collector was seen down.
        package var sawDown = false
        /// A probe after ``sawDown`` succeeded: the collector came back.
        package var cameBack = false
        /// A probe runs (its end is ``ResumeProbe/probed(reachable:at:)``).
        package var probing = false
    }

    /// What to do while backing off.
    package enum Step: Sendable, Equatable {
        /// The backoff is over (or the collector came back): attempt delivery now.
        case retry
        /// Probe the collector now, then report ``ResumeProbe/probed(reachable:at:)``.
        case probe
        /// Nothing until then (or until a probe running ends).
        case wait(until: Duration)
    }

    package init(interval: Duration = .milliseconds(500), timeout: Duration = .seconds(1)) {
        precondition(interval > .zero && timeout > .zero, "a probe needs a positive interval and timeout")
        self.interval = interval
        self.timeout = timeout
    }

    /// An attempt failed; the next is due at `retryAt` and none may start before `notBefore`.
    /// Probing starts (the first probe at once) when the failure got no answer (`unanswered`),
    /// and stops otherwise.
    package mutating func failed(retryAt: Duration, notBefore: Duration = .zero, unanswered: Bool) {
        guard unanswered else {
            backoff = nil
            return
        }
        // The first probe at once: the collector just failed to answer, so it is seen down
        // unless it came back already.
        backoff = Backoff(retryAt: retryAt, notBefore: notBefore, nextProbe: .zero)
    }

    /// An attempt started or delivered: nothing to probe.
    package mutating func ended() {
        backoff = nil
    }

    /// What to do at `now`: the backoff ends at `retryAt` (a probe never delays it), or earlier when
    /// the collector came back (never before `notBefore`).
    package mutating func step(now: Duration, retryAt: Duration) -> Step {
        guard var b = backoff else { return now >= retryAt ? .retry : .wait(until: retryAt) }
        b.retryAt = retryAt
        defer { backoff = b }
        if now >= retryAt { return .retry }
        if b.cameBack { return now >= b.notBefore ? .retry : .wait(until: min(b.notBefore, retryAt)) }
        if b.probing { return .wait(until: retryAt) }
        if now >= b.nextProbe {
            b.probing = true
            return .probe
        }
        return .wait(until: min(b.nextProbe, retryAt))
    }

    /// The probe that ``step(now:retryAt:)`` asked for ended at `now`.
    ///
    /// A probe's end can be stale, and is then ignored: the probe runs outside the scheduler's
    /// lock, and meanwhile a flush may have delivered (``ended()``: no backoff left) or failed
    /// again (``failed(retryAt:notBefore:unanswered:)``: a new backoff, with no probe asked for
    /// yet). Its result says nothing about the backoff now. These are races of the I/O shell,
    /// not impossible inputs, so they are not ``InvalidTransition``s.
    package mutating func probed(reachable: Bool, at now: Duration) {
        guard var b = backoff, b.probing else { return }
        b.probing = false
        if reachable {
            if b.sawDown { b.cameBack = true }
        } else {
            b.sawDown = true
        }
        b.nextProbe = now + interval
        backoff = b
    }
}
