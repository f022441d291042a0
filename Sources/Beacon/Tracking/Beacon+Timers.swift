/// Event-duration timers: by handle (``EventTimer``) or by event name, on the monotonic clock.
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

    /// Starts (or restarts) the timer named `event`, for callers that cannot keep the handle
    /// ``startTimer(_:)`` returns: `trackTimerEnd(event)` tracks it with its duration.
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

    /// Stops every timer from counting (a service pausing, or an app sent to the background) until
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
        record(RecordEncoder.Input(type: .track, event: event, properties: properties, distinctId: distinctId, durationMicroseconds: duration.map(Beacon.microseconds), withPresets: true))
    }
}
