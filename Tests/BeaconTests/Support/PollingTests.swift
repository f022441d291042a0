import BeaconTestSupport
import Synchronization
import Testing

/// The async ``eventually(_:_:)`` every suite polls with.
@Suite("Polling: eventually")
struct PollingTests {
    /// A cancelled task's sleeps throw at once: polling on would spin on a thread of the pool
    /// until the bound (a loaded run found both threads of a 2-core pool spinning so, and every
    /// other async test past its time limit).
    @Test("in a cancelled task it tries once more and returns, never spinning until its bound")
    func cancelledTaskDoesNotSpin() async {
        let tries = Mutex(0)
        let task = Task {
            try? await Task.sleep(for: .seconds(3600))  // until cancelled
            return await eventually(2) {
                tries.withLock { $0 += 1 }
                return false
            }
        }
        task.cancel()
        #expect(await task.value == false)
        #expect(tries.withLock { $0 } <= 2, "\(tries.withLock { $0 }) tries in a cancelled task")
    }
}
