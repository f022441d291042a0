import Foundation
import Synchronization

/// A task executor that runs each job on an idle thread of its own, starting a new thread when
/// none is idle: blocking jobs never wait for each other or for the concurrency pool.
///
/// For tests only (``BlockingTrait``): the threads are never stopped, and there are as many as
/// jobs ever ran at once (the blocking tests running in parallel, a few dozen). They are named
/// ``threadName`` (Linux gives a new thread its creator's name otherwise).
public final class BlockingTestExecutor: TaskExecutor {
    /// The one instance the tests share, so that its idle threads are reused across suites.
    public static let shared = BlockingTestExecutor()

    /// The name of the executor's threads (at most 15 bytes, Linux's limit).
    public static let threadName = "beacon-blocking"

    /// The name of the calling thread, as the kernel has it (`/proc/thread-self/comm`).
    public static func currentThreadName() -> String {
        let name = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? ""
        return name.hasSuffix("\n") ? String(name.dropLast()) : name
    }

    private struct State {
        var jobs: [UnownedJob] = []
        var idle = 0
    }
    private let state = Mutex(State())
    private let wake = DispatchSemaphore(value: 0)

    private init() {}

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let startThread = state.withLock { s -> Bool in
            s.jobs.append(job)
            guard s.idle > 0 else { return true }
            s.idle -= 1
            return false
        }
        if startThread {
            Thread { [self] in work() }.start()
        } else {
            wake.signal()
        }
    }

    /// Runs jobs while there are any, then waits idle for the next one; for ever.
    private func work() {
        // pthread_setname_np, which Swift's Glibc module does not import, writes this file too.
        try? Self.threadName.write(toFile: "/proc/thread-self/comm", atomically: false, encoding: .utf8)
        let executor = asUnownedTaskExecutor()
        while true {
            let next = state.withLock { s -> UnownedJob? in
                guard !s.jobs.isEmpty else {
                    s.idle += 1
                    return nil
                }
                return s.jobs.removeFirst()
            }
            if let next {
                next.runSynchronously(on: executor)
            } else {
                wake.wait()
            }
        }
    }
}
