import BeaconLog
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
/// keeps it; a task preferring it keeps it too). Its name (at most 15 bytes) is the kernel's too
/// (`top -H`, `/proc/PID/task/TID/comm`).
///
/// ```swift
/// let thread = IOThread(name: "beacon-uploader")
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
        let lock = self.lock, executor = asUnownedTaskExecutor(), name = self.name
        let thread = Thread {
            nameCurrentThread(name)
            IOThread.loop(lock, executor)
        }
        thread.name = name
        thread.start()
    }

    private static func loop(_ lock: ConditionLock<State>, _ executor: UnownedTaskExecutor) {
        let deferred = Deferred()
        pthread_setspecific(currentKey, Unmanaged.passUnretained(deferred).toOpaque())
        defer { pthread_setspecific(currentKey, nil) }
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
            // About to wait for more jobs: nothing kept for then stays behind. Only when none
            // came meanwhile: a job enqueued by the batch (a hop of the pass's task between the
            // uploader and its transport) runs first, so that work kept for the wait for an
            // answer is not done before the request goes out.
            if lock.withLock({ $0.state.jobs.isEmpty }) { runDeferred() }
        }
    }

    /// Whether the calling thread is an ``IOThread``: blocking here holds no thread of Swift's pool.
    static var isCurrent: Bool { pthread_getspecific(currentKey) != nil }

    /// Work the thread does when it would otherwise wait (``runDeferred()``), in order.
    private final class Deferred {
        var work: [() -> Void] = []
    }

    private static var deferred: Deferred? {
        pthread_getspecific(currentKey).map { Unmanaged<Deferred>.fromOpaque($0).takeUnretainedValue() }
    }

    /// Keeps `work` to run on this thread the next time it would wait (``runDeferred()``): the
    /// uploader reads the next batch while the collector answers, with no hand-off to another
    /// thread. False (and `work` not kept) when the calling thread is not an ``IOThread``.
    static func deferUntilWaiting(_ work: @escaping () -> Void) -> Bool {
        guard let deferred else { return false }
        deferred.work.append(work)
        return true
    }

    /// Runs the work kept by ``deferUntilWaiting(_:)`` on this thread: a transport calls it once a
    /// request is written, before it waits for the answer; whoever needs the work's result calls
    /// it before waiting for that. Nothing on another thread.
    static func runDeferred() {
        guard let deferred, !deferred.work.isEmpty else { return }
        let work = deferred.work
        deferred.work.removeAll()
        for item in work { item() }
    }

    private static let currentKey: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()
}
