/// Event-duration timers on the monotonic clock (seed 002): start, pause, resume, end.
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

/// A running event-duration timer, from ``Beacon/startTimer(_:)``. Several timers with the same
/// event name may overlap; each handle measures its own.
///
/// ```swift
/// let timer = beacon.startTimer("video_play")
/// timer.pause(); timer.resume()
/// timer.end(properties: ["video": "intro"])   // tracks video_play with $event_duration
/// ```
public struct EventTimer: Sendable {
    /// The event the timer tracks when it ends.
    public let event: String
    let handle: UInt64
    let beacon: Beacon

    /// Stops counting time until ``resume()``. Pausing a paused timer does nothing.
    public func pause() {
        let now = beacon.elapsed()
        beacon.timerState.withLock { $0.byHandle[handle]?.update(now: now, paused: true) }
    }

    /// Counts time again after ``pause()``.
    public func resume() {
        let now = beacon.elapsed()
        beacon.timerState.withLock { $0.byHandle[handle]?.update(now: now, paused: false) }
    }

    /// The time counted so far, or nil if the timer has ended.
    public var elapsed: Duration? {
        let now = beacon.elapsed()
        return beacon.timerState.withLock { $0.byHandle[handle]?.total(now: now) }
    }

    /// Tracks the event with `$event_duration` (milliseconds, 3 decimals) and forgets the timer.
    /// Ending a timer twice tracks the second event without a duration.
    public func end(properties: [String: PropertyValue] = [:], distinctId: String? = nil) {
        let now = beacon.elapsed()
        let total = beacon.timerState.withLock { $0.byHandle.removeValue(forKey: handle)?.total(now: now) }
        beacon.trackTimed(event, duration: total, properties: properties, distinctId: distinctId)
    }

    /// Forgets the timer without tracking anything.
    public func cancel() {
        _ = beacon.timerState.withLock { $0.byHandle.removeValue(forKey: handle) }
    }
}

extension Beacon {
    /// Starts a timer for `event` and returns its handle; ``EventTimer/end(properties:distinctId:)``
    /// tracks the event with `$event_duration`. Uses the monotonic clock, so changing the system
    /// time changes no duration.
    public func startTimer(_ event: String) -> EventTimer {
        let now = elapsed()
        let handle = timerState.withLock { t -> UInt64 in
            let handle = t.nextHandle
            t.nextHandle += 1
            t.byHandle[handle] = TimerTable.Entry(now: now, suspended: t.allSuspended)
            return handle
        }
        return EventTimer(event: event, handle: handle, beacon: self)
    }

    /// Starts (or restarts) the timer named `event`, as in the seeds: `trackTimerEnd(event)` tracks
    /// it with its duration.
    public func trackTimerStart(_ event: String) {
        let now = elapsed()
        timerState.withLock { $0.byName[event] = TimerTable.Entry(now: now, suspended: $0.allSuspended) }
    }

    /// Pauses the timer named `event`; nothing if there is none.
    public func trackTimerPause(_ event: String) {
        let now = elapsed()
        timerState.withLock { $0.byName[event]?.update(now: now, paused: true) }
    }

    /// Resumes the timer named `event`; nothing if there is none.
    public func trackTimerResume(_ event: String) {
        let now = elapsed()
        timerState.withLock { $0.byName[event]?.update(now: now, paused: false) }
    }

    /// Tracks `event` with the duration of its timer as `$event_duration` and removes the timer.
    /// Without a timer of that name, tracks the event without a duration.
    public func trackTimerEnd(_ event: String, properties: [String: PropertyValue] = [:], distinctId: String? = nil) {
        let now = elapsed()
        let total = timerState.withLock { $0.byName.removeValue(forKey: event)?.total(now: now) }
        trackTimed(event, duration: total, properties: properties, distinctId: distinctId)
    }

    /// Removes the timer named `event` without tracking.
    public func removeTimer(_ event: String) {
        _ = timerState.withLock { $0.byName.removeValue(forKey: event) }
    }

    /// Stops every timer from counting (a service pausing, the seeds' background case) until
    /// ``resumeAllTimers()``. Timers started meanwhile start suspended. Pauses made by the caller
    /// are kept across suspend and resume.
    public func suspendAllTimers() {
        let now = elapsed()
        timerState.withLock { $0.updateAll(now: now, suspended: true) }
    }

    /// Lets every suspended timer count again (those not paused by the caller).
    public func resumeAllTimers() {
        let now = elapsed()
        timerState.withLock { $0.updateAll(now: now, suspended: false) }
    }

    func trackTimed(_ event: String, duration: Duration?, properties: [String: PropertyValue], distinctId: String?) {
        record(RecordEncoder.Input(type: .track, event: event, properties: properties, distinctId: distinctId, trackId: 0,
                                   timeMilliseconds: 0, durationMicroseconds: duration.map(Beacon.microseconds), withPresets: true))
    }
}
