import Foundation

/// Runs actions at their deadlines on one thread of Beacon's own, named for the kernel
/// (`beacon-timer` for ``shared``): a heap of deadlines and a condition wait, in place of dispatch
/// timers (whose threads libdispatch owns).
///
/// Actions run on the timer's thread, earliest deadline first (then in the order added), so they
/// must be short: blocking work is handed on (a ``SerialLane``). Removing an action releases it
/// (and what it holds) at once, not at its deadline. The thread starts with the first action and
/// ends after ``idleTimeout`` with none pending. Adding an action wakes the thread only when it
/// is due before every other.
///
/// ```swift
/// let entry = TimerThread.shared.add(after: .seconds(30)) { task.cancel() }
/// TimerThread.shared.remove(entry)   // finished in time
/// ```
package final class TimerThread: Sendable {
    /// The process's timer: request deadlines, the log's group-commit and counter flushes, the
    /// writer's stall watch.
    package static let shared = TimerThread(name: "beacon-timer")

    /// A scheduled action, for ``remove(_:)``.
    package struct Entry: Sendable, Hashable {
        fileprivate let id: UInt64
    }

    private struct Due: Comparable {
        var deadline: UInt64
        var id: UInt64
        static func < (a: Due, b: Due) -> Bool { (a.deadline, a.id) < (b.deadline, b.id) }
    }

    private struct State: Sendable {
        var nextID: UInt64 = 0
        var actions: [UInt64: @Sendable () -> Void] = [:]
        /// Every deadline added, removed ones included until they reach the top (or a rebuild).
        var heap = MinHeap<Due>()
        var threadRunning = false
        /// The deadline the thread sleeps until, nil while it runs actions or is not running.
        var sleepingUntil: UInt64?

        /// Drops removed entries from the top, and rebuilds the heap when they outnumber the rest.
        mutating func dropRemoved() {
            if heap.count > 1024 && heap.count > 4 * actions.count {
                heap = MinHeap(heap.elements.filter { actions[$0.id] != nil })
            }
            while let top = heap.top, actions[top.id] == nil { _ = heap.pop() }
        }
    }

    /// How long the thread waits with nothing pending before it ends.
    package let idleTimeout: Duration
    private let name: String
    private let lock = ConditionLock(State())

    /// A timer whose thread is named `name` (at most 15 bytes are kept).
    package init(name: String, idleTimeout: Duration = .seconds(30)) {
        self.name = name
        self.idleTimeout = idleTimeout
    }

    /// Runs `action` on the timer's thread at `deadline` (nanoseconds of `CLOCK_MONOTONIC`, as
    /// ``monotonicNanoseconds()``), unless removed first.
    package func add(atNanoseconds deadline: UInt64, _ action: @escaping @Sendable () -> Void) -> Entry {
        let (entry, start) = lock.withLock { held -> (Entry, Bool) in
            held.state.nextID += 1
            let id = held.state.nextID
            held.state.actions[id] = action
            held.state.heap.push(Due(deadline: deadline, id: id))
            if let sleeping = held.state.sleepingUntil, deadline < sleeping { held.broadcast() }
            if held.state.threadRunning { return (Entry(id: id), false) }
            held.state.threadRunning = true
            return (Entry(id: id), true)
        }
        if start {
            let thread = Thread { [self] in
                nameCurrentThread(name)
                run()
            }
            thread.name = name
            thread.start()
        }
        return entry
    }

    /// Runs `action` on the timer's thread after `delay`, unless removed first.
    @discardableResult
    package func add(after delay: Duration, _ action: @escaping @Sendable () -> Void) -> Entry {
        add(atNanoseconds: monotonicNanoseconds() &+ UInt64(max(0, delay.nanoseconds)), action)
    }

    /// Forgets `entry` and releases its action, if it has not run.
    package func remove(_ entry: Entry) {
        let action = lock.withLock { $0.state.actions.removeValue(forKey: entry.id) }
        // Released here, outside the lock: what it holds may have a deinitializer.
        _ = action
    }

    /// How many actions are pending (for tests).
    package var pendingCount: Int { lock.withLock { $0.state.actions.count } }

    /// Whether the timer's thread runs now (for tests).
    package var isRunning: Bool { lock.withLock { $0.state.threadRunning } }

    private func run() {
        let idle = UInt64(max(0, idleTimeout.nanoseconds))
        var due: [@Sendable () -> Void] = []
        while true {
            let stop = lock.withLock { held -> Bool in
                var idleSince = monotonicNanoseconds()
                while true {
                    held.state.dropRemoved()
                    let now = monotonicNanoseconds()
                    guard let top = held.state.heap.top else {
                        if now >= idleSince &+ idle {
                            held.state.threadRunning = false
                            return true
                        }
                        held.state.sleepingUntil = idleSince &+ idle
                        _ = held.wait(untilNanoseconds: idleSince &+ idle)
                        held.state.sleepingUntil = nil
                        continue
                    }
                    if top.deadline > now {
                        held.state.sleepingUntil = top.deadline
                        _ = held.wait(untilNanoseconds: top.deadline)
                        held.state.sleepingUntil = nil
                        idleSince = monotonicNanoseconds()
                        continue
                    }
                    while let next = held.state.heap.top, next.deadline <= now {
                        _ = held.state.heap.pop()
                        if let action = held.state.actions.removeValue(forKey: next.id) { due.append(action) }
                    }
                    if !due.isEmpty { return false }
                }
            }
            if stop { return }
            for action in due { action() }
            due.removeAll(keepingCapacity: true)
        }
    }
}

/// A binary min-heap.
struct MinHeap<Element: Comparable> {
    private(set) var elements: [Element] = []

    init() {}

    init(_ elements: [Element]) {
        for element in elements { push(element) }
    }

    var count: Int { elements.count }
    var top: Element? { elements.first }

    mutating func push(_ element: Element) {
        elements.append(element)
        var child = elements.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard elements[child] < elements[parent] else { break }
            elements.swapAt(child, parent)
            child = parent
        }
    }

    mutating func pop() -> Element? {
        guard !elements.isEmpty else { return nil }
        elements.swapAt(0, elements.count - 1)
        let top = elements.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1, right = left + 1
            var smallest = parent
            if left < elements.count, elements[left] < elements[smallest] { smallest = left }
            if right < elements.count, elements[right] < elements[smallest] { smallest = right }
            if smallest == parent { break }
            elements.swapAt(parent, smallest)
            parent = smallest
        }
        return top
    }
}
extension MinHeap: Sendable where Element: Sendable {}
