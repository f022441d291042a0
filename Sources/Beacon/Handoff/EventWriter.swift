import BeaconLog
import Foundation
import Glibc

/// The one writer thread between `track` and the log.
///
/// `track` encodes on its own thread and calls ``enqueue(_:)``, which only takes a lock and moves
/// the bytes into a bounded (by bytes) FIFO. The writer thread takes everything queued at once and
/// hands it to `BeaconLog.append(contentsOf:)`: one group commit for all of it. The order of the
/// log is the order of `enqueue` calls, decided under the same lock that queues the bytes.
///
/// The writer commits as the log's durability policy asks, and no more often: under `.batched`
/// (N records or T) it commits a lone record at once, then gathers for T what comes after, waking
/// earlier only when N records (or half the capacity) are queued, when someone waits (`sync`,
/// `flush`, close, a blocked producer) or to close. `enqueue` wakes it only then, or when it is
/// idle: a steady trickle costs one wakeup per T and no system call in `track` (no futex wake per
/// event). Under `.everyRecord` every record wakes it, as before; `.none` gathers 64 KiB or 10 ms.
///
/// When the FIFO is full, ``enqueue(_:)`` drops (`.dropNewest`) or blocks its caller
/// (`.blockCallingThread`), and ``enqueueWaitingForRoom(_:)`` suspends its task without holding a
/// thread: the writer queues the waiting records itself, first come first served, as it takes
/// batches, and resumes their tasks.
final class EventWriter: Sendable {
    /// Whether an event was queued, and if not, why it was dropped.
    enum Outcome: Sendable {
        case queued
        case dropped(reason: DropReason)

        var isQueued: Bool {
            if case .queued = self { return true }
            return false
        }
    }

    /// What the writer reports after each batch: appended count, failures.
    struct Hooks: Sendable {
        /// Called on the writer thread after each batch the log accepted, with the number of records
        /// the log now holds past its checkpoint.
        var onAppended: (@Sendable (_ pendingInLog: UInt64) -> Void)?
        /// Called on the writer thread when the log refused a batch (count, why it is dropped,
        /// error), or could not write it yet and keeps it in memory (reason nil).
        var onFailure: @Sendable (_ records: Int, _ reason: DropReason?, _ error: any Error) -> Void
    }

    let log: BeaconLog
    let capacity: Int
    let backpressure: Beacon.Backpressure
    /// The most records handed to the log in one call (one group commit each). Bounds the log's
    /// buffer and how much one refusal (a `.rejectNew` quota) can take with it.
    let recordsPerAppend: Int
    /// When the writer takes what is queued (from the log's durability policy).
    let pacing: Pacing
    private let lock: ConditionLock<State>
    /// Commit latency, stalls and the quota (WriterWatch.swift).
    let watch: WriterWatch

    /// When the writer takes the queue: at once, or after gathering for an interval unless a
    /// threshold is reached first.
    struct Pacing: Sendable, Equatable {
        /// Nanoseconds between commits; 0 takes every record at once (`.everyRecord`).
        var intervalNanoseconds: UInt64
        /// Queued records that end the gathering early.
        var records: Int
        /// Queued bytes that end the gathering early.
        var bytes: Int

        /// The log's policy: `.batched(N, T)` gathers N records or T; `.none` 64 KiB or 10 ms (the
        /// log's own write threshold and interval); `.everyRecord` takes every record at once.
        init(_ durability: BeaconLog.Durability, capacity: Int) {
            let half = max(capacity / 2, 1)
            switch durability {
            case .everyRecord:
                self.init(intervalNanoseconds: 0, records: 1, bytes: 1)
            case .batched(let records, let interval):
                self.init(intervalNanoseconds: UInt64(max(0, interval.nanoseconds)), records: max(records, 1), bytes: half)
            case .none:
                self.init(intervalNanoseconds: 10_000_000, records: .max, bytes: min(half, 64 * 1024))
            }
        }

        init(intervalNanoseconds: UInt64, records: Int, bytes: Int) {
            self.intervalNanoseconds = intervalNanoseconds
            self.records = records
            self.bytes = bytes
        }
    }

    /// What the writer thread is doing, for `enqueue` to decide whether to wake it.
    enum WriterWait: Sendable, Equatable {
        /// Taking or writing a batch, or already woken: nobody needs to wake it.
        case running
        /// Waiting for the first record: any record wakes it.
        case idle
        /// Gathering until its next commit: only a reached threshold or a waiter wakes it.
        case gathering
    }

