import BeaconLog
import Dispatch

/// Request deadlines run on BeaconLog's ``TimerThread``: one `beacon-timer` thread for the whole
/// process, shared with the log's flush timers. Removing a deadline releases its action (and the
/// request body it holds) at once, not when the deadline passes.
///
/// ```swift
/// let entry = DeadlineTimer.shared.add(at: .now() + .seconds(30)) { task.cancel() }
/// DeadlineTimer.shared.remove(entry)   // finished in time
/// ```
package typealias DeadlineTimer = TimerThread

extension TimerThread {
    /// Runs `action` on the timer's thread at `deadline`, unless removed first.
    package func add(at deadline: DispatchTime, _ action: @escaping @Sendable () -> Void) -> Entry {
        // Through the delay: DispatchTime's clock and the timer's need not be the same.
        let now = DispatchTime.now().uptimeNanoseconds
        let delay = deadline.uptimeNanoseconds > now ? deadline.uptimeNanoseconds - now : 0
        return add(atNanoseconds: monotonicNanoseconds() &+ delay, action)
    }
}
