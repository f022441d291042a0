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
    }

    private let state = Mutex(State())

    /// Wakes the waiter, or the next one.
    func signal() {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if let waiter = s.waiter {
                s.waiter = nil
                return waiter
            }
            s.signalled = true
            return nil
        }
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
    func wait(until: Duration?, time: MonotonicTime) async {
        guard let until else { return await wait() }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.wait() }
            group.addTask { try? await time.sleepUntil(until) }
            await group.next()
            group.cancelAll()
        }
    }
}