    /// A record whose task waits for room (``enqueueWaitingForRoom(_:)``).
    struct RoomWaiter: Sendable {
        let id: UInt64
        let record: [UInt8]
        let continuation: CheckedContinuation<Outcome, Never>
    }

    /// Everything the `track` threads and the writer thread share, reachable only under `lock`.
    struct State: Sendable {
        var queue: [[UInt8]] = []
        var queuedBytes = 0
        var writing = 0
        /// Records ever queued, and ever handed to the log (appended or refused):
        /// `waitUntilWritten` waits for the count of its call, not for an empty queue, so other
        /// threads' later events cannot keep it waiting.
        var enqueuedTotal: UInt64 = 0
        /// Records the log refused (not kept): they were enqueued but will never be in the log.
        var refusedTotal: UInt64 = 0
        var writtenTotal: UInt64 = 0
        var closing = false
        var finished = false
        var writerWait = WriterWait.running
        /// Times `enqueue` woke the writer (a test seam: a trickle must not wake it per record).
        var wakeups: UInt64 = 0
        /// Batches the writer took from the queue: its group commits (what `beacon-bench --phase
        /// paced` reports beside the thread's context switches, which also count each fsync's
        /// waits for the disk).
        var batchesTaken: UInt64 = 0
        var waiters = 0
        /// Tasks suspended until their record fits, oldest first; the writer queues them.
        var roomWaiters: [RoomWaiter] = []
        var nextRoomWaiterId: UInt64 = 0
        /// A test seam: while true the writer takes nothing from the queue (a stalled disk).
        var frozen = false
        var hooks: Hooks
        /// Run by the writer thread once it has written everything and before it ends
        /// (``EventWriter/closeInBackground(appending:then:)``).
        var finalWork: (@Sendable () -> Void)?
        /// The writer thread, so that `close` called from a hook (on that thread) does not wait
        /// for itself.
        var writerThread: pthread_t?

        /// True when `count` more bytes fit in the queue. A record larger than the whole capacity
        /// fits an empty queue, so that it is never refused for its size alone.
        func fits(_ count: Int, capacity: Int) -> Bool {
            queue.isEmpty || queuedBytes + count <= capacity
        }

        /// Queues one record (the caller holds the lock and has checked `closing`).
        mutating func append(_ record: [UInt8]) {
            queue.append(record)
            queuedBytes += record.count
            enqueuedTotal += 1
        }

        /// True when a record just queued must wake the writer: it is idle, or it gathers and a
        /// threshold is reached. Marks it woken, so that the records after wake it no more.
        mutating func mustWakeWriter(_ pacing: Pacing) -> Bool {
            switch writerWait {
            case .running: return false
            case .idle: break
            case .gathering:
                guard queue.count >= pacing.records || queuedBytes >= pacing.bytes else { return false }
            }
            writerWait = .running
            wakeups += 1
            return true
        }

        /// True when the writer should take the queue now rather than keep gathering: someone
        /// waits (a `sync`, a close, a blocked producer or task) or a threshold is reached.
        func mustTakeNow(_ pacing: Pacing) -> Bool {
            closing || waiters > 0 || !roomWaiters.isEmpty || queue.count >= pacing.records || queuedBytes >= pacing.bytes
        }

        /// True when the caller is the writer thread.
        var onWriterThread: Bool {
            guard let writerThread else { return false }
            return pthread_equal(writerThread, pthread_self()) != 0
        }
    }

    init(log: BeaconLog, capacity: Int, backpressure: Beacon.Backpressure, recordsPerAppend: Int = 4096, watch: WriterWatch = WriterWatch(), hooks: Hooks) {
        self.log = log
        self.watch = watch
        self.recordsPerAppend = max(1, recordsPerAppend)
        self.capacity = max(capacity, 1)
        self.backpressure = backpressure
        self.pacing = Pacing(log.configuration.durability, capacity: self.capacity)
        var state = State(hooks: hooks)
        state.queue.reserveCapacity(1024)
        lock = ConditionLock(state)
        let thread = Thread { [self] in run() }
        thread.name = EventWriter.threadName
        thread.start()
    }

    /// Replaces the append hook (the delivery side sets it once).
    func setOnAppended(_ hook: (@Sendable (UInt64) -> Void)?) {
        lock.withLock { $0.state.hooks.onAppended = hook }
    }

    /// The most records the batch array keeps room for after a small batch (8 bytes each).
    static let keptBatchCapacity = 4096

    /// The writer thread's name, as `/proc/PID/task/TID/comm`, `top -H` and `perf` show it
    /// (at most 15 bytes: the kernel's limit).
    static let threadName = "beacon-writer"

