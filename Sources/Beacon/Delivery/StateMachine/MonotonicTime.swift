/// A monotonic time source made from any `Clock<Duration>`: time since it was made, and sleeping
/// until such a time. Changing the system time changes neither.
struct MonotonicTime: Sendable {
    /// Time elapsed since this value was made.
    let now: @Sendable () -> Duration
    /// Sleeps until `now()` reaches the given value; throws `CancellationError` when cancelled.
    let sleepUntil: @Sendable (Duration) async throws -> Void
    /// The clock is the system's (`ContinuousClock` or `SuspendingClock`), so a wait until one of
    /// its times can be a ``TimerThread`` deadline instead of a sleeping task (see
    /// ``Wakeup/wait(until:time:)``); a test's clock is slept on through ``sleepUntil``.
    let isSystemClock: Bool

    init(_ clock: any Clock<Duration>) {
        (now, sleepUntil) = Self.functions(of: clock)
        isSystemClock = clock is ContinuousClock || clock is SuspendingClock
    }

    private static func functions<C: Clock<Duration>>(of clock: C) -> (@Sendable () -> Duration, @Sendable (Duration) async throws -> Void) {
        let origin = clock.now
        return ({ origin.duration(to: clock.now) }, { target in try await clock.sleep(until: origin.advanced(by: target), tolerance: nil) })
    }
}
