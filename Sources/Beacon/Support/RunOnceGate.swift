/// Work that runs once, with later callers waiting until it has finished: closing a tracker from
/// `close()`, `closeNow()`, `shutdown()` and `deinit`, possibly at the same time.
final class RunOnceGate: Sendable {
    private struct State {
        var started = false
        var finished = false
    }

    private let condition = ConditionLock(State())

    /// Claims the work: true for the first caller only, who must call ``finish()`` when done.
    func tryStart() -> Bool {
        condition.withLock { held in
            if held.state.started { return false }
            held.state.started = true
            return true
        }
    }

    /// Marks the work done and wakes the waiters.
    func finish() {
        condition.withLock { held in
            held.state.finished = true
            held.broadcast()
        }
    }

    /// Blocks until the work is done.
    func waitUntilFinished() {
        condition.withLock { held in
            while !held.state.finished { held.wait() }
        }
    }

    /// Runs `body` if no caller has claimed the work; otherwise waits for it to finish, unless
    /// `wait` is false (the caller is a thread the work itself waits for).
    func run(wait: Bool = true, _ body: () -> Void) {
        if tryStart() {
            body()
            finish()
        } else if wait {
            waitUntilFinished()
        }
    }
}
