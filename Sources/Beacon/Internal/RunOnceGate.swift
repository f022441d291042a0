/// Work that runs once, with later callers waiting until it has finished: closing a tracker from
/// `close()`, `closeNow()`, `shutdown()` and `deinit`, possibly at the same time.
final class RunOnceGate: @unchecked Sendable {
    private let condition = ConditionLock()
    private var started = false
    private var finished = false

    /// Claims the work: true for the first caller only, who must call ``finish()`` when done.
    func tryStart() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        if started { return false }
        started = true
        return true
    }

    /// Marks the work done and wakes the waiters.
    func finish() {
        condition.lock()
        finished = true
        condition.broadcast()
        condition.unlock()
    }

    /// Blocks until the work is done.
    func waitUntilFinished() {
        condition.lock()
        while !finished { condition.wait() }
        condition.unlock()
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
