import Foundation
import Synchronization
import Testing
import BeaconTestTraits

/// The `.blocking` trait (Tests/BeaconTestTraits): a blocking test body runs on a thread of the
/// executor's, never on the concurrency pool, and blocking tests do not wait for each other.
@Suite("The .blocking trait: blocking tests run off the concurrency pool", .blocking)
struct BlockingTraitTests {
    @Test("a synchronous body runs on the executor's threads")
    func synchronousBody() {
        #expect(BlockingTestExecutor.currentThreadName() == BlockingTestExecutor.threadName)
    }

    @Test("an async body, and the child tasks it starts, run on the executor's threads")
    func asyncBodyAndChildren() async {
        #expect(BlockingTestExecutor.currentThreadName() == BlockingTestExecutor.threadName)
        let childNames = await withTaskGroup(of: String.self) { group in
            for _ in 0..<2 { group.addTask { BlockingTestExecutor.currentThreadName() } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(childNames == [BlockingTestExecutor.threadName, BlockingTestExecutor.threadName])
    }

    /// More jobs blocked at once than a 2-core machine's pool has threads: each waits until all
    /// have arrived, at once here (no cap on the threads); on the pool, only once it has grown.
    @Test("as many jobs block at once as there are: eight, each waiting for all the others")
    func manyBlockAtOnce() async {
        final class Count: Sendable { let value = Atomic(0) }
        let count = Count()
        let all = 8
        let met = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<all {
                group.addTask {
                    count.value.add(1, ordering: .sequentiallyConsistent)
                    let deadline = ContinuousClock.now + .seconds(60)
                    while count.value.load(ordering: .sequentiallyConsistent) < all && ContinuousClock.now < deadline { usleep(1000) }
                    return count.value.load(ordering: .sequentiallyConsistent) == all
                }
            }
            return await group.allSatisfy { $0 }
        }
        #expect(met, "\(count.value.load(ordering: .sequentiallyConsistent)) of \(all) jobs ran at once")
    }
}
