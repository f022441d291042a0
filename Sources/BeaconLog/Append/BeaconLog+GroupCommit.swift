
extension BeaconLog {
    /// How long a failed background write waits before it is tried again.
    static let retryDelay: Duration = .milliseconds(100)

    /// What an append asks of the writer once its record is buffered.
    enum AfterAppend {
        case nothing
        case schedule(Duration)
        case write
        /// Write everything buffered, without fsync (`.none`, when the caller commits now).
        case writeAll
        case commit
    }

    /// The commit the policy makes when its interval ends, asked for now.
    func commitNow(_ s: State) -> AfterAppend {
        switch config.durability {
        case .everyRecord, .batched: .commit
        case .none: s.bufferedBytes >= Self.writeThreshold ? .write : .writeAll
        }
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
            try commit(sync: false, aligned: true)
        case .writeAll:
            try commit(sync: false)
        case .commit:
            try commit(sync: true, through: seq)
        }
    }

    /// The interval half of group commit: a one-shot timer (``TimerThread/shared``) armed by the
    /// first buffered record, whose write and fsync run on the log's ``flushLane``. Nothing runs
    /// while the log is idle.
    func scheduleFlush(after delay: Duration) {
        TimerThread.shared.add(after: delay) { [self] in flushLane.async { [self] in flush() } }
    }

    /// The timer's flush: writes (and, unless `.none`, fsyncs) what is buffered.
    private func flush() {
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

    /// Writes the buffered chunks with one `write(2)` per chunk and, if `sync`, fsyncs the tail
    /// segment. With `through`, returns at once if that seq is already durable (another thread's
    /// commit covered it: that is the group in group commit). `aligned` (the write of a full
    /// buffer under `.none`) writes up to a multiple of ``alignment`` and keeps the rest buffered.
    func commit(sync: Bool, through seq: UInt64? = nil, aligned: Bool = false) throws {
        try writerIO.withLock { io in
            let chunks = try state.withLock { s -> [Chunk] in
                try checkUsable(s)
                if sync, let seq, let durable = s.stats.durableSeq, durable >= seq { return [] }
                // The buffer is no longer full: another thread's write (the 10 ms flush) took it.
                if aligned, s.bufferedBytes < Self.writeThreshold { return [] }
                var taken = s.chunks
                s.chunks = []
                s.bufferedBytes = 0
                s.bufferedRecords = 0
                if aligned, let held = holdBack(&taken, io: io, state: &s) {
                    s.chunks = [held]
                    s.bufferedBytes = held.bytes.count
                    s.bufferedRecords = held.records
                }
                return taken
            }
            try write(chunks, io: &io)
            if sync { try syncTail(io: &io) }
        }
    }

    /// The file offsets a full buffer's write ends at under `.none`: the page cache then takes the
    /// write in whole large folios. Measured on ext4 (Linux 6.18), 48 MiB in 64 KiB writes: 16-20 ms
    /// of CPU at these offsets, 23-30 ms at others (writes of 65,636 or 69,632 bytes); the log's
    /// frames made every write end elsewhere.
    static let alignment: UInt64 = 64 * 1024

    /// Cuts the chunks about to be written so that the write ends at a multiple of ``alignment``
    /// in the open segment: the bytes past it (the rest of one frame, or a few) are copied into a
    /// new chunk, returned to stay buffered; `chunks` keeps the part to write. Nil, and `chunks`
    /// untouched, when that does not apply: another segment involved, no aligned offset inside the
    /// last chunk, or no frame ending before the cut (a frame longer than the alignment).
    ///
    /// A reader sees only whole frames: positions (`written`, the segment's readable size) stop at
    /// the last frame that ends in the file. The file may end inside a frame until the next write,
    /// as during any write; a process killed then leaves a torn tail, which opening cuts.
    func holdBack(_ chunks: inout [Chunk], io: WriterIO, state s: inout State) -> Chunk? {
        guard io.file != nil, let last = chunks.last, chunks.allSatisfy({ $0.segment == io.fileSegment }) else { return nil }
        let total = UInt64(chunks.reduce(0) { $0 + $1.bytes.count })
        let end = (io.fileSize + total) / Self.alignment * Self.alignment
        let lastStart = io.fileSize + total - UInt64(last.bytes.count)
        guard end > lastStart, end < io.fileSize + total else { return nil }
        let cut = Int(end - lastStart)
        let bytes = last.bytes.bytes
        // Frames ending past the cut: their newlines. The rest is short (a frame or so).
        var heldFrames = 0
        for i in cut..<bytes.count where bytes[i] == 0x0A { heldFrames += 1 }
        guard heldFrames < last.records else { return nil }
        var frameEnd = cut
        while frameEnd > 0 && bytes[frameEnd - 1] != 0x0A { frameEnd -= 1 }
        let buffer = frameBuffer(&s)
        let rest = bytes.count - cut
        buffer.tail(reserving: rest).copyMemory(from: bytes.baseAddress! + cut, byteCount: rest)
        buffer.count = rest
        let written = last.records - heldFrames
        let held = Chunk(segment: last.segment, bytes: buffer, firstSeq: last.firstSeq + UInt64(written), lastSeq: last.lastSeq, records: heldFrames)
        last.bytes.count = cut
        chunks[chunks.count - 1].lastSeq = last.firstSeq + UInt64(written) - 1
        chunks[chunks.count - 1].records = written
        chunks[chunks.count - 1].partialBytes = cut - frameEnd
        return held
    }
}