    /// Names the calling thread for the kernel (`/proc/self/task/TID/comm`, `top -H`, `perf`):
    /// Foundation's `Thread.name` does not reach it on Linux. `pthread_setname_np` is a GNU
    /// extension the Glibc module does not import, so it is looked up by name; without it (not
    /// glibc) the thread keeps its name.
    static func nameCurrentThread(_ name: String) {
        typealias SetName = @convention(c) (pthread_t, UnsafePointer<CChar>) -> Int32
        guard let process = dlopen(nil, RTLD_NOW) else { return }
        defer { dlclose(process) }
        guard let symbol = dlsym(process, "pthread_setname_np") else { return }
        let setName = unsafeBitCast(symbol, to: SetName.self)
        _ = setName(pthread_self(), String(name.utf8.prefix(15))!)
    }

    /// Queues one encoded record. Never touches the disk; when the queue is full it drops
    /// (`.dropNewest`) or, only under `.blockCallingThread`, blocks the calling thread.
    func enqueue(_ record: [UInt8]) -> Outcome {
        lock.withLock { held -> Outcome in
            if held.state.closing { return .dropped(reason: .closed) }
            if !held.state.fits(record.count, capacity: capacity) {
                switch backpressure {
                case .dropNewest:
                    return .dropped(reason: .backpressure)
                case .blockCallingThread(let timeout):
                    let deadline = monotonicNanoseconds() + UInt64(max(0, timeout.nanoseconds))
                    held.state.waiters += 1
                    wakeGatheringWriter(held)
                    var timedOut = false
                    while !held.state.fits(record.count, capacity: capacity) && !held.state.closing {
                        if !held.wait(untilNanoseconds: deadline), monotonicNanoseconds() >= deadline {
                            timedOut = !held.state.fits(record.count, capacity: capacity)
                            break
                        }
                    }
                    held.state.waiters -= 1
                    if held.state.closing { return .dropped(reason: .closed) }
                    if timedOut { return .dropped(reason: .backpressureTimeout) }
                }
            }
            held.state.append(record)
            if held.state.mustWakeWriter(pacing) { held.broadcast() }
            return .queued
        }
    }

