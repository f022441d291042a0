import Dispatch
import Glibc

extension BeaconLog {
    /// Bytes buffered under `.none` before they are written.
    static let writeThreshold = 64 * 1024
    /// How long a failed background write waits before it is tried again.
    static let retryDelay: Duration = .milliseconds(100)

    /// What an append asks of the writer once its record is buffered.
    enum AfterAppend {
        case nothing
        case schedule(Duration)
        case write
        case commit
    }

    /// Appends one record, the UTF-8 bytes of one JSON value, and returns its sequence number.
    ///
    /// The record must not be empty, must not contain a raw newline and must not be larger than
    /// `maxRecordBytes`. It is durable when this returns under `.everyRecord`, and at the next group
    /// commit otherwise (see ``sync()``). The frame is copied into a user-space buffer; one
    /// `write(2)` per group commit puts the buffer in the segment.
    ///
    /// A `.diskFull` or `.io` error with ``BeaconLogError/keptSeqs`` set means the record was
    /// appended but its write failed: it is kept in memory and written when the disk accepts it
    /// (do not append it again). Without `keptSeqs` the record was not appended.
    @discardableResult
    public func append(_ record: some Collection<UInt8>) throws -> UInt64 {
        if let result = try record.withContiguousStorageIfAvailable({ try appendOne(UnsafeRawBufferPointer($0)) }) {
            return result
        }
        let copy = Array(record)
        return try copy.withUnsafeBytes { try appendOne($0) }
    }

    /// Appends one record given as bytes (the common case, without generic dispatch).
    @discardableResult
    public func append(_ record: [UInt8]) throws -> UInt64 {
        try record.withUnsafeBytes { try appendOne($0) }
    }

    /// Appends one record given as a JSON string.
    @discardableResult
    public func append(_ record: String) throws -> UInt64 {
        var record = record
        return try record.withUTF8 { try appendOne(UnsafeRawBufferPointer($0)) }
    }

    /// Appends several records in order with at most one group commit; returns their sequence numbers.
    ///
    /// Either every record is accepted or none is (an invalid record is reported before any is written).
    @discardableResult
    public func append(contentsOf records: [[UInt8]]) throws -> Range<UInt64> {
        var crcs: [UInt32] = []
        crcs.reserveCapacity(records.count)
        for (index, record) in records.enumerated() {
            try record.withUnsafeBytes { raw in
                try validate(raw, index: records.count > 1 ? index : nil)
                crcs.append(CRC32C.checksum(raw))
            }
        }
        let (range, action) = try state.withLock { s -> (Range<UInt64>, AfterAppend) in
            try checkWritable(&s, incoming: records.reduce(0) { $0 + $1.count + Frame.maxOverhead })
            let first = s.nextSeq
            for (index, record) in records.enumerated() {
                record.withUnsafeBytes { _ = buffer(&s, record: $0, crc: crcs[index]) }
            }
            return (first..<s.nextSeq, afterAppend(&s))
        }
        do {
            try perform(action, through: range.isEmpty ? nil : range.upperBound - 1)
        } catch {
            throw keptInMemory(error, seqs: range)
        }
        return range
    }

    /// Writes and fsyncs everything appended so far. Returns when it is durable.
    public func sync() throws {
        guard canWrite else {
            throw BeaconLogError(.invalidArgument, "this log was opened without write access; only the writer can sync", path: directory)
        }
        try state.withLock { try checkUsable($0) }
        try commit(sync: true)
    }

    func appendOne(_ record: UnsafeRawBufferPointer) throws -> UInt64 {
        try validate(record, index: nil)
        let crc = CRC32C.checksum(record)
        let (seq, action) = try state.withLock { s -> (UInt64, AfterAppend) in
            try checkWritable(&s, incoming: record.count + Frame.maxOverhead)
            let seq = buffer(&s, record: record, crc: crc)
            return (seq, afterAppend(&s))
        }
        do {
            try perform(action, through: seq)
        } catch {
            throw keptInMemory(error, seqs: seq..<(seq + 1))
        }
        return seq
    }

    /// An append whose record was accepted but whose write or commit failed (disk full, I/O error):
    /// the record stays in memory, is written when the disk accepts it, and must not be appended
    /// again. Says so in the error, which keeps its code.
    func keptInMemory(_ error: any Error, seqs: Range<UInt64>) -> any Error {
        // A write error that did not fail the log went through `putBack`: the frames are kept and
        // retried (maybe already written by the background flush since). Decided from the error, not
        // from `writeError`, which a concurrent successful write may already have cleared.
        guard let error = error as? BeaconLogError, error.code == .diskFull || error.code == .io,
              state.withLock({ $0.failure == nil }) else { return error }
        var kept = error
        kept.keptSeqs = seqs
        kept.cause = kept.cause ?? error.message
        kept.message = "\(error.message). The record (seq \(seqs.count == 1 ? "\(seqs.lowerBound)" : "\(seqs)")) was appended and is kept in memory until the disk accepts it: do not append it again; sync() reports when it is durable"
        return kept
    }

