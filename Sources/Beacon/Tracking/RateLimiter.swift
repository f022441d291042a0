import Synchronization

/// Admits at most `perSecond` calls in each second of the monotonic clock.
final class RateLimiter: Sendable {
    struct State {
        var windowStart: ContinuousClock.Instant
        var admitted = 0
        var suppressed = 0
    }
    let perSecond: Int
    let state: Mutex<State>

    init(perSecond: Int) {
        self.perSecond = perSecond
        self.state = Mutex(State(windowStart: .now))
    }

    /// Nil when the call is suppressed; else how many were suppressed since the last admitted one.
    func admit() -> Int? {
        state.withLock { s in
            let now = ContinuousClock.now
            if now - s.windowStart >= .seconds(1) {
                s.windowStart = now
                s.admitted = 0
            }
            guard s.admitted < perSecond else {
                s.suppressed += 1
                return nil
            }
            s.admitted += 1
            defer { s.suppressed = 0 }
            return s.suppressed
        }
    }
}
