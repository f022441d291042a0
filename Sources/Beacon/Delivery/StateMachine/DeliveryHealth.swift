/// Whether delivery flows or is paused, and which of its changes are reported: each pause once
/// when it starts and once when it ends, and at most one pause per `interval` (a collector that
/// flaps is reported at its first pause; the next report counts the pauses held back).
///
/// A pure state machine fed with monotonic times, like ``DeliveryTiming``: a pass that ends with a
/// failure pauses delivery until its backoff is over; the next accepted request resumes it.
struct DeliveryHealth: Sendable, Equatable {
    struct Pause: Sendable, Equatable {
        /// When the pause began, on the uploader's monotonic clock and on the wall clock.
        var since: Duration
        var sinceMillis: Int64
        /// Why, in a few words ("HTTP 503", "connection refused").
        var reason: String
        /// Whether its start was reported (its end is reported only then).
        var reported: Bool
    }

    enum Report: Sendable, Equatable {
        /// Delivery paused; `heldBack` earlier pauses were not reported (rate limit).
        case paused(heldBack: Int)
        /// Delivery resumed after a pause of `after`, paused for `reason`.
        case resumed(after: Duration, reason: String)
    }

    /// The least time between two pause reports.
    let interval: Duration
    private(set) var pause: Pause?
    private(set) var lastReported: Duration?
    private(set) var heldBack = 0

    init(interval: Duration = .seconds(10)) {
        self.interval = interval
    }

    var isPaused: Bool { pause != nil }

    /// A pass ended with `reason` and delivery waits for its backoff. Returns `.paused` when this
    /// starts a pause that is to be reported. `announced`: the caller reported the pause itself (a
    /// configuration problem, always loud); it counts as reported.
    mutating func failed(at now: Duration, millis: Int64, reason: String, announced: Bool = false) -> Report? {
        if var current = pause {
            // A pause already reported quietly becomes reported when the caller announces it.
            if announced && !current.reported {
                current.reported = true
                pause = current
                lastReported = now
                heldBack = 0
            }
            return nil
        }
        let due = announced || lastReported.map { now - $0 >= interval } ?? true
        pause = Pause(since: now, sinceMillis: millis, reason: reason, reported: due)
        guard due else {
            heldBack += 1
            return nil
        }
        lastReported = now
        defer { heldBack = 0 }
        return announced ? nil : .paused(heldBack: heldBack)
    }

    /// The collector accepted a request. Returns `.resumed` when a reported pause ends.
    mutating func delivered(at now: Duration) -> Report? {
        guard let ended = pause else { return nil }
        pause = nil
        return ended.reported ? .resumed(after: now - ended.since, reason: ended.reason) : nil
    }
}