    /// Refuses empty records, raw newlines and oversized records, counting each refusal.
    func validate(_ record: UnsafeRawBufferPointer, index: Int?) throws {
        let which = index.map { "record \($0)" } ?? "the record"
        if record.isEmpty {
            state.withLock { s in s.stats.refused["invalid", default: 0] += 1; countersChanged(&s) }
            throw BeaconLogError(.invalidRecord, "\(which) is empty; append the bytes of one JSON value", path: directory)
        }
        if record.count > config.maxRecordBytes {
            state.withLock { s in s.stats.refused["tooLarge", default: 0] += 1; countersChanged(&s) }
            throw BeaconLogError(.recordTooLarge, "\(which) is \(record.count) bytes, more than maxRecordBytes (\(config.maxRecordBytes)); split it or raise the limit", path: directory)
        }
        if memchr(record.baseAddress!, 0x0A, record.count) != nil {
            state.withLock { s in s.stats.refused["invalid", default: 0] += 1; countersChanged(&s) }
            throw BeaconLogError(.invalidRecord, "\(which) contains a raw newline, which would break the one-record-per-line framing; escape it as \\n inside JSON strings", path: directory)
        }
    }

    /// Throws unless a record of about `incoming` bytes may be buffered now.
    func checkWritable(_ s: inout State, incoming: Int) throws {
        try checkUsable(s)
        guard canWrite else {
            throw BeaconLogError(.invalidArgument, "this log was opened without write access (access \(config.access)); open it with .readWrite or .write to append", path: directory)
        }
        if config.quotaPolicy == .rejectNew, Int64(s.diskBytes) + Int64(s.bufferedBytes) + Int64(incoming) > config.maxBytes {
            s.stats.refused["quota", default: 0] += 1
            countersChanged(&s)
            throw BeaconLogError(.quotaExceeded, "the log holds \(s.diskBytes + UInt64(s.bufferedBytes)) bytes and its quota is \(config.maxBytes) (policy .rejectNew); deliver and acknowledge records, or raise maxBytes", path: directory)
        }
        // While writes fail (disk full), keep at most one segment's worth in memory, then refuse.
        if let error = s.writeError, s.bufferedBytes + incoming > max(config.segmentBytes, 1 << 20) {
            s.stats.refused["diskFull", default: 0] += 1
            countersChanged(&s)
            throw BeaconLogError(.diskFull, "\(error.message); \(s.bufferedRecords) records wait in memory and new ones are refused until space frees", path: error.path, errno: error.errno)
        }
    }

