import Foundation
import Glibc

/// A thread of Beacon's own that runs a task's code as its task executor (SE-0417): the uploader
/// runs each pass on one, so that the whole send loop (the uploader's own code, reading the log,
/// the transport's blocking socket calls) stays on one thread, with no hand-off to another thread
/// per request.
///
/// Blocking is allowed on it (``isCurrent``): it belongs to Beacon, not to Swift's cooperative
/// pool, and only the pass's task runs there. ``SocketTransport`` then exchanges a request on it
/// directly, and the uploader reads the log on it directly.
///
/// The thread starts with the first job and ends when the executor is released (the uploader
/// keeps it; a task preferring it keeps it too).
///
/// ```swift
/// let thread = IOThread(name: "beacon.uploader")
/// let value = await Task(executorPreference: thread) { await work() }.value
/// ```
final class IOThread: TaskExecutor, @unchecked Sendable {
    private struct State: Sendable {
        var jobs: [UnownedJob] = []
        var started = false
        var stopped = false
    }

    private let name: String
    private let lock = ConditionLock(State())

    init(name: String) {
        self.name = name
    }

    deinit {
        lock.withLock { held in
            held.state.stopped = true
            held.broadcast()
        }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let start = lock.withLock { held -> Bool in
            held.state.jobs.append(job)
            if held.state.jobs.count == 1 { held.broadcast() }
            defer { held.state.started = true }
            return !held.state.started
        }
        guard start else { return }
        // The thread keeps the lock and an unowned handle on this executor: a job runs only while
        // a task that prefers this executor (and so keeps it) exists.
        let lock = self.lock, executor = asUnownedTaskExecutor()
        let thread = Thread { IOThread.loop(lock, executor) }
        thread.name = name
        thread.start()
    }

    private static func loop(_ lock: ConditionLock<State>, _ executor: UnownedTaskExecutor) {
        pthread_setspecific(currentKey, UnsafeRawPointer(bitPattern: 1))
        var batch: [UnownedJob] = []
        while true {
            let stop = lock.withLock { held -> Bool in
                while held.state.jobs.isEmpty && !held.state.stopped { held.wait() }
                swap(&batch, &held.state.jobs)
                return held.state.stopped && batch.isEmpty
            }
            if stop { return }
            for job in batch { job.runSynchronously(on: executor) }
            batch.removeAll(keepingCapacity: true)
        }
    }

    /// Whether the calling thread is an ``IOThread``: blocking here holds no thread of Swift's pool.
    static var isCurrent: Bool { pthread_getspecific(currentKey) != nil }

    private static let currentKey: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()
}
