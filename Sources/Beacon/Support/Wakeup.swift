import BeaconLog
import Synchronization

/// A signal one task waits for: the delivery loop's "there may be work", or "cancel the pass".
///
/// ``signal()`` is cheap and never suspends (the writer thread's append hook calls it); a signal
/// given while nobody waits is kept for the next ``wait()``, so none is lost. Waiting ends when the
/// waiting task is cancelled too.
final class Wakeup: Sendable {
    private struct State {
        var signalled = false
        var waiter: CheckedContinuation<Void, Never>?
        /// Counts the waits, so that a deadline meant for an earlier one ends no later one.
        var waits: UInt64 = 0
        /// The deadline of the wait in progress, on ``TimerThread/shared``.
        var deadline: TimerThread.Entry?
    }

    private let state = Mutex(State())

    /// Wakes the waiter, or the next one.
    func signal() {
        let (waiter, deadline) = state.withLock { s -> (CheckedContinuation<Void, Never>?, TimerThread.Entry?) in
            defer { s.deadline = nil }
            if let waiter = s.waiter {
                s.waiter = nil
                return (waiter, s.deadline)
            }
            s.signalled = true
            return (nil, s.deadline)
        }
        if let deadline { TimerThread.shared.remove(deadline) }
        waiter?.resume()
    }

    /// Whether a signal is kept (for tests).
    var isSignalled: Bool { state.withLock { $0.signalled } }

    /// Returns once signalled (taking the signal) or once the task is cancelled. One waiter at a time.
    func wait() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { s -> Bool in
                    if s.signalled {
                        s.signalled = false
                        return true
                    }
                    precondition(s.waiter == nil, "one waiter at a time")
                    s.waiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            signal()
        }
    }

    /// Returns once signalled, once the monotonic clock reaches `until` (nil: no time limit), or
    /// once the task is cancelled.
    ///
    /// With the system's clock the deadline is an entry on ``TimerThread/shared`` that resumes
    /// the waiter: no task sleeps meanwhile. The delivery loop waits here between passes, a
    /// hundred times a second when events trickle in at 10,000 a second, and a sleeping child
    /// task per wait (created, scheduled as a dispatch timer, cancelled, joined) cost the
    /// concurrency pool about a microsecond per event. A test's clock is slept on instead.
    func wait(until: Duration?, time: MonotonicTime) async {
        guard let until else { return await wait() }
        guard time.isSystemClock else {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await self.wait() }
                group.addTask { try? await time.sleepUntil(until) }
                await group.next()
                group.cancelAll()
            }
            return
        }
        let delay = until - time.now()
        guard delay > .zero else { return }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let wait = state.withLock { s -> UInt64? in
                    if s.signalled {
                        s.signalled = false
                        return nil
                    }
                    precondition(s.waiter == nil, "one waiter at a time")
                    s.waiter = continuation
                    s.waits += 1
                    return s.waits
                }
                guard let wait else { return continuation.resume() }
                let entry = TimerThread.shared.add(after: delay) { [self] in expire(wait) }
                // Signalled (or expired) before the entry was kept: it must not outlive the wait.
                let ended = state.withLock { s -> Bool in
                    guard s.waits == wait, s.waiter != nil else { return true }
                    s.deadline = entry
                    return false
                }
                if ended { TimerThread.shared.remove(entry) }
            }
        } onCancel: {
            signal()
        }
    }

    /// The deadline of wait number `wait` passed: resumes it if it still waits.
    private func expire(_ wait: UInt64) {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            guard s.waits == wait, let waiter = s.waiter else { return nil }
            s.waiter = nil
            s.deadline = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Whether a deadline of a wait is pending (for tests).
    var hasDeadline: Bool { state.withLock { $0.deadline != nil } }
}
