import BeaconLog
import BeaconTestSupport
import BeaconTestTraits
import Foundation
import Glibc
import Synchronization
import Testing

/// ``TimerThread``: actions at their deadlines, earliest first, on one named thread of Beacon's.
@Suite("TimerThread: deadlines on one named thread", .timeLimit(.minutes(2)))
struct TimerThreadTests {
    /// Every order of adding the same deadlines (all 120 orders of five): they fire earliest
    /// first, on the timer's thread, and a removed one never fires.
    @Test("actions fire in deadline order whatever the order they were added in")
    func firesInDeadlineOrder() async {
        let timer = TimerThread(name: "beacon-ttest")
        let offsets = [10, 30, 60, 90, 120]
        var orders: [[Int]] = [[]]
        for _ in offsets { orders = orders.flatMap { order in (0..<offsets.count).filter { !order.contains($0) }.map { order + [$0] } } }
        #expect(orders.count == 120)
        let fired = Mutex<[[Int]]>(Array(repeating: [], count: orders.count))
        let threads = Mutex<Set<String>>([])
        // Far enough ahead that adding every entry on a loaded machine ends before the first is due.
        let start = monotonicNanoseconds() + 2_000_000_000
        for (round, order) in orders.enumerated() {
            var entries: [Int: TimerThread.Entry] = [:]
            for i in order {
                entries[i] = timer.add(atNanoseconds: start + UInt64(offsets[i]) * 1_000_000) {
                    threads.withLock { _ = $0.insert(BlockingTestExecutor.currentThreadName()) }
                    fired.withLock { $0[round].append(i) }
                }
            }
            timer.remove(entries[round % offsets.count]!)
        }
        // The order is checked when every entry was added (and one removed per round) before the
        // first deadline, nearly always; a machine stalled past it may have run some early.
        let inTime = monotonicNanoseconds() < start
        let done = await eventually(60) {
            let all = fired.withLock { $0 }
            return orders.indices.allSatisfy { round in Set(all[round]).isSuperset(of: (0..<offsets.count).filter { $0 != round % offsets.count }) }
        }
        #expect(done)
        #expect(timer.pendingCount == 0)
        if inTime {
            for (round, _) in orders.enumerated() {
                let removed = round % offsets.count
                #expect(fired.withLock { $0[round] } == (0..<offsets.count).filter { $0 != removed }, "round \(round)")
            }
        } else {
            print("firesInDeadlineOrder: the entries were added after the first deadline (a stalled machine); their order is not checked")
        }
        #expect(threads.withLock { $0 } == ["beacon-ttest"])
    }

    final class Flag: Sendable {
        let value = Atomic<Bool>(false)
        var isSet: Bool { value.load(ordering: .relaxed) }
    }

    final class Held: Sendable {
        let released: Flag
        init(_ released: Flag) { self.released = released }
        deinit { released.value.store(true, ordering: .relaxed) }
    }

    @Test("a removed action is released at once, not at its deadline")
    func removedActionIsReleasedAtOnce() {
        let timer = TimerThread(name: "beacon-ttest")
        let released = Flag()
        var entry: TimerThread.Entry?
        do {
            let held = Held(released)
            entry = timer.add(after: .seconds(3_600)) { _ = held }
        }
        #expect(!released.isSet)
        timer.remove(entry!)
        #expect(released.isSet, "the action (and what it holds) outlived its removal")
        #expect(timer.pendingCount == 0)
    }

    @Test("an earlier deadline added later wakes the timer: it does not wait for the later one")
    func earlierDeadlineWakes() async {
        let timer = TimerThread(name: "beacon-ttest")
        let fired = Flag()
        _ = timer.add(after: .seconds(3_600)) {}
        // The thread now sleeps until an hour from now.
        try? await Task.sleep(for: .milliseconds(50))
        _ = timer.add(after: .milliseconds(10)) { fired.value.store(true, ordering: .relaxed) }
        #expect(await eventually(60) { fired.isSet })
    }

    @Test("the thread ends when idle and starts again for a new deadline")
    func threadEndsWhenIdle() async {
        let timer = TimerThread(name: "beacon-ttest", idleTimeout: .milliseconds(100))
        let count = Atomic<Int>(0)
        _ = timer.add(after: .milliseconds(1)) { count.add(1, ordering: .relaxed) }
        #expect(await eventually(60) { count.load(ordering: .relaxed) == 1 })
        #expect(await eventually(60) { !timer.isRunning })
        _ = timer.add(after: .milliseconds(1)) { count.add(1, ordering: .relaxed) }
        #expect(await eventually(60) { count.load(ordering: .relaxed) == 2 })
    }
}
