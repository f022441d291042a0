import Glibc

extension BeaconLog {
    /// How much is read ahead from a segment at once.
    static let readAhead = 256 * 1024

    /// Reads up to `maxRecords` records (and about `maxBytes` of event bytes, at least one record)
    /// starting at `position`, or at the checkpoint when `position` is nil. Never moves the checkpoint.
    ///
    /// Returns an empty batch when nothing is pending. Corrupt records are passed over and counted;
    /// a record whose sequence number is lower than one already read (a copy left by a rewrite
    /// after a failed fsync) is passed over silently. Records are read from the file system as soon
    /// as they are written, before they are durable; ``acknowledge(through:)`` makes them durable
    /// first.
    public func read(from position: LogPosition? = nil, maxRecords: Int = 50, maxBytes: Int = 1 << 20) throws -> LogBatch {
        precondition(maxRecords > 0, "maxRecords must be positive")
        let start = try state.withLock { s -> LogPosition in
            try checkUsable(s)
            let start = position ?? s.checkpoint
            // Reading from the checkpoint again, or into what a drop deleted, gives up the batches
            // read before: the dropped records among them will never be acknowledged.
            if let dropped = s.droppedButRead, position == nil || start.seq < dropped.upperBound { s.droppedButRead = nil }
            return start
        }
        return try readerIO.withLock { io in
            var pos = start
            var records: [ArraySlice<UInt8>] = []
            var seqs: [UInt64] = []
            records.reserveCapacity(min(maxRecords, 1024))
            seqs.reserveCapacity(min(maxRecords, 1024))
            var ends: [LogPosition] = []
            ends.reserveCapacity(min(maxRecords, 1024))
            var bytes = 0
            var skipped = 0
            // The last seq accepted in the current segment. Within one segment seqs go up by one;
            // only a segment's first records may repeat earlier ones (a rewrite after a failed fsync).
            var lastInSegment: UInt64? = pos.offset > 0 && pos.seq > 0 ? pos.seq - 1 : nil
            func moveOn(to next: UInt64) {
                pos = LogPosition(segment: next, offset: 0, seq: pos.seq)
                lastInSegment = nil
            }
            while records.count < maxRecords && (records.isEmpty || bytes < maxBytes) {
                guard let limit = try readableLimit(ofSegment: pos.segment, io: &io), pos.offset < limit else {
                    guard let next = try segment(after: pos.segment) else { break }
                    // A writer completes a segment before it creates the next one: look at its size
                    // again, it may have grown since we looked (records not to be passed over).
                    if let again = try readableLimit(ofSegment: pos.segment, io: &io), pos.offset < again { continue }
                    moveOn(to: next)
                    continue
                }
                guard let (cache, line) = try line(at: pos, limit: limit, io: &io) else {
                    // An incomplete last line: a write in progress in the newest segment, or a torn
                    // tail in a sealed one, whose remaining bytes are then passed over.
                    guard let next = try segment(after: pos.segment) else { break }
                    if let again = try readableLimit(ofSegment: pos.segment, io: &io), again > limit { continue }
                    skipped += countCorrupt(at: pos, reason: "tornTail")
                    moveOn(to: next)
                    continue
                }
                let lineEnd = cache.start + UInt64(line.upperBound) + 1
                let parsed = cache.bytes.withUnsafeBytes { Frame.parse($0, line: line) }
                switch parsed {
                case .record(let seq, let event):
                    let next = LogPosition(segment: pos.segment, offset: lineEnd, seq: pos.seq)
                    if let last = lastInSegment, seq != last + 1, try !plausibleJump(to: seq, after: last, next: next, limit: limit, io: &io) {
                        // The CRC covers the event, not its seq: damaged seq digits. Counted, passed over.
                        skipped += countCorrupt(at: pos, reason: "seqDigits")
                        pos.offset = lineEnd
                    } else if lastInSegment == nil, seq != pos.seq, try !seqContinues(from: seq, expected: pos.seq, next: next, limit: limit, io: &io) {
                        // A segment's first record, with a seq other than expected that the records
                        // after it do not continue: its digits were damaged.
                        skipped += countCorrupt(at: pos, reason: "seqDigits")
                        pos.offset = lineEnd
                    } else if seq >= pos.seq {
                        records.append(cache.bytes[event])
                        seqs.append(seq)
                        bytes += event.count
                        pos = LogPosition(segment: pos.segment, offset: lineEnd, seq: seq + 1)
                        ends.append(pos)
                        lastInSegment = seq
                    } else {
                        // Already delivered: a copy rewritten at the start of a segment, or before the checkpoint.
                        pos.offset = lineEnd
                    }
                case .corrupt(_, let reason):
                    skipped += countCorrupt(at: pos, reason: reason)
                    pos.offset = lineEnd
                }
            }
            state.withLock { s in
                if !seqs.isEmpty { s.readThrough = max(s.readThrough, pos.seq) }
                if !canWrite, s.readEnd.map({ pos.seq >= $0.seq && !(pos < $0) }) ?? true { s.readEnd = pos }
            }
            return LogBatch(records: records, seqs: seqs, start: start, end: pos, skippedCorrupt: skipped, recordEnds: ends)
        }
    }

