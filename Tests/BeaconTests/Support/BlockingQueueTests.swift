import BeaconLog
import BeaconTestSupport
import BeaconTestTraits
import Foundation
import Synchronization
import Testing
@testable import Beacon

/// ``BlockingQueue``: work in order, one at a time, on Beacon's bounded pool threads (not on
/// libdispatch's, which Beacon neither names nor bounds).
@Suite("BlockingQueue: ordered work on Beacon's pool threads", .timeLimit(.minutes(2)))
struct BlockingQueueTests {
    /// The names of the process's threads (`/proc/self/task/*/comm`).
    static func threadNames() -> [String] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.compactMap { fileContents(atPath: "/proc/self/task/\($0)/comm").map { String(decoding: $0, as: UTF8.self) } }
            .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
    }

    @Test("one queue runs its work in order, one at a time, on beacon-pool threads, never on the concurrency pool")
    func oneQueueInOrder() async throws {
        let queue = BlockingQueue(label: "test")
        let seen = Mutex((order: [Int](), running: 0, most: 0, threads: Set<String>()))
        var started: [Started<Int>] = []
        for i in 0..<1_000 {
            started.append(queue.start {
                seen.withLock { s in
                    s.running += 1
                    s.most = max(s.most, s.running)
                    s.threads.insert(BlockingTestExecutor.currentThreadName())
                }
                if i % 100 == 0 { usleep(500) }
                seen.withLock { s in
                    s.order.append(i)
                    s.running -= 1
                }
                return i
            })
        }
        // Then the reads-then-acknowledgements shape: `run` waits its turn behind `start`.
        let last = try await queue.run { seen.withLock { $0.order.count } }
        #expect(last == 1_000, "run overtook work started before it")
        for (i, one) in started.enumerated() { #expect(await one.value == i) }
        let s = seen.withLock { $0 }
        #expect(s.order == Array(0..<1_000))
        #expect(s.most == 1)
        #expect(s.threads.allSatisfy { $0.hasPrefix("beacon-pool-") }, "work ran on \(s.threads.sorted())")
    }

    /// A burst of 1,000 blocking calls over 100 queues: never more beacon-pool threads than the
    /// pool's bound, and every call on one of them.
    @Test("a burst of 1,000 calls over 100 queues stays within the pool's threads")
    func burstStaysBounded() async {
        let queues = (0..<100).map { BlockingQueue(label: "burst-\($0)") }
        let bound = BlockingPool.shared.maximumThreads
        final class Seen: Sendable { let state = Mutex((threads: Set<String>(), mostPoolThreads: 0)) }
        let seen = Seen()
        await withTaskGroup(of: Void.self) { group in
            for i in 0..<1_000 {
                group.addTask {
                    await queues[i % queues.count].run {
                        usleep(200)
                        let pool = Self.threadNames().filter { $0.hasPrefix("beacon-pool-") }.count
                        seen.state.withLock { s in
                            s.threads.insert(BlockingTestExecutor.currentThreadName())
                            s.mostPoolThreads = max(s.mostPoolThreads, pool)
                        }
                    }
                }
            }
        }
        let s = seen.state.withLock { $0 }
        #expect(s.threads.allSatisfy { $0.hasPrefix("beacon-pool-") }, "work ran on \(s.threads.sorted())")
        #expect(s.mostPoolThreads <= bound)
        #expect(BlockingPool.shared.threadCount <= bound)
    }
}
