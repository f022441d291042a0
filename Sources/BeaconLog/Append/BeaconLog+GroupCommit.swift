import Dispatch

extension BeaconLog {
    /// How long a failed background write waits before it is tried again.
    static let retryDelay: Duration = .milliseconds(100)

    /// What an append asks of the writer once its record is buffered.
    enum AfterAppend {
        case nothing
        case schedule(Duration)
        case write
        case commit
    }

    func afterAppend(_ s: inout State) -> AfterAppend {
        switch config.durability {
        case .everyRecord:
            return .commit
        case .batched(let records, let interval):
            if s.bufferedRecords >= records { return .commit }
            return scheduleIfNeeded(&s, interval)
        case .none:
            if s.bufferedBytes >= Self.writeThreshold { return .write }
            return scheduleIfNeeded(&s, .milliseconds(10))
        }
    }

    func scheduleIfNeeded(_ s: inout State, _ delay: Duration) -> AfterAppend {
        if s.flushScheduled { return .nothing }
        s.flushScheduled = true
        return .schedule(delay)
    }

    func perform(_ action: AfterAppend, through seq: UInt64?) throws {
        switch action {
        case .nothing:
            return
        case .schedule(let delay):
            scheduleFlush(after: delay)
        case .write:
            try commit(sync: false)
        case .commit:
            try commit(sync: true, through: seq)
        }
    }

    /// The interval half of group commit: a one-shot timer on a serial queue, armed by the first
    /// buffered record. Nothing runs while the log is idle.
    func scheduleFlush(after delay: Duration) {
        let nanos = delay.nanoseconds
        flushQueue.asyncAfter(deadline: .now() + .nanoseconds(Int(nanos))) { [self] in
            let closed = state.withLock { s -> Bool in
                s.flushScheduled = false
                return s.closed || s.failure != nil
            }
            if closed { return }
            do {
                try commit(sync: config.durability != .none)
            } catch {
                // Disk full and the like: the bytes stay buffered; try again shortly.
                let retry = state.withLock { s -> Bool in
                    if s.bufferedBytes == 0 || s.closed || s.failure != nil || s.flushScheduled { return false }
                    s.flushScheduled = true
                    return true
                }
                if retry { scheduleFlush(after: Self.retryDelay) }
            }
        }
    }

    /// Writes the buffered chunks with one `write(2)` per chunk and, if `sync`, fsyncs the tail
    /// segment. With `through`, returns at once if that seq is already durable (another thread's
    /// commit covered it: that is the group in group commit).
    func commit(sync: Bool, through seq: UInt64? = nil) throws {
        try writerIO.withLock { io in
            let chunks = try state.withLock { s -> [Chunk] in
                try checkUsable(s)
                if sync, let seq, let durable = s.stats.durableSeq, durable >= seq { return [] }
                let taken = s.chunks
                s.chunks = []
                s.bufferedBytes = 0
                s.bufferedRecords = 0
                return taken
            }
            try write(chunks, io: &io)
            if sync { try syncTail(io: &io) }
        }
    }
}
