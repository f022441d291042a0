import Foundation
import Glibc
import Synchronization
import BeaconLog
import Testing
@testable import Beacon

/// ``BlockingPool``: blocking work from async code runs on a bounded set of Beacon's threads,
/// never a thread per call.
@Suite("BlockingPool: a bounded set of named threads", .timeLimit(.minutes(2)))
struct BlockingPoolTests {
    /// Jobs that each wait (up to `patience`) for one more than `bound` jobs to run at once.
    /// With a thread per call they all run together and the count passes `bound`; on a pool of
    /// `bound` threads it never can.
    static func mostAtOnce(jobs: Int, bound: Int, patience: Duration, run: @escaping @Sendable (@escaping @Sendable () -> Void) async -> Void) async -> Int {
        let lock = ConditionLock((running: 0, most: 0))
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<jobs {
                group.addTask {
                    await run {
                        let until = monotonicNanoseconds() + UInt64(patience.nanoseconds)
                        lock.withLock { held in
                            held.state.running += 1
                            held.state.most = max(held.state.most, held.state.running)
                            held.broadcast()
                            while held.state.running <= bound, held.wait(untilNanoseconds: until) || monotonicNanoseconds() < until {}
                            held.state.running -= 1
                        }
                    }
                }
            }
        }
        return lock.withLock { $0.state.most }
    }

    @Test("BlockingQueue.run never runs more calls at once than the shared pool's maximum")
    func staticRunIsBounded() async {
        let bound = BlockingPool.shared.maximumThreads
        let most = await Self.mostAtOnce(jobs: bound * 3, bound: bound, patience: .milliseconds(300)) { job in
            await BlockingQueue.run { job() }
        }
        #expect(most <= bound, "\(most) calls ran at once; the pool has \(bound) threads")
        #expect(most >= 1)
    }

    @Test("a pool starts at most its maximum of threads, names them, and ends them when idle")
    func threadsNamedBoundedAndEnded() async throws {
        let pool = BlockingPool(name: "beacon-ptest", maximumThreads: 3, idleTimeout: .milliseconds(200))
        let names = Mutex<Set<String>>([])
        let most = await Self.mostAtOnce(jobs: 12, bound: 3, patience: .milliseconds(100)) { job in
            await pool.run {
                var name = [CChar](repeating: 0, count: 32)
                let fd = open("/proc/thread-self/comm", O_RDONLY)
                if fd >= 0 {
                    _ = read(fd, &name, 31)
                    close(fd)
                }
                let text = String(cString: name).trimmingCharacters(in: .whitespacesAndNewlines)
                names.withLock { _ = $0.insert(text) }
                job()
            }
        }
        #expect(most <= 3)
        #expect(pool.threadCount <= 3)
        let seen = names.withLock { $0 }
        #expect(!seen.isEmpty && seen.isSubset(of: ["beacon-ptest-1", "beacon-ptest-2", "beacon-ptest-3"]), "\(seen)")
        // Idle threads end (the timeout is 200 ms; a loaded machine may take much longer).
        let clock = ContinuousClock()
        let until = clock.now + .seconds(60)
        while pool.threadCount > 0, clock.now < until { try await Task.sleep(for: .milliseconds(20)) }
        #expect(pool.threadCount == 0)
        // And start again for new work.
        #expect(await pool.run { 42 } == 42)
    }

    @Test("work queued beyond the maximum runs in order once a thread is free")
    func queuedWorkRunsInOrder() async {
        let pool = BlockingPool(name: "beacon-ptest", maximumThreads: 1)
        let order = Mutex<[Int]>([])
        let gate = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        pool.submit { gate.wait() }
        for i in 0..<20 { pool.submit { order.withLock { $0.append(i) } } }
        pool.submit { done.signal() }
        gate.signal()
        await BlockingQueue.run { done.wait() }
        #expect(order.withLock { $0 } == Array(0..<20))
        // One thread at most; 0 once it idled out (30 s: a stalled loaded run got there).
        #expect(pool.threadCount <= 1)
    }
}