    /// Whether a record with `seq` may follow `last` in the same segment, where seqs normally go up by
    /// one. Going back is never plausible there. A jump ahead is (records in between were corrupt) when
    /// the record after it continues from `seq`, or there is none yet; if the record after it
    /// continues from `last` instead, `seq`'s digits were damaged.
    func plausibleJump(to seq: UInt64, after last: UInt64, next: LogPosition, limit: UInt64, io: inout ReaderIO) throws -> Bool {
        if seq <= last { return false }
        guard next.offset < limit, let (cache, line) = try line(at: next, limit: limit, io: &io) else {
            // The last record of its segment: the next segment's first record tells. If it lies in
            // (last, seq], the log continues from before `seq`, so `seq`'s digits were damaged.
            guard let following = try segment(after: next.segment),
                  let nextFirst = try? firstSeq(ofSegment: following) else { return true }
            return !(nextFirst > last && nextFirst <= seq)
        }
        guard case .record(let following, _) = cache.bytes.withUnsafeBytes({ Frame.parse($0, line: line) }) else { return true }
        return following > seq || following <= last
    }

    /// Whether a segment's first record, whose `seq` is not the `expected` one, has genuine seq
    /// digits, judged by the records after it (it ends at `next`): genuine when the next one
    /// continues from it, or the one after that does (the next one is the damaged one); damaged
    /// when the next ones continue from `expected` instead. With nothing to compare, taken as is.
    func seqContinues(from seq: UInt64, expected: UInt64, next: LogPosition, limit: UInt64, io: inout ReaderIO) throws -> Bool {
        guard let (following, afterFollowing) = try seqOfRecord(at: next, limit: limit, io: &io) else { return true }
        if following == seq + 1 { return true }
        if following == expected + 1 { return false }
        guard let (after, _) = try seqOfRecord(at: afterFollowing, limit: limit, io: &io) else { return true }
        if after == seq + 2 { return true }
        return after != following + 1
    }

    /// The seq of the valid record starting at `position` and the position after it; nil if there
    /// is none (yet) or it is corrupt.
    func seqOfRecord(at position: LogPosition, limit: UInt64, io: inout ReaderIO) throws -> (UInt64, LogPosition)? {
        guard position.offset < limit, let (cache, line) = try line(at: position, limit: limit, io: &io),
              case .record(let seq, _) = cache.bytes.withUnsafeBytes({ Frame.parse($0, line: line) }) else { return nil }
        return (seq, LogPosition(segment: position.segment, offset: cache.start + UInt64(line.upperBound) + 1, seq: position.seq))
    }

    /// Counts a corrupt record once, however often it is read again.
    func countCorrupt(at position: LogPosition, reason: String) -> Int {
        state.withLock { s in
            if let counted = s.corruptCountedThrough, position <= counted { return 1 }
            s.corruptCountedThrough = position
            s.stats.skippedCorrupt += 1
            s.stats.skippedCorruptByReason[reason, default: 0] += 1
            countersChanged(&s)
            return 1
        }
    }

    /// How far segment `number` may be read: what the writer in this process has written, or the
    /// file's size when another process writes. Nil if the segment does not exist.
    func readableLimit(ofSegment number: UInt64, io: inout ReaderIO) throws -> UInt64? {
        if canWrite {
            return state.withLock { s in s.segments.first { $0.number == number }?.size }
        }
        if io.readFile?.segment != number {
            if let old = io.readFile { fs.close(old.file) }
            io.readFile = nil
            do {
                io.readFile = (number, try fs.open(path(ofSegment: number), .read))
            } catch let error as BeaconLogError where error.errno == ENOENT {
                return nil
            }
        }
        return try fs.size(io.readFile!.file)
    }

    /// The next segment after `number`, or nil if `number` is the newest.
    func segment(after number: UInt64) throws -> UInt64? {
        if !canWrite { try refreshSegments() }
        return state.withLock { s in s.segments.first { $0.number > number }?.number }
    }

    /// Lists the directory again when another process appends (it may have rolled or deleted segments).
    func refreshSegments() throws {
        var segments: [SegmentInfo] = []
        for number in try fs.list(directory).compactMap(SegmentName.parse).sorted() {
            if let size = try fs.fileSize(path(ofSegment: number)) {
                segments.append(SegmentInfo(number: number, size: size))
            }
        }
        state.withLock { s in
            s.segments = segments
            if let newest = segments.last, newest.number >= s.written.segment {
                s.written = LogPosition(segment: newest.number, offset: newest.size, seq: s.written.seq)
            }
        }
    }

