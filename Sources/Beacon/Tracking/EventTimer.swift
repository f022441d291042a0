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
