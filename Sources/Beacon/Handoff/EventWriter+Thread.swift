import BeaconLog
import Foundation
import Glibc

/// The writer thread: it waits for records (gathering as the pacing says), takes everything
/// queued at once and hands it to the log, one group commit per call.
extension EventWriter {
    func run() {
        var batch: [[UInt8]] = []
        batch.reserveCapacity(1024)
        nameCurrentThread(EventWriter.threadName)
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
                        held.state.waitsEnded += 1
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
                        held.state.waitsEnded += 1
                        held.state.writerWait = .running
                        continue
                    }
                    if now >= nextCommit || held.state.mustTakeNow(pacing) { break }
                    held.state.writerWait = .gathering
                    _ = held.wait(untilNanoseconds: nextCommit)
                    held.state.waitsEnded += 1
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

    func write(_ batch: [[UInt8]], hooks: Hooks) {
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

    func append(_ batch: [[UInt8]], hooks: Hooks) {
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

    func countRefused(_ count: Int) {
        lock.withLock { $0.state.refusedTotal += UInt64(count) }
    }
}
