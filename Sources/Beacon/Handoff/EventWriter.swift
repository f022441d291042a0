import BeaconLog
import Foundation
import Glibc

/// The one writer thread between `track` and the log.
///
/// `track` encodes on its own thread and calls ``enqueue(_:)``, which only takes a lock and moves
/// the bytes into a bounded (by bytes) FIFO. The writer thread takes everything queued at once and
/// hands it to `BeaconLog.append(contentsOf:)`: one group commit for all of it. The order of the
/// log is the order of `enqueue` calls, decided under the same lock that queues the bytes.
final class EventWriter: Sendable {
    /// Whether an event was queued, and if not, why it was dropped.
    enum Outcome {
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
    private let lock: ConditionLock<State>

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
        var writerWaiting = false
        var waiters = 0
        var hooks: Hooks
        /// The writer thread, so that `close` called from a hook (on that thread) does not wait
        /// for itself.
        var writerThread: pthread_t?

        /// True when the caller is the writer thread.
        var onWriterThread: Bool {
            guard let writerThread else { return false }
            return pthread_equal(writerThread, pthread_self()) != 0
        }
    }

    init(log: BeaconLog, capacity: Int, backpressure: Beacon.Backpressure, recordsPerAppend: Int = 4096, hooks: Hooks) {
        self.log = log
        self.recordsPerAppend = max(1, recordsPerAppend)
        self.capacity = max(capacity, 1)
        self.backpressure = backpressure
        var state = State(hooks: hooks)
        state.queue.reserveCapacity(1024)
        lock = ConditionLock(state)
        let thread = Thread { [self] in run() }
        thread.name = "beacon.writer"
        thread.start()
    }

    /// Replaces the append hook (the delivery side sets it once).
    func setOnAppended(_ hook: (@Sendable (UInt64) -> Void)?) {
        lock.withLock { $0.state.hooks.onAppended = hook }
    }

    /// Queues one encoded record. Never touches the disk; waits only under `.block` when the queue
    /// is full.
    func enqueue(_ record: [UInt8]) -> Outcome {
        lock.withLock { held -> Outcome in
            if held.state.closing { return .dropped(reason: .closed) }
            if held.state.queuedBytes + record.count > capacity && !held.state.queue.isEmpty {
                switch backpressure {
                case .dropNewest:
                    return .dropped(reason: .backpressure)
                case .block(let timeout):
                    let deadline = monotonicNanoseconds() + UInt64(max(0, timeout.nanoseconds))
                    held.state.waiters += 1
                    var timedOut = false
                    while held.state.queuedBytes + record.count > capacity && !held.state.queue.isEmpty && !held.state.closing {
                        if !held.wait(untilNanoseconds: deadline), monotonicNanoseconds() >= deadline {
                            timedOut = held.state.queuedBytes + record.count > capacity && !held.state.queue.isEmpty
                            break
                        }
                    }
                    held.state.waiters -= 1
                    if held.state.closing { return .dropped(reason: .closed) }
                    if timedOut { return .dropped(reason: .backpressureTimeout) }
                }
            }
            held.state.queue.append(record)
            held.state.queuedBytes += record.count
            held.state.enqueuedTotal += 1
            if held.state.writerWaiting { held.broadcast() }
            return .queued
        }
    }

    /// Records handed to the writer that the log did not refuse: written, being written or queued.
    var accepted: UInt64 {
        lock.withLock { $0.state.enqueuedTotal - $0.state.refusedTotal }
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
            while held.state.writtenTotal < target && !held.state.finished { held.wait() }
            held.state.waiters -= 1
        }
    }

    /// Stops accepting records, writes what is queued and stops the thread. Blocks until done,
    /// except when called on the writer thread itself (from a hook), where it only asks it to stop.
    func close() {
        lock.withLock { held in
            held.state.closing = true
            held.broadcast()
            if held.state.onWriterThread { return }
            held.state.waiters += 1
            while !held.state.finished { held.wait() }
            held.state.waiters -= 1
        }
    }

    private func run() {
        var batch: [[UInt8]] = []
        batch.reserveCapacity(1024)
        lock.withLock { $0.state.writerThread = pthread_self() }
        while true {
            // Takes everything queued, or returns nil once closing with nothing left.
            let hooks = lock.withLock { held -> Hooks? in
                while held.state.queue.isEmpty && !held.state.closing {
                    held.state.writerWaiting = true
                    held.wait()
                    held.state.writerWaiting = false
                }
                if held.state.queue.isEmpty && held.state.closing {
                    held.state.finished = true
                    held.broadcast()
                    return nil
                }
                swap(&batch, &held.state.queue)
                held.state.writing = batch.count
                held.state.queuedBytes = 0
                if held.state.waiters > 0 { held.broadcast() }
                return held.state.hooks
            }
            guard let hooks else { return }

            write(batch, hooks: hooks)
            batch.removeAll(keepingCapacity: true)    // frees the records outside the lock

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
        do {
            try log.append(contentsOf: batch)
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
