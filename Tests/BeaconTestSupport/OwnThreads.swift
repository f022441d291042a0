import Foundation
import Testing

/// A task executor of four threads of its own, never Swift's cooperative pool: for test code that
/// blocks (waiting for a child process, a server to start, fsync loops).
///
/// Swift Testing runs a synchronous test function on the cooperative pool, which has one thread
/// per core: two such tests waiting for `beacon` children on a 2-core machine stall every other
/// test in the process, and the timing tests beside them (a shutdown's deadline, a backoff) fail
/// for a stall that is not theirs. Four threads keep about as many blocking tests running at once
/// as before (a thread per test would start every one of them at once).
public final class OwnThreadsExecutor: TaskExecutor, @unchecked Sendable {
    public static let shared = OwnThreadsExecutor(threads: 4)

    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []

    init(threads: Int) {
        for _ in 0..<threads {
            Thread { [unowned self] in self.loop() }.start()
        }
    }

    /// The key of the mark each of its threads carries in its thread dictionary.
    static let markKey = "beacon-test-blocking"

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    private func loop() {
        Thread.current.threadDictionary[Self.markKey] = true
        let executor = asUnownedTaskExecutor()
        while true {
            condition.lock()
            while jobs.isEmpty { condition.wait() }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: executor)
        }
    }
}

/// Runs each test of a suite (or a test) with ``OwnThreadsExecutor`` as its task executor, so that
/// its blocking waits hold a thread of its own, never one of the cooperative pool's.
public struct OwnThreadsTrait: SuiteTrait, TestTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        // The suite's trait is also asked for the suite itself (testCase nil): only test cases run code.
        guard testCase != nil else { return try await function() }
        try await withTaskExecutorPreference(OwnThreadsExecutor.shared) { try await function() }
    }
}

extension Trait where Self == OwnThreadsTrait {
    /// The tests block (child processes, servers starting): they run on threads of their own.
    public static var ownThreads: Self { OwnThreadsTrait() }
}

/// Whether the caller runs on one of ``OwnThreadsExecutor``'s threads.
public var isOnOwnThread: Bool { Thread.current.threadDictionary[OwnThreadsExecutor.markKey] != nil }
