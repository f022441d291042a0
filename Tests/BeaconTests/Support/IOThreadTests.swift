import Synchronization
import Testing
@testable import Beacon

/// ``IOThread``: the pass's thread runs work kept for a wait (``IOThread/deferUntilWaiting(_:)``)
/// only when it would wait, never before a job that is ready.
@Suite("IOThread: work kept for a wait", .timeLimit(.minutes(1)))
struct IOThreadTests {
    /// The uploader keeps the next batch's read for the wait for an answer, then hops from its
    /// actor to the transport: that hop is a job enqueued on the same thread. The read must not
    /// run between the two (before the request goes out), only while the answer is awaited.
    @Test("a job that became ready runs before the work kept for the wait")
    func readyJobFirst() async {
        let thread = IOThread(name: "beacon.test.io")
        let order = Mutex<[String]>([])
        await Task(executorPreference: thread) {
            #expect(IOThread.isCurrent)
            #expect(IOThread.deferUntilWaiting { order.withLock { $0.append("deferred") } })
            // Suspends and enqueues this task's next job on the same thread at once.
            await Task.yield()
            order.withLock { $0.append("resumed") }
            IOThread.runDeferred()
        }.value
        #expect(order.withLock { $0 } == ["resumed", "deferred"])
    }

    @Test("work kept for the wait runs when the thread has no job left")
    func deferredRunsWhenIdle() async {
        let thread = IOThread(name: "beacon.test.io")
        await Task(executorPreference: thread) {
            // Resumed only by the kept work: this task waits until the thread runs it.
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                #expect(IOThread.deferUntilWaiting { continuation.resume() })
            }
        }.value
    }

    @Test("off an IOThread nothing is kept")
    func notOnIOThread() {
        #expect(!IOThread.isCurrent)
        #expect(!IOThread.deferUntilWaiting {})
    }
}
