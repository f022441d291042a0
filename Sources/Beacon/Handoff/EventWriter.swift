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
    let lock: ConditionLock<State>
    /// Commit latency, stalls and the quota (WriterWatch.swift).
    let watch: WriterWatch

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

    /// Times the writer thread came back from waiting for work (a measurement seam): see
    /// `State.waitsEnded`.
    var waitsEnded: UInt64 {
        lock.withLock { $0.state.waitsEnded }
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
}
