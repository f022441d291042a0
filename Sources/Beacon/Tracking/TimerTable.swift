/// Event-duration timers on the monotonic clock, so that changing the system time changes no
/// duration: start, pause, resume, end.
struct TimerTable: Sendable {
    struct Entry: Sendable {
        var accumulated: Duration = .zero
        var runningSince: Duration?
        var paused = false
        var suspended = false

        init(now: Duration, suspended: Bool) {
            self.suspended = suspended
            if !suspended { runningSince = now }
        }

        /// Applies a pause or suspension change, banking the running time when the timer stops.
        mutating func update(now: Duration, paused: Bool? = nil, suspended: Bool? = nil) {
            let wasRunning = runningSince != nil
            if let paused { self.paused = paused }
            if let suspended { self.suspended = suspended }
            let running = !self.paused && !self.suspended
            if wasRunning && !running, let since = runningSince {
                accumulated += now - since
                runningSince = nil
            } else if !wasRunning && running {
                runningSince = now
            }
        }

        func total(now: Duration) -> Duration {
            accumulated + (runningSince.map { now - $0 } ?? .zero)
        }
    }

    var nextHandle: UInt64 = 1
    var byHandle: [UInt64: Entry] = [:]
    var byName: [String: Entry] = [:]
    var allSuspended = false

    mutating func updateAll(now: Duration, suspended: Bool) {
        allSuspended = suspended
        for key in byHandle.keys { byHandle[key]!.update(now: now, suspended: suspended) }
        for key in byName.keys { byName[key]!.update(now: now, suspended: suspended) }
    }
}
