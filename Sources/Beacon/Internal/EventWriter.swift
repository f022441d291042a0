import BeaconLog
import Foundation
import Glibc

/// The one writer thread between `track` and the log.
///
/// `track` encodes on its own thread and calls ``enqueue(_:)``, which only takes a lock and moves
/// the bytes into a bounded (by bytes) FIFO. The writer thread takes everything queued at once and
/// hands it to `BeaconLog.append(contentsOf:)`: one group commit for all of it. The order of the
/// log is the order of `enqueue` calls, decided under the same lock that queues the bytes.
final class EventWriter: @unchecked Sendable {
    /// Whether an event was queued, and if not, why it was dropped.
    enum Outcome {
        case queued
        case dropped(reason: String)

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
        /// Called on the writer thread when the log refused a batch (count, reason, error).
        var onFailure: @Sendable (_ records: Int, _ reason: String, _ error: any Error, _ kept: Bool) -> Void
    }

    let log: BeaconLog
    let capacity: Int
    let backpressure: Beacon.Backpressure
    /// The most records handed to the log in one call (one group commit each). Bounds the log's
    /// buffer and how much one refusal (a `.rejectNew` quota) can take with it.
    let recordsPerAppend: Int
    private let lock = ConditionLock()
    // Guarded by `lock`.
    private var queue: [[UInt8]] = []
    private var queuedBytes = 0
    private var writing = 0
    /// Records ever queued, and ever handed to the log (appended or refused): `waitUntilWritten`
    /// waits for the count of its call, not for an empty queue, so other threads' later events
    /// cannot keep it waiting.
    private var enqueuedTotal: UInt64 = 0
    /// Records the log refused (not kept): they were enqueued but will never be in the log.
    private var refusedTotal: UInt64 = 0
    private var writtenTotal: UInt64 = 0
    private var closing = false
    private var finished = false
    private var writerWaiting = false
    private var waiters = 0
    private var hooks: Hooks
    /// The writer thread, so that `close` called from a hook (on that thread) does not wait for itself.
    private var writerThread: pthread_t?

    init(log: BeaconLog, capacity: Int, backpressure: Beacon.Backpressure, recordsPerAppend: Int = 4096, hooks: Hooks) {
        self.log = log
        self.recordsPerAppend = max(1, recordsPerAppend)
        self.capacity = max(capacity, 1)
        self.backpressure = backpressure
        self.hooks = hooks
        queue.reserveCapacity(1024)
        let thread = Thread { [self] in run() }
        thread.name = "beacon.writer"
        thread.start()
    }

    /// Replaces the append hook (the delivery side sets it once).
    func setOnAppended(_ hook: (@Sendable (UInt64) -> Void)?) {
        lock.lock()
        hooks.onAppended = hook
        lock.unlock()
    }

    /// Queues one encoded record. Never touches the disk; waits only under `.block` when the queue
    /// is full.
    func enqueue(_ record: [UInt8]) -> Outcome {
        lock.lock()
        if closing {
            lock.unlock()
            return .dropped(reason: "closed")
        }
        if queuedBytes + record.count > capacity && !queue.isEmpty {
            switch backpressure {
            case .dropNewest:
                lock.unlock()
                return .dropped(reason: "backpressure")
            case .block(let timeout):
                let (seconds, attoseconds) = timeout.components
                // Clamped to about a century so the sum cannot overflow.
                let wait = UInt64(min(max(0, seconds), 3_000_000_000)) * 1_000_000_000 + UInt64(max(0, attoseconds) / 1_000_000_000)
                let deadline = ConditionLock.monotonicNanoseconds() + wait
                waiters += 1
                var timedOut = false
                while queuedBytes + record.count > capacity && !queue.isEmpty && !closing {
                    if !lock.wait(untilNanoseconds: deadline), ConditionLock.monotonicNanoseconds() >= deadline {
                        timedOut = queuedBytes + record.count > capacity && !queue.isEmpty
                        break
                    }
                }
                waiters -= 1
                if closing {
                    lock.unlock()
                    return .dropped(reason: "closed")
                }
                if timedOut {
                    lock.unlock()
                    return .dropped(reason: "backpressureTimeout")
                }
            }
        }
        queue.append(record)
        queuedBytes += record.count
        enqueuedTotal += 1
        if writerWaiting { lock.broadcast() }
        lock.unlock()
        return .queued
    }

    /// Records handed to the writer that the log did not refuse: written, being written or queued.
    var accepted: UInt64 {
        lock.lock()
        defer { lock.unlock() }
        return enqueuedTotal - refusedTotal
    }

    /// True on the writer thread itself (a hook, or a tracker released there).
    var isWriterThread: Bool {
        lock.lock()
        defer { lock.unlock() }
        guard let writerThread else { return false }
        return pthread_equal(writerThread, pthread_self()) != 0
    }

    /// Blocks until everything queued before this call has been handed to the log.
    /// On the writer thread itself (a hook calling `sync()`) it returns at once: what the hook
    /// was called for is already written.
    func waitUntilWritten() {
        lock.lock()
        if let writerThread, pthread_equal(writerThread, pthread_self()) != 0 {
            lock.unlock()
            return
        }
        let target = enqueuedTotal
        waiters += 1
        while writtenTotal < target && !finished { lock.wait() }
        waiters -= 1
        lock.unlock()
    }

    /// Stops accepting records, writes what is queued and stops the thread. Blocks until done,
    /// except when called on the writer thread itself (from a hook), where it only asks it to stop.
    func close() {
        lock.lock()
        closing = true
        lock.broadcast()
        if let writerThread, pthread_equal(writerThread, pthread_self()) != 0 {
            lock.unlock()
            return
        }
        waiters += 1
        while !finished { lock.wait() }
        waiters -= 1
        lock.unlock()
    }

    private func run() {
        var batch: [[UInt8]] = []
        batch.reserveCapacity(1024)
        lock.lock()
        writerThread = pthread_self()
        lock.unlock()
        while true {
            lock.lock()
            while queue.isEmpty && !closing {
                writerWaiting = true
                lock.wait()
                writerWaiting = false
            }
            if queue.isEmpty && closing {
                finished = true
                lock.broadcast()
                lock.unlock()
                return
            }
            swap(&batch, &queue)
            writing = batch.count
            queuedBytes = 0
            if waiters > 0 { lock.broadcast() }
            let hooks = self.hooks
            lock.unlock()

            write(batch, hooks: hooks)
            batch.removeAll(keepingCapacity: true)    // frees the records outside the lock

            lock.lock()
            writtenTotal += UInt64(writing)
            writing = 0
            if waiters > 0 { lock.broadcast() }
            lock.unlock()
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
        do {
            try log.append(contentsOf: batch)
            if let onAppended = hooks.onAppended { onAppended(log.stats.pendingRecords) }
        } catch let error as BeaconLogError {
            if error.keptSeqs != nil {
                hooks.onFailure(batch.count, "kept", error, true)
                if let onAppended = hooks.onAppended { onAppended(log.stats.pendingRecords) }
                return
            }
            let reason: String
            switch error.code {
            case .quotaExceeded: reason = "quota"
            case .diskFull: reason = "diskFull"
            case .failed, .closed: reason = "logFailed"
            case .recordTooLarge: reason = "tooLarge"
            default: reason = "logError"
            }
            countRefused(batch.count)
            hooks.onFailure(batch.count, reason, error, false)
        } catch {
            countRefused(batch.count)
            hooks.onFailure(batch.count, "logError", error, false)
        }
    }

    private func countRefused(_ count: Int) {
        lock.lock()
        refusedTotal += UInt64(count)
        lock.unlock()
    }
}