    /// Frames `record` into the buffer and returns its sequence number. Decides the segment: a frame
    /// that would make the tail segment exceed `segmentBytes` starts the next one.
    @discardableResult
    func buffer(_ s: inout State, record: UnsafeRawBufferPointer, crc: UInt32) -> UInt64 {
        let seq = s.nextSeq
        s.nextSeq += 1
        let seqDigits = Frame.digits(seq)
        let crcDigits = Frame.digits(UInt64(crc))
        let length = Frame.length(seqDigits: seqDigits, crcDigits: crcDigits, count: record.count)
        if s.tailSize > 0 && s.tailSize + UInt64(length) > UInt64(config.segmentBytes) {
            s.tailSegment += 1
            s.tailSize = 0
        }
        if s.chunks.last?.segment != s.tailSegment {
            let bytes: FrameBuffer
            if let spare = s.spare.popLast() {
                s.spareBytes -= spare.capacity
                bytes = spare
            } else {
                // Room for a write threshold and a record or so.
                bytes = FrameBuffer(capacity: min(config.segmentBytes, Self.writeThreshold + 16 * 1024))
            }
            s.chunks.append(Chunk(segment: s.tailSegment, bytes: bytes, firstSeq: seq, lastSeq: seq))
        }
        // The open chunk is mutated in place: its buffer is a class, so no copy-on-write.
        let last = s.chunks.count - 1
        let out = s.chunks[last].bytes
        Frame.write(seq: seq, crc: crc, seqDigits: seqDigits, crcDigits: crcDigits, record: record, to: out.tail(reserving: length))
        out.count += length
        s.chunks[last].lastSeq = seq
        s.chunks[last].records += 1
        s.tailSize += UInt64(length)
        s.bufferedBytes += length
        s.bufferedRecords += 1
        s.stats.appendedRecords += 1
        s.stats.appendedBytes += UInt64(record.count)
        return seq
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
        let nanos = delay.components.seconds * 1_000_000_000 + delay.components.attoseconds / 1_000_000_000
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

    /// Writes chunks in order, creating segments as they roll. On a failed write the partial bytes
    /// are cut off and the unwritten chunks go back to the front of the buffer.
    func write(_ chunks: [Chunk], io: inout WriterIO) throws {
        var chunks = chunks
        var index = 0
        while index < chunks.count {
            if io.file == nil || io.fileSegment != chunks[index].segment {
                do {
                    if io.file != nil {
                        if let moved = try seal(io: &io) {
                            // These frames were taken from the buffer, so the rewrite did not count them in the tail's size.
                            var carried: UInt64 = 0
                            for k in index..<chunks.count where chunks[k].segment < moved {
                                chunks[k].segment = moved
                                carried += UInt64(chunks[k].bytes.count)
                            }
                            state.withLock { $0.tailSize += carried }
                            continue
                        }
                    }
                    try enforceQuota(incoming: UInt64(chunks[index...].reduce(0) { $0 + $1.bytes.count }))
                    try startSegment(chunks[index].segment, io: &io)
                } catch {
                    putBack(Array(chunks[index...]), error: error)
                    throw error
                }
            }
            let chunk = chunks[index]
            do {
                try enforceQuota(incoming: UInt64(chunk.bytes.count))
                try fs.write(io.file!, chunk.bytes.bytes)
            } catch {
                // Never leave a partial record behind: cut the file back to the last whole chunk.
                do {
                    try fs.truncate(io.file!, to: io.fileSize)
                } catch {
                    fail(BeaconLogError(.failed, "a write failed and the partial bytes could not be cut off (\(error)); reopen the log, which will repair the tail", path: io.file!.path))
                }
                putBack(Array(chunks[index...]), error: error)
                throw error
            }
            io.fileSize += UInt64(chunk.bytes.count)
            io.unsynced.append(chunk)
            let size = io.fileSize
            state.withLock { s in
                s.writeError = nil
                s.written = LogPosition(segment: chunk.segment, offset: size, seq: chunk.lastSeq + 1)
                if let last = s.segments.indices.last, s.segments[last].number == chunk.segment {
                    s.segments[last].size = size
                }
            }
            index += 1
        }
    }

    /// Returns chunks that could not be written to the front of the buffer and records the error.
    func putBack(_ chunks: [Chunk], error: any Error) {
        state.withLock { s in
            s.chunks = chunks + s.chunks
            s.bufferedBytes += chunks.reduce(0) { $0 + $1.bytes.count }
            s.bufferedRecords += chunks.reduce(0) { $0 + $1.records }
            let logError = error as? BeaconLogError ?? BeaconLogError(.io, "\(error)", path: directory)
            s.writeError = logError
            s.stats.lastError = logError.description
        }
    }

    /// Creates segment `number` (mode 0600) and makes its directory entry durable before any
    /// record in it can count as durable.
    func startSegment(_ number: UInt64, io: inout WriterIO) throws {
        let file = try fs.open(path(ofSegment: number), .createNew)
        do {
            try fs.syncDirectory(directory)
        } catch {
            fs.close(file)
            try? fs.remove(path(ofSegment: number))
            throw error
        }
        io.file = file
        io.fileSegment = number
        io.fileSize = 0
        io.unsynced = []
        state.withLock { $0.segments.append(SegmentInfo(number: number, size: 0)) }
    }

    /// Seals the tail segment: fsync, then close. Returns the segment the unsynced records moved to
    /// if the fsync failed and they were rewritten.
    func seal(io: inout WriterIO) throws -> UInt64? {
        if let moved = try syncTail(io: &io) {
            // The unsynced records were rewritten into a fresh segment, which is now the tail:
            // keep it open, the frames waiting for the next segment follow them there.
            return moved
        }
        if let file = io.file { fs.close(file) }
        io.file = nil
        return nil
    }

    /// Fsyncs the tail segment if it has unsynced bytes and marks them durable. An fsync error is
    /// never retried on the same file (Linux may have dropped the dirty pages and marked them
    /// clean, so a second fsync could succeed without writing them): the unsynced records, still
    /// in memory, are rewritten into a fresh segment and that one is synced.
    /// If that fails too the log enters the failed state. Returns the new segment after a rewrite.
    @discardableResult
    func syncTail(io: inout WriterIO) throws -> UInt64? {
        guard let file = io.file, !io.unsynced.isEmpty else { return nil }
        do {
            try fs.sync(file)
            markDurable(io.unsynced, segment: io.fileSegment, size: io.fileSize)
            recycle(&io.unsynced)
            return nil
        } catch {
            return try rewriteAfterFailedSync(io: &io, error: error)
        }
    }

    /// Hands the buffers of durable chunks back for new chunks, emptying `chunks`. Under `.none`
    /// a segment's worth of chunks is kept until its fsync; without reuse every chunk would be
    /// fresh memory, page-faulted in and zeroed by the kernel (a fifth of the append time).
    func recycle(_ chunks: inout [Chunk]) {
        let buffers = chunks.map(\.bytes)
        chunks = []
        let limit = max(config.segmentBytes, 1 << 20)
        state.withLock { s in
            for buffer in buffers where s.spareBytes + buffer.capacity <= limit {
                buffer.count = 0
                s.spareBytes += buffer.capacity
                s.spare.append(buffer)
            }
        }
    }

    func markDurable(_ chunks: [Chunk], segment: UInt64, size: UInt64) {
        guard let last = chunks.last else { return }
        let records = UInt64(chunks.reduce(0) { $0 + $1.records })
        state.withLock { s in
            s.durable = LogPosition(segment: segment, offset: size, seq: last.lastSeq + 1)
            s.stats.durableSeq = last.lastSeq
            s.stats.durableRecords += records
        }
    }

    func rewriteAfterFailedSync(io: inout WriterIO, error: any Error) throws -> UInt64 {
        let failedPath = io.file?.path ?? directory
        let failedSegment = io.fileSegment
        let failedSize = io.fileSize
        if let file = io.file { fs.close(file) }
        io.file = nil
        let pending = io.unsynced
        io.unsynced = []
        // The new segment comes after everything assigned so far; buffered frames follow it there.
        let target = state.withLock { s -> UInt64 in
            let target = max(s.tailSegment, io.fileSegment) + 1
            for k in s.chunks.indices where s.chunks[k].segment < target { s.chunks[k].segment = target }
            s.tailSegment = target
            s.tailSize = UInt64(pending.reduce(0) { $0 + $1.bytes.count } + s.chunks.reduce(0) { $0 + $1.bytes.count })
            s.stats.lastError = "fsync failed on \(failedPath): \(error); rewriting \(pending.reduce(0) { $0 + $1.records }) records into segment \(target)"
            return target
        }
        do {
            try startSegment(target, io: &io)
            for var chunk in pending {
                chunk.segment = target
                try fs.write(io.file!, chunk.bytes.bytes)
                io.fileSize += UInt64(chunk.bytes.count)
            }
            try fs.sync(io.file!)
            let size = io.fileSize
            if let last = pending.last {
                state.withLock { s in
                    s.written = LogPosition(segment: target, offset: size, seq: max(s.written.seq, last.lastSeq + 1))
                    if let i = s.segments.indices.last, s.segments[i].number == target { s.segments[i].size = size }
                }
            }
            markDurable(pending, segment: target, size: size)
            return target
        } catch {
            let firstLost = pending.first?.firstSeq ?? state.withLock { $0.durable.seq }
            let removed = removeUnsynced(segment: failedSegment, durableSize: failedSize - UInt64(pending.reduce(0) { $0 + $1.bytes.count }), rewrite: target, io: &io)
            let fate = removed
                ? "the records from seq \(firstLost) on were cut off and are not in the log"
                : "the records from seq \(firstLost) on may or may not be in the log"
            let failure = BeaconLogError(
                .failed,
                "fsync failed on \(failedPath) and rewriting the unsynced records elsewhere failed too (\(error)); \(fate) (everything before is durable). Beacon never retries an fsync on the same data; check the disk (dmesg), then reopen the log",
                path: failedPath, errno: (error as? BeaconLogError)?.errno)
            fail(failure)
            throw failure
        }
    }

    /// After a failed fsync that could not be repaired: cuts the failed segment back to what its
    /// last successful fsync covered and removes the half-made rewrite segment, so that what the
    /// log holds is exactly what was durable (a reopen must not bring back records whose fsync
    /// failed: whoever appended them was told they are lost). Returns false if that did not work.
    func removeUnsynced(segment: UInt64, durableSize: UInt64, rewrite: UInt64, io: inout WriterIO) -> Bool {
        if let file = io.file { fs.close(file) }
        io.file = nil
        io.unsynced = []
        do {
            try fs.remove(path(ofSegment: rewrite))
            let file = try fs.open(path(ofSegment: segment), .readWrite)
            defer { fs.close(file) }
            try fs.truncate(file, to: durableSize)
        } catch {
            return false
        }
        state.withLock { s in
            s.segments.removeAll { $0.number == rewrite }
            if let i = s.segments.firstIndex(where: { $0.number == segment }) { s.segments[i].size = durableSize }
            if s.written.segment >= segment { s.written = s.durable }
        }
        return true
    }

    func fail(_ error: BeaconLogError) {
        state.withLock { s in
            s.failure = error
            s.stats.lastError = error.description
        }
    }
}