    /// The line starting at `position` (ending before `limit`), from the read-ahead cache, refilled
    /// as needed. Nil if no complete line starts there yet.
    func line(at position: LogPosition, limit: UInt64, io: inout ReaderIO) throws -> (ReadCache, Range<Int>)? {
        if let cache = io.cache, cache.segment == position.segment, position.offset >= cache.start,
           position.offset < cache.start + UInt64(cache.bytes.count) {
            let from = Int(position.offset - cache.start)
            let upTo = Int(min(UInt64(cache.bytes.count), limit - cache.start))
            if let newline = Self.newline(in: cache.bytes, from: from, upTo: upTo) { return (cache, from..<newline) }
            if cache.start + UInt64(cache.bytes.count) >= limit { return nil }
        }
        // Refill from `position`, growing until a whole line fits or the readable data ends.
        var want = Self.readAhead
        while true {
            let count = Int(min(UInt64(want), limit - position.offset))
            if count <= 0 { return nil }
            if io.readFile?.segment != position.segment {
                if let old = io.readFile { fs.close(old.file) }
                io.readFile = nil
                io.readFile = (position.segment, try fs.open(path(ofSegment: position.segment), .read))
            }
            let file = io.readFile!.file
            var failure: (any Error)?
            let bytes = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
                var done = 0
                do {
                    while done < count {
                        let n = try fs.read(file, into: UnsafeMutableRawBufferPointer(rebasing: UnsafeMutableRawBufferPointer(buffer)[done..<count]), at: position.offset + UInt64(done))
                        if n == 0 { break }
                        done += n
                    }
                } catch {
                    failure = error
                }
                initialized = done
            }
            if let failure { throw failure }
            let cache = ReadCache(segment: position.segment, start: position.offset, bytes: bytes)
            io.cache = cache
            if let newline = Self.newline(in: bytes, from: 0, upTo: bytes.count) { return (cache, 0..<newline) }
            if bytes.count < count || position.offset + UInt64(count) >= limit { return nil }
            want *= 4
        }
    }

    static func newline(in bytes: [UInt8], from: Int, upTo: Int) -> Int? {
        guard from < upTo else { return nil }
        return bytes.withUnsafeBytes { raw -> Int? in
            guard let hit = memchr(raw.baseAddress! + from, 0x0A, upTo - from) else { return nil }
            return raw.baseAddress!.distance(to: UnsafeRawPointer(hit))
        }
    }

    /// Advances the checkpoint to `position` (normally `batch.end`) durably, then deletes segments
    /// that are wholly acknowledged.
    ///
    /// Makes the acknowledged records durable first if they are not yet, so the checkpoint never
    /// points past synced data. Acknowledging a position at or before the checkpoint does nothing.
    /// The checkpoint is written in place (`pwrite`) into the slot of its generation and made
    /// durable with `fdatasync`; segments are deleted only after that.
    public func acknowledge(through position: LogPosition) throws {
        guard canAcknowledge else {
            throw BeaconLogError(.invalidArgument, "this log was opened without the reader lock (access \(config.access)); open it with .readWrite or .read to acknowledge", path: directory)
        }
        let (current, written, durable, newest, readEnd) = try state.withLock { s in
            try checkUsable(s)
            return (s.checkpoint, s.written, s.durable, s.segments.last?.number ?? s.written.segment, s.readEnd)
        }
        if position <= current {
            // Records a quota drop deleted while they were in flight may still be acknowledged.
            readerIO.withLock { _ in takeBackDelivered(through: position) }
            return
        }
        if canWrite {
            // A batch's end may already sit at offset 0 of a segment just created: compare by seq.
            if position.seq > written.seq || position.segment > newest || (position.segment == written.segment && position.offset > written.offset) {
                throw BeaconLogError(.invalidArgument, "cannot acknowledge \(position): the log ends at \(written); acknowledge a batch's end", path: directory)
            }
            if position > durable { try sync() }
        } else {
            // Another process writes, so only what was read is known to exist.
            guard let readEnd, position.seq <= readEnd.seq, !(readEnd < position) else {
                throw BeaconLogError(.invalidArgument, "cannot acknowledge \(position): this reader has read only up to \(readEnd.map { "\($0)" } ?? "nothing"); acknowledge a batch's end", path: directory)
            }
            // Make sure what we acknowledge is on disk (fsync works on a read-only descriptor).
            for number in current.segment...position.segment {
                guard let file = try? fs.open(path(ofSegment: number), .read) else { continue }
                defer { fs.close(file) }
                try fs.sync(file)
            }
        }
        try readerIO.withLock { io in
            takeBackDelivered(through: position)
            if position <= state.withLock({ $0.checkpoint }) { return }
            if !canWrite { try refreshSegments() }
            try writeCheckpoint(normalized(position), io: &io)
            try deleteAcknowledgedSegments(io: &io)
        }
    }

    /// Moves the records before `position` that a quota drop deleted after they were read (see
    /// `State.droppedButRead`) from `dropped` to acknowledged: they were delivered, so they are not
    /// lost. Call with the reader lock held, so that no drop is half done.
    func takeBackDelivered(through position: LogPosition) {
        state.withLock { s in
            guard let range = s.droppedButRead, position.seq > range.lowerBound else { return }
            let upTo = min(position.seq, range.upperBound)
            let delivered = upTo - range.lowerBound
            let dropped = s.stats.dropped["quota", default: 0]
            s.stats.dropped["quota"] = dropped - min(dropped, delivered)
            s.stats.acknowledgedRecords += delivered
            s.droppedButRead = upTo < range.upperBound ? upTo..<range.upperBound : nil
            countersChanged(&s)
        }
    }

    /// `position`, or the start of the next segment when `position` is the end of a sealed segment,
    /// so that the checkpoint never names a segment that is deleted because it is wholly acknowledged.
    func normalized(_ position: LogPosition) -> LogPosition {
        state.withLock { s in
            guard let i = s.segments.firstIndex(where: { $0.number == position.segment }),
                  i + 1 < s.segments.count, position.offset >= s.segments[i].size else { return position }
            // A newer segment exists, so this one is sealed: the writer never returns to it.
            return LogPosition(segment: s.segments[i + 1].number, offset: 0, seq: position.seq)
        }
    }

    /// Writes `position` into the next checkpoint slot and makes it durable, then publishes it.
    /// `dropping` marks a move past records the quota deletes: they count as dropped, not acknowledged.
    func writeCheckpoint(_ position: LogPosition, dropping: Bool = false, io: inout ReaderIO) throws {
        let path = directory + "/" + Checkpoint.fileName
        if io.checkpointFile == nil {
            if !io.replaceCheckpointFile, try fs.fileSize(path) == Checkpoint.fileSize.asUInt64 {
                io.checkpointFile = try fs.open(path, .readWrite)
            } else {
                // First checkpoint (or a damaged file): create it whole with tmp + fsync + rename + directory fsync.
                var bytes = Checkpoint(generation: io.generation + 1, position: position).encodedSlot()
                bytes.append(contentsOf: [UInt8](repeating: 0, count: Checkpoint.slotSize))
                if (io.generation + 1) % 2 == 1 { bytes = Array(bytes[Checkpoint.slotSize...] + bytes[..<Checkpoint.slotSize]) }
                try fs.replaceFile(path, with: bytes)
                io.checkpointFile = try fs.open(path, .readWrite)
                io.generation += 1
                io.replaceCheckpointFile = false
                publish(position, dropping: dropping)
                return
            }
        }
        let generation = io.generation + 1
        let slot = Checkpoint(generation: generation, position: position).encodedSlot()
        try slot.withUnsafeBytes { try fs.write(io.checkpointFile!, $0, at: UInt64(Int(generation % 2) * Checkpoint.slotSize)) }
        try fs.syncData(io.checkpointFile!)
        io.generation = generation
        publish(position, dropping: dropping)
    }

    func publish(_ position: LogPosition, dropping: Bool) {
        state.withLock { s in
            if !dropping, position.seq > s.checkpoint.seq { s.stats.acknowledgedRecords += position.seq - s.checkpoint.seq }
            s.checkpoint = position
        }
    }

    /// Deletes segments the checkpoint has passed (never the newest one), then fsyncs the directory.
    func deleteAcknowledgedSegments(io: inout ReaderIO) throws {
        if !canWrite { try refreshSegments() }
        let doomed = state.withLock { s -> [UInt64] in
            guard let newest = s.segments.last?.number else { return [] }
            return s.segments.filter { seg in
                // Only a writer knows the tail it appends to; a reader goes by the newest file.
                seg.number != newest && (!canWrite || seg.number != s.tailSegment)
                    && (seg.number < s.checkpoint.segment || (seg.number == s.checkpoint.segment && s.checkpoint.offset >= seg.size && s.written.segment > seg.number))
            }.map(\.number)
        }
        guard !doomed.isEmpty else { return }
        for number in doomed {
            if io.readFile?.segment == number, let file = io.readFile?.file {
                fs.close(file)
                io.readFile = nil
            }
            if io.cache?.segment == number { io.cache = nil }
        }
        state.withLock { s in s.segments.removeAll { doomed.contains($0.number) } }
        for number in doomed { try fs.remove(path(ofSegment: number)) }
        try fs.syncDirectory(directory)
    }
}

extension Int {
    var asUInt64: UInt64 { UInt64(self) }
}
