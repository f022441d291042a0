import Synchronization

/// A monotonic clock that moves only when ``advance(by:)`` is called: sleeps complete when the
/// clock is advanced past their deadline. Use it to test backoff, intervals and timers without
/// waiting.
///
/// ```swift
/// let clock = ManualClock()
/// let uploader = Uploader(log: log, configuration: config, transport: transport, clock: clock)
/// await clock.waitForSleepers(count: 1)
/// clock.advance(by: .seconds(1))
/// ```
public final class ManualClock: Clock, Sendable {
    /// A point on the manual clock: the time advanced since it was made.
    public struct Instant: InstantProtocol, Sendable, Hashable, Comparable, CustomStringConvertible {
        /// Time since the clock was made.
        public var offset: Duration

        /// The instant `offset` after the clock was made.
        public init(offset: Duration) { self.offset = offset }
        /// The instant `duration` later.
        public func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        /// The time from this instant to `other`.
        public func duration(to other: Instant) -> Duration { other.offset - offset }
        public static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
        public var description: String { "\(offset)" }
    }

    struct Sleeper {
        var id: UInt64
        var deadline: Instant
        var continuation: CheckedContinuation<Void, any Error>
    }

    struct State {
        var now = Instant(offset: .zero)
        var nextID: UInt64 = 0
        var sleepers: [Sleeper] = []
        var watchers: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    let state = Mutex(State())

    /// A clock at offset zero.
    public init() {}

    /// The time advanced so far.
    public var now: Instant { state.withLock { $0.now } }
    /// Zero: the clock moves only by ``advance(by:)``, by any amount.
    public var minimumResolution: Duration { .zero }

    /// Suspends until the clock is advanced to `deadline` (at once if it is there already).
    /// Throws `CancellationError` when the task is cancelled.
    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        let id = state.withLock { s -> UInt64 in
            s.nextID += 1
            return s.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome = state.withLock { s -> (resume: Bool, watchers: [CheckedContinuation<Void, Never>]) in
                    if Task.isCancelled { return (true, []) }
                    if deadline <= s.now { return (true, []) }
                    s.sleepers.append(Sleeper(id: id, deadline: deadline, continuation: continuation))
                    return (false, Self.readyWatchers(&s))
                }
                for watcher in outcome.watchers { watcher.resume() }
                if outcome.resume {
                    if Task.isCancelled { continuation.resume(throwing: CancellationError()) } else { continuation.resume() }
                }
            }
        } onCancel: {
            let sleeper = state.withLock { s -> Sleeper? in
                guard let i = s.sleepers.firstIndex(where: { $0.id == id }) else { return nil }
                return s.sleepers.remove(at: i)
            }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    static func readyWatchers(_ s: inout State) -> [CheckedContinuation<Void, Never>] {
        var ready: [CheckedContinuation<Void, Never>] = []
        s.watchers.removeAll { watcher in
            guard s.sleepers.count >= watcher.count else { return false }
            ready.append(watcher.continuation)
            return true
        }
        return ready
    }

    /// Moves the clock forward and wakes every sleeper whose deadline is reached, earliest first.
    public func advance(by duration: Duration) {
        precondition(duration >= .zero, "a monotonic clock does not go back")
        let due = state.withLock { s -> [Sleeper] in
            s.now = s.now.advanced(by: duration)
            let now = s.now
            let due = s.sleepers.filter { $0.deadline <= now }.sorted { $0.deadline < $1.deadline }
            s.sleepers.removeAll { $0.deadline <= now }
            return due
        }
        for sleeper in due { sleeper.continuation.resume() }
    }

    /// Moves the clock to the earliest sleeper's deadline (if any) and wakes it; returns that deadline.
    @discardableResult
    public func advanceToNextDeadline() -> Instant? {
        guard let next = nextDeadline else { return nil }
        advance(by: max(.zero, now.duration(to: next)))
        return next
    }

    /// The number of tasks sleeping on this clock.
    public var sleeperCount: Int { state.withLock { $0.sleepers.count } }

    /// The earliest deadline a task sleeps until, if any.
    public var nextDeadline: Instant? { state.withLock { $0.sleepers.map(\.deadline).min() } }

    /// Returns once at least `count` tasks sleep on this clock.
    public func waitForSleepers(count: Int = 1) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { s -> Bool in
                if s.sleepers.count >= count { return true }
                s.watchers.append((count, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }
}
