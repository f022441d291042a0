import BeaconLog
import Glibc

/// What the writer decides with, and what it shares with the `track` threads under its lock: its
/// pacing (from the log's durability policy), what its thread is doing, and the queue.
extension EventWriter {
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
        /// Times the writer thread came back from waiting on its condition: for the first record,
        /// at the end of a gathering interval, or woken by `enqueue`, a closing or a thaw. With
        /// ``batchesTaken``, what `beacon-bench --phase paced` tells apart from the waits inside
        /// `write` and `fsync` (the disk's, a few per commit), which the thread's voluntary context
        /// switches count as well.
        var waitsEnded: UInt64 = 0
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
}