    /// Queues one encoded record, suspending the calling task (never blocking its thread) while
    /// the queue is full. The writer queues the record as soon as it has room, after the records
    /// that waited longer, and resumes the task.
    ///
    /// Returns `.dropped(.closed)` when the writer closes first, and `.dropped(.backpressure)`
    /// when the task is cancelled while it waits.
    func enqueueWaitingForRoom(_ record: [UInt8]) async -> Outcome {
        let immediate = lock.withLock { held -> (outcome: Outcome?, id: UInt64) in
            if held.state.closing { return (.dropped(reason: .closed), 0) }
            if held.state.roomWaiters.isEmpty && held.state.fits(record.count, capacity: capacity) {
                held.state.append(record)
                if held.state.mustWakeWriter(pacing) { held.broadcast() }
                return (.queued, 0)
            }
            held.state.nextRoomWaiterId += 1
            return (nil, held.state.nextRoomWaiterId)
        }
        if let outcome = immediate.outcome { return outcome }
        let id = immediate.id
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Outcome, Never>) in
                let now = lock.withLock { held -> Outcome? in
                    // Cancelled before the handler below could find the waiter: it never will.
                    if Task.isCancelled { return .dropped(reason: .backpressure) }
                    if held.state.closing { return .dropped(reason: .closed) }
                    if held.state.roomWaiters.isEmpty && held.state.fits(record.count, capacity: capacity) {
                        held.state.append(record)
                        if held.state.mustWakeWriter(pacing) { held.broadcast() }
                        return .queued
                    }
                    held.state.roomWaiters.append(RoomWaiter(id: id, record: record, continuation: continuation))
                    wakeGatheringWriter(held)
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            let cancelled = lock.withLock { held -> RoomWaiter? in
                guard let index = held.state.roomWaiters.firstIndex(where: { $0.id == id }) else { return nil }
                return held.state.roomWaiters.remove(at: index)
            }
            cancelled?.continuation.resume(returning: .dropped(reason: .backpressure))
        }
    }

    /// A test seam: a frozen writer takes nothing from the queue, like one stuck in a stalled
    /// disk's `write` or `fsync`. Closing unfreezes it.
    func setFrozen(_ frozen: Bool) {
        let changed = lock.withLock { held -> Bool in
            defer { held.state.frozen = frozen }
            held.broadcast()
            return held.state.frozen != frozen
        }
        // To the watch, a frozen writer is one whose commit does not complete.
        if changed { frozen ? watch.commitBegan() : watch.commitEnded() }
    }

    /// Times `enqueue` woke the writer thread since it started (a test seam).
    var wakeups: UInt64 {
        lock.withLock { $0.state.wakeups }
    }

    /// Batches the writer thread has taken from the queue, one group commit each (a measurement
    /// seam).
    var batchesTaken: UInt64 {
        lock.withLock { $0.state.batchesTaken }
    }

    /// What the writer thread is doing (a test seam).
    var writerWait: WriterWait {
        lock.withLock { $0.state.writerWait }
    }

    /// Wakes the writer if it is gathering: a waiter (`sync`, close, a blocked producer or task)
    /// wants the queue written now, not at the end of the interval.
    private func wakeGatheringWriter(_ held: ConditionLock<State>.Held) {
        guard held.state.writerWait == .gathering, !held.state.queue.isEmpty else { return }
        held.state.writerWait = .running
        held.broadcast()
    }

    /// Records handed to the writer that the log did not refuse: written, being written or queued.
    var accepted: UInt64 {
        lock.withLock { $0.state.enqueuedTotal - $0.state.refusedTotal }
    }

    /// Tasks suspended in ``enqueueWaitingForRoom(_:)``.
    var roomWaiterCount: Int {
        lock.withLock { $0.state.roomWaiters.count }
    }

    /// True on the writer thread itself (a hook, or a tracker released there).
    var isWriterThread: Bool {
        lock.withLock { $0.state.onWriterThread }
    }

    /// Blocks until everything queued before this call has been handed to the log.
    /// On the writer thread itself (a hook calling `sync()`) it returns at once: what the hook
    /// was called for is already written.
    func waitUntilWritten() {
        lock.withLock { held in
            if held.state.onWriterThread { return }
            let target = held.state.enqueuedTotal
            held.state.waiters += 1
            wakeGatheringWriter(held)
            while held.state.writtenTotal < target && !held.state.finished { held.wait() }
            held.state.waiters -= 1
        }
    }

    /// Stops accepting records, writes what is queued and stops the thread. Blocks until done,
    /// except when called on the writer thread itself (from a hook), where it only asks it to stop.
    func close() {
        defer { watch.close() }
        let abandoned = lock.withLock { held -> [RoomWaiter] in
            held.state.closing = true
            held.broadcast()
            let abandoned = held.state.roomWaiters
            held.state.roomWaiters = []
            if held.state.onWriterThread { return abandoned }
            held.state.waiters += 1
            while !held.state.finished { held.wait() }
            held.state.waiters -= 1
            return abandoned
        }
        for waiter in abandoned { waiter.continuation.resume(returning: .dropped(reason: .closed)) }
    }

    /// Stops accepting records and returns at once, without waiting: the writer thread writes
    /// what is queued (then `last`, if given), then runs `final` and ends. For a tracker released
    /// without being closed, whose `deinit` must not wait for the disk on the releasing thread.
    func closeInBackground(appending last: [UInt8]?, then final: @escaping @Sendable () -> Void) {
        let (abandoned, ended) = lock.withLock { held -> ([RoomWaiter], Bool) in
            if held.state.finished { return ([], true) }
            if let last, !held.state.closing { held.state.append(last) }
            held.state.closing = true
            held.state.finalWork = final
            held.broadcast()
            let abandoned = held.state.roomWaiters
            held.state.roomWaiters = []
            return (abandoned, false)
        }
        for waiter in abandoned { waiter.continuation.resume(returning: .dropped(reason: .closed)) }
        // The thread ended already (closed before): the final work goes to the pool instead.
        if ended { BlockingPool.shared.submit(final) }
    }

    private func run() {
        var batch: [[UInt8]] = []
        batch.reserveCapacity(1024)
        EventWriter.nameCurrentThread(EventWriter.threadName)
        let initialHooks = lock.withLock { held -> Hooks in
            held.state.writerThread = pthread_self()
            return held.state.hooks
        }
        // Events earlier runs left pending: the hook hears of them as if just appended (the
        // tracker's delivery starts on them without a task started by its init).
        if let onAppended = initialHooks.onAppended {
            let pending = log.stats.pendingRecords
            if pending > 0 { onAppended(pending) }
        }
        var admitted: [RoomWaiter] = []
        // When the next commit is due (CLOCK_MONOTONIC nanoseconds): one interval after the last.
        var nextCommit: UInt64 = 0
        while true {
            // Takes everything queued, or returns nil once closing with nothing left.
            let hooks = lock.withLock { held -> Hooks? in
                // After a commit the writer gathers until the next one is due; with nothing
                // queued by then it waits, idle, for the first record, which it takes at once.
                while !held.state.closing {
                    if held.state.frozen {
                        held.state.writerWait = .running
                        held.wait()
                        continue
                    }
                    let now = monotonicNanoseconds()
                    if held.state.queue.isEmpty {
                        if now >= nextCommit {
                            held.state.writerWait = .idle
                            held.wait()
                        } else {
                            held.state.writerWait = .gathering
                            _ = held.wait(untilNanoseconds: nextCommit)
                        }
                        held.state.writerWait = .running
                        continue
                    }
                    if now >= nextCommit || held.state.mustTakeNow(pacing) { break }
                    held.state.writerWait = .gathering
                    _ = held.wait(untilNanoseconds: nextCommit)
                    held.state.writerWait = .running
                }
                if held.state.queue.isEmpty && held.state.closing {
                    held.state.finished = true
                    held.broadcast()
                    return nil
                }
                swap(&batch, &held.state.queue)
                held.state.batchesTaken += 1
                held.state.writing = batch.count
                held.state.queuedBytes = 0
                // The tasks waiting for room go first into the emptied queue, oldest first.
                var fitting = 0
                while fitting < held.state.roomWaiters.count, !held.state.closing,
                      held.state.fits(held.state.roomWaiters[fitting].record.count, capacity: capacity) {
                    held.state.append(held.state.roomWaiters[fitting].record)
                    fitting += 1
                }
                if fitting > 0 {
                    admitted.append(contentsOf: held.state.roomWaiters[..<fitting])
                    held.state.roomWaiters.removeFirst(fitting)
                }
                if held.state.waiters > 0 { held.broadcast() }
                return held.state.hooks
            }
            guard let hooks else {
                let final = lock.withLock { held -> (@Sendable () -> Void)? in
                    defer { held.state.finalWork = nil }
                    return held.state.finalWork
                }
                if let final {
                    watch.close()
                    final()
                }
                return
            }
            for waiter in admitted { waiter.continuation.resume(returning: .queued) }
            admitted.removeAll(keepingCapacity: true)

            write(batch, hooks: hooks)
            nextCommit = monotonicNanoseconds() + pacing.intervalNanoseconds
            // Frees the records outside the lock. An array grown by a burst is kept while bursts
            // last and freed after the first small batch (it swaps with the queue, so both would
            // otherwise hold it for good).
            if batch.capacity > Self.keptBatchCapacity && batch.count <= Self.keptBatchCapacity / 4 {
                batch = []
                batch.reserveCapacity(1024)
            } else {
                batch.removeAll(keepingCapacity: true)
            }

            lock.withLock { held in
                held.state.writtenTotal += UInt64(held.state.writing)
                held.state.writing = 0
                if held.state.waiters > 0 { held.broadcast() }
            }
        }
    }

    private func write(_ batch: [[UInt8]], hooks: Hooks) {
        if batch.count <= recordsPerAppend {
            append(batch, hooks: hooks)
            return
        }
        var start = 0
        while start < batch.count {
            let end = min(start + recordsPerAppend, batch.count)
            append(Array(batch[start..<end]), hooks: hooks)
            start = end
        }
    }

    private func append(_ batch: [[UInt8]], hooks: Hooks) {
        watch.commitBegan()
        defer { watch.commitEnded() }
        do {
            try log.appendCommittingNow(contentsOf: batch)
            if let onAppended = hooks.onAppended { onAppended(log.stats.pendingRecords) }
        } catch let error as BeaconLogError {
            if error.keptSeqs != nil {
                hooks.onFailure(batch.count, nil, error)
                if let onAppended = hooks.onAppended { onAppended(log.stats.pendingRecords) }
                return
            }
            let reason: DropReason
            switch error.code {
            case .quotaExceeded: reason = .quotaExceeded
            case .diskFull: reason = .diskFull
            case .failed, .closed: reason = .logFailed
            default: reason = .logError
            }
            countRefused(batch.count)
            hooks.onFailure(batch.count, reason, error)
        } catch {
            countRefused(batch.count)
            hooks.onFailure(batch.count, .logError, error)
        }
    }

    private func countRefused(_ count: Int) {
        lock.withLock { $0.state.refusedTotal += UInt64(count) }
    }
}
