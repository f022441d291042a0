import Dispatch
import Synchronization

/// Runs actions at their deadlines with one dispatch timer for the whole process.
///
/// A pending deadline is one dictionary entry, and removing it releases its action at once. (A
/// `DispatchWorkItem` queued with `asyncAfter` keeps its closure, and everything the closure
/// holds, until its deadline even when cancelled: with a 30 s request timeout that kept every
/// request body of the last 30 s in memory.) The timer is armed for the earliest deadline; when
/// it fires it runs the actions that are due and re-arms for the next one.
///
/// ```swift
/// let entry = DeadlineTimer.shared.add(at: .now() + .seconds(30)) { task.cancel() }
/// DeadlineTimer.shared.remove(entry)   // finished in time
/// ```
package final class DeadlineTimer: @unchecked Sendable {
    /// The process-wide timer.
    package static let shared = DeadlineTimer()

    /// A scheduled action, for ``remove(_:)``.
    package struct Entry: Sendable, Hashable {
        fileprivate let id: UInt64
    }

    private struct State {
        var nextID: UInt64 = 0
        var actions: [UInt64: (deadline: UInt64, action: @Sendable () -> Void)] = [:]
        /// The deadline the timer is armed for (uptime nanoseconds), nil when idle.
        var armed: UInt64?
    }

    private let state = Mutex(State())
    // Thread-safe (libdispatch), but not marked `Sendable`; only scheduled under `state`'s lock.
    private let timer: any DispatchSourceTimer

    init() {
        timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "beacon.deadlines"))
        timer.setEventHandler { [weak self] in self?.fire() }
        timer.activate()
    }

    deinit {
        timer.cancel()
    }

    /// Runs `action` on the timer's queue at `deadline`, unless removed first.
    package func add(at deadline: DispatchTime, _ action: @escaping @Sendable () -> Void) -> Entry {
        let due = deadline.uptimeNanoseconds
        return state.withLock { s in
            s.nextID += 1
            s.actions[s.nextID] = (due, action)
            if s.armed.map({ due < $0 }) ?? true {
                s.armed = due
                timer.schedule(deadline: deadline, repeating: .never, leeway: .nanoseconds(0))
            }
            return Entry(id: s.nextID)
        }
    }

    /// Forgets `entry` (and releases its action). The timer stays armed; firing early is harmless.
    package func remove(_ entry: Entry) {
        _ = state.withLock { $0.actions.removeValue(forKey: entry.id) }
    }

    /// How many actions are pending (for tests).
    var pendingCount: Int { state.withLock { $0.actions.count } }

    private func fire() {
        let due = state.withLock { s -> [@Sendable () -> Void] in
            let now = DispatchTime.now().uptimeNanoseconds
            // Earliest first (then in the order added) when several are overdue: a late wake-up
            // of a loaded machine must not run them in the dictionary's order.
            var overdue: [(deadline: UInt64, id: UInt64, action: @Sendable () -> Void)] = []
            var next: UInt64?
            for (id, entry) in s.actions {
                if entry.deadline <= now {
                    overdue.append((entry.deadline, id, entry.action))
                    s.actions.removeValue(forKey: id)
                } else if next.map({ entry.deadline < $0 }) ?? true {
                    next = entry.deadline
                }
            }
            s.armed = next
            if let next {
                timer.schedule(deadline: DispatchTime(uptimeNanoseconds: next), repeating: .never, leeway: .nanoseconds(0))
            }
            return overdue.sorted { ($0.deadline, $0.id) < ($1.deadline, $1.id) }.map(\.action)
        }
        for action in due { action() }
    }
}
