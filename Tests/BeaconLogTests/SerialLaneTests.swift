import BeaconLog
import BeaconTestSupport
import BeaconTestTraits
import Foundation
import Glibc
import Synchronization
import Testing

/// ``SerialLane``: work in order, one call at a time, on the pool's threads; `sync` in its turn on
/// the caller's thread, and never stuck behind a pool that is full.
@Suite("SerialLane: ordered work on Beacon's bounded threads", .timeLimit(.minutes(2)))
struct SerialLaneTests {
    /// Records what ran, in order, and how many ran at once.
    final class Journal: Sendable {
        private let state = Mutex((order: [Int](), running: 0, most: 0, threads: Set<String>()))

        func run(_ i: Int, sleepMicroseconds: UInt32 = 0) {
            let name = BlockingTestExecutor.currentThreadName()
            state.withLock { s in
                s.running += 1
                s.most = max(s.most, s.running)
                s.threads.insert(name)
            }
            if sleepMicroseconds > 0 { usleep(sleepMicroseconds) }
            state.withLock { s in
                s.order.append(i)
                s.running -= 1
            }
        }

        var order: [Int] { state.withLock { $0.order } }
        var most: Int { state.withLock { $0.most } }
        var threads: Set<String> { state.withLock { $0.threads } }
    }

    /// A lane on a pool of its own, with `threads` threads named `beacon-ltest-N`.
    static func lane(threads: Int) -> (BlockingPool, SerialLane, Journal) {
        let pool = BlockingPool(name: "beacon-ltest", maximumThreads: threads)
        return (pool, SerialLane(pool: pool), Journal())
    }

    @Test("queued work runs in order, one at a time, on the pool's named threads", arguments: [1, 2, 8])
    func asyncRunsInOrder(poolThreads: Int) async {
        let (pool, lane, journal) = Self.lane(threads: poolThreads)
        for i in 0..<1_000 { lane.async { journal.run(i, sleepMicroseconds: i % 100 == 0 ? 500 : 0) } }
        let done = await eventually(60) { journal.order.count == 1_000 }
        #expect(done)
        #expect(journal.order == Array(0..<1_000))
        #expect(journal.most == 1)
        #expect(journal.threads.allSatisfy { $0.hasPrefix("beacon-ltest-") }, "\(journal.threads)")
        #expect(pool.threadCount <= poolThreads)
    }

    /// Every interleaving the seeds give of `async` and `sync` from several threads: each thread's
    /// calls run in the order it made them, never two at once, and every one runs.
    @Test("async and sync from several threads keep each thread's order, one at a time", arguments: 0..<8)
    func mixedCallsKeepOrder(seed: UInt64) async {
        let (_, lane, journal) = Self.lane(threads: 1 + Int(seed % 3))
        let callers = 4, calls = 200
        let finished = DispatchSemaphore(value: 0)
        for caller in 0..<callers {
            let thread = Thread {
                var random = SplitMix(seed: seed &* 31 &+ UInt64(caller))
                for call in 0..<calls {
                    let id = caller * calls + call
                    if random.next() % 3 == 0 {
                        lane.sync { journal.run(id) }
                    } else {
                        lane.async { journal.run(id) }
                    }
                }
                finished.signal()
            }
            thread.start()
        }
        for _ in 0..<callers { #expect(finished.wait(timeout: .now() + 60) == .success) }
        let done = await eventually(60) { journal.order.count == callers * calls }
        #expect(done)
        let order = journal.order
        for caller in 0..<callers {
            let mine = order.filter { $0 / calls == caller }
            #expect(mine == Array(caller * calls..<(caller + 1) * calls), "caller \(caller)")
        }
        #expect(journal.most == 1)
    }

    /// `sync` from the pool's only thread, with earlier work queued behind it on that same pool:
    /// the caller runs that work itself, in order, instead of waiting for a thread that never frees.
    @Test("sync never waits for a pool thread: on a full pool it runs the work ahead of it")
    func syncOnAFullPool() {
        let (pool, lane, journal) = Self.lane(threads: 1)
        let gate = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        pool.submit {
            gate.wait()
            lane.sync { journal.run(100) }
            done.signal()
        }
        // Queued behind the job above, which holds the pool's one thread.
        for i in 0..<10 { lane.async { journal.run(i) } }
        gate.signal()
        #expect(done.wait(timeout: .now() + 60) == .success, "sync waited for a pool thread")
        #expect(journal.order == Array(0..<10) + [100])
        // Work queued after the `sync` still runs.
        lane.async { journal.run(200) }
        #expect(eventually(within: 60) { journal.order.last == 200 })
    }

    /// Four callers on the pool's four threads, each queueing work and calling `sync` in turn:
    /// all of them finish.
    @Test("as many sync callers as pool threads, all on the pool, all finish")
    func poolFullOfSyncCallers() {
        let (pool, lane, journal) = Self.lane(threads: 4)
        let done = DispatchSemaphore(value: 0)
        for caller in 0..<4 {
            pool.submit {
                for i in 0..<50 {
                    lane.async { journal.run(caller * 1_000 + i) }
                    if i % 10 == 9 { lane.sync { journal.run(caller * 1_000 + 500 + i) } }
                }
                done.signal()
            }
        }
        for _ in 0..<4 { #expect(done.wait(timeout: .now() + 60) == .success) }
        #expect(eventually(within: 60) { journal.order.count == 4 * 55 })
        #expect(journal.most == 1)
    }
}
