import Glibc

extension BeaconLog {
    /// Reads up to `maxRecords` records (and about `maxBytes` of event bytes, at least one record)
    /// starting at `position`, or at the checkpoint when `position` is nil. Never moves the checkpoint.
    ///
    /// Returns an empty batch when nothing is pending. Corrupt records are passed over and counted;
    /// a record whose sequence number is lower than one already read (a copy left by a rewrite
    /// after a failed fsync) is passed over silently. Records are read from the file system as soon
    /// as they are written, before they are durable; ``acknowledge(through:)`` makes them durable
    /// first.
    ///
    /// Beside a writer in another process, what a reader may trust, in every durability mode:
    /// - Bytes of a sealed segment (one with a newer segment after it) and of any segment while no
    ///   writer holds `writer.lock` are final: a damaged line there (zeros, a partial frame, a bad
    ///   CRC) is read once more, then passed over and counted.
    /// - In the newest segment while a writer holds the lock (the live region), nothing is: a
    ///   `pread` copies page by page while the writer's `write(2)` does too, so a read may find a
    ///   later page written and an earlier one still zeros (segments are preallocated, so the
    ///   size says nothing), or a frame's start and then zeros. A damaged line there ends the
    ///   batch; the next read reads it again. A line whose CRC matches is whole: the CRC covers
    ///   the event, and the framing around it is checked byte by byte.
    /// - Under `.none` an aligned write may end the file inside a frame: reading stops at the
    ///   last whole line, as at any incomplete line.
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
            var ends: [LogPosition] = []
            var crcs: [UInt32] = []
            /// Room for one more record: the arrays grow by doubling, but never past `maxRecords`.
            /// A caller that keeps its arrays under glibc's mmap threshold by `maxRecords` (up to
            /// 4,000 slices of 32 bytes: under 128 KiB) gets no array above it: `free` of a block
            /// `malloc` had mapped raises the threshold for the whole process.
            @inline(__always) func makeRoom() {
                guard records.count == records.capacity else { return }
                let capacity = min(maxRecords, max(64, records.capacity * 2))
                records.reserveCapacity(capacity)
                seqs.reserveCapacity(capacity)
                ends.reserveCapacity(capacity)
                crcs.reserveCapacity(capacity)
            }
            makeRoom()
            var crc: UInt32 = 0
            var bytes = 0
            var skipped = 0
            // The last seq accepted in the current segment. Within one segment seqs go up by one;
            // only a segment's first records may repeat earlier ones (a rewrite after a failed fsync).
            var lastInSegment: UInt64? = pos.offset > 0 && pos.seq > 0 ? pos.seq - 1 : nil
            // The end of the log as this writer knows it (looked at again when a seq reaches it).
            var knownEnd = canWrite ? state.withLock { $0.written.seq } : .max
            func moveOn(to next: UInt64) {
                pos = LogPosition(segment: next, offset: 0, seq: pos.seq)
                lastInSegment = nil
            }
            // How far the segment being read may be read, looked up again only once reached.
            var known: (segment: UInt64, limit: UInt64)?
            // A damaged line (or torn tail) at this position was read again after its segment was
            // known to be final: what is found there now is passed over and counted.
            var confirmed: LogPosition?
            /// What to do about a damaged line at `pos` (see ``mayStillBeWritten(segment:io:)``): pass it over (it is
            /// final), read it again (it became final since it was read), or wait (the writer of
            /// another process may still be writing it: stop the batch here).
            func judgeDamage() throws -> Damage {
                if canWrite || confirmed == pos { return .passOver }
                io.cache = nil
                if try mayStillBeWritten(segment: pos.segment, io: &io) { return .wait }
                confirmed = pos
                return .reread
            }
            reading: while records.count < maxRecords && (records.isEmpty || bytes < maxBytes) {
                // The usual case first: record after record in the bytes read ahead, each the seq
                // after the last. Anything else (the cache's end, a damaged or repeated record, a
                // seq at the writer's end) is left to the general steps below.
                if let run = known, run.segment == pos.segment, let cache = io.cache, cache.segment == pos.segment,
                   pos.offset >= cache.start, pos.offset < min(run.limit, cache.start + UInt64(cache.bytes.count)) {
                    let upTo = Int(min(run.limit, cache.start + UInt64(cache.bytes.count)) - cache.start)
                    var from = Int(pos.offset - cache.start)
                    cache.bytes.withUnsafeBytes { raw in
                        let base = raw.baseAddress!
                        while from < upTo && records.count < maxRecords && (records.isEmpty || bytes < maxBytes) {
                            guard let hit = memchr(base + from, 0x0A, upTo - from) else { return }
                            let newline = base.distance(to: UnsafeRawPointer(hit))
                            guard case .record(let seq, let event) = Frame.parse(raw, line: from..<newline, crc: &crc),
                                  seq == pos.seq, seq < knownEnd, lastInSegment.map({ $0 &+ 1 == seq }) ?? true else { return }
                            makeRoom()
                            records.append(cache.bytes[event])
                            seqs.append(seq)
                            crcs.append(crc)
                            bytes += event.count
                            from = newline + 1
                            pos = LogPosition(segment: pos.segment, offset: cache.start + UInt64(from), seq: seq + 1)
                            ends.append(pos)
                            lastInSegment = seq
                        }
                    }
                    guard records.count < maxRecords && (records.isEmpty || bytes < maxBytes) else { break }
                }
                if known.map({ $0.segment != pos.segment || pos.offset >= $0.limit }) ?? true {
                    known = try readableLimit(ofSegment: pos.segment, beyond: pos.offset, io: &io).map { (pos.segment, $0) }
                }
                guard let limit = known?.limit, pos.offset < limit else {
                    guard let next = try segment(after: pos.segment, io: &io) else { break }
                    // A writer completes a segment before it creates the next one: look at its size
                    // again, it may have grown since we looked (records not to be passed over).
                    if let again = try readableLimit(ofSegment: pos.segment, beyond: pos.offset, io: &io), pos.offset < again { continue }
                    moveOn(to: next)
                    continue
                }
                guard let line = try lineRange(at: pos, limit: limit, io: &io) else {
                    known = nil
                    // An incomplete last line: a write in progress in the newest segment, or a torn
                    // tail in a sealed one, whose remaining bytes are then passed over. The rest of
                    // the line may have been written since the size was last looked at.
                    if let grown = try readableLimit(ofSegment: pos.segment, beyond: limit, io: &io), grown > limit { continue }
                    guard let next = try segment(after: pos.segment, io: &io) else { break }
                    if let again = try readableLimit(ofSegment: pos.segment, beyond: limit, io: &io), again > limit { continue }
                    // A writer cuts a segment's preallocated zeros before it creates the next one:
                    // read on to the segment's new end; zeros alone, or nothing left, are the end
                    // of its records, not a torn one.
                    if let size = try currentSize(ofSegment: pos.segment, io: &io), size < limit, size > pos.offset { continue }
                    // The segment is sealed: read its bytes again (`currentSize` dropped the cache),
                    // the ones looked at may have been a write still in progress.
                    if !canWrite, confirmed != pos {
                        confirmed = pos
                        continue
                    }
                    if try !onlyZeros(inSegment: pos.segment, from: pos.offset, io: &io) {
                        skipped += countCorrupt(at: pos, reason: .tornTail)
                    }
                    moveOn(to: next)
                    continue
                }
                // The line is in `io.cache`; the checks of damaged seqs below may refill it, so they
                // put it back (they are rare).
                let lineEnd = io.cache!.start + UInt64(line.upperBound) + 1
                let parsed = io.cache!.bytes.withUnsafeBytes { Frame.parse($0, line: line, crc: &crc) }
                switch parsed {
                case .record(let seq, let event):
                    let next = LogPosition(segment: pos.segment, offset: lineEnd, seq: pos.seq)
                    if seq >= knownEnd { knownEnd = canWrite ? state.withLock { $0.written.seq } : .max }
                    if seq >= knownEnd {
                        // No record this log wrote has a seq at or past its end: damaged seq digits
                        // in a segment that opening did not scan. Passed over: a batch ending past
                        // the log's end could never be acknowledged.
                        skipped += countCorrupt(at: pos, reason: .seqDigits)
                        pos.offset = lineEnd
                    } else if try lastInSegment.map({ last in try seq != last + 1 && !keepingCache(&io, { try plausibleJump(to: seq, after: last, next: next, limit: limit, io: &$0) }) })
                                ?? (seq != pos.seq && !keepingCache(&io, { try seqContinues(from: seq, expected: pos.seq, next: next, limit: limit, io: &$0) })) {
                        // The CRC covers the event, not its seq: damaged seq digits (a jump the records
                        // after it do not confirm; or a segment's first record with a seq other than
                        // expected that the records after it do not continue). Counted, passed over
                        // once final: the records after it may be a write in progress.
                        switch try judgeDamage() {
                        case .wait: break reading
                        case .reread: continue reading
                        case .passOver:
                            skipped += countCorrupt(at: pos, reason: .seqDigits)
                            pos.offset = lineEnd
                        }
                    } else if seq >= pos.seq {
                        makeRoom()
                        records.append(io.cache!.bytes[event])
                        seqs.append(seq)
                        crcs.append(crc)
                        bytes += event.count
                        pos = LogPosition(segment: pos.segment, offset: lineEnd, seq: seq + 1)
                        ends.append(pos)
                        lastInSegment = seq
                    } else {
                        // Already delivered: a copy rewritten at the start of a segment, or before the checkpoint.
                        pos.offset = lineEnd
                    }
                case .corrupt(_, let reason):
                    // Zeros, a partial frame or a bad CRC: a write in progress while another
                    // process's writer may still write here (wait and read it again), damage once
                    // the segment is final (pass over, count).
                    switch try judgeDamage() {
                    case .wait: break reading
                    case .reread: continue reading
                    case .passOver:
                        skipped += countCorrupt(at: pos, reason: reason)
                        pos.offset = lineEnd
                    }
                }
            }
            // Which segment each record came from, for a `.read` instance: one another process's
            // quota deletes before the acknowledgement was counted as dropped there.
            var runs: [(segment: UInt64, seqs: Range<UInt64>)] = []
            if !canWrite && canAcknowledge {
                for (k, seq) in seqs.enumerated() {
                    if let last = runs.last, last.segment == ends[k].segment {
                        runs[runs.count - 1].seqs = last.seqs.lowerBound..<max(last.seqs.upperBound, seq + 1)
                    } else {
                        runs.append((ends[k].segment, seq..<(seq + 1)))
                    }
                }
            }
            state.withLock { s in
                for run in runs {
                    if let i = s.readRuns.firstIndex(where: { $0.segment == run.segment }) {
                        let known = s.readRuns[i].seqs
                        s.readRuns[i].seqs = min(known.lowerBound, run.seqs.lowerBound)..<max(known.upperBound, run.seqs.upperBound)
                    } else {
                        s.readRuns.append(run)
                    }
                }
                if !seqs.isEmpty { s.readThrough = max(s.readThrough, pos.seq) }
                if !canWrite, s.readEnd.map({ pos.seq >= $0.seq && !(pos < $0) }) ?? true { s.readEnd = pos }
            }
            var batch = LogBatch(records: records, seqs: seqs, start: start, end: pos, skippedCorrupt: skipped, recordEnds: ends)
            batch.crcs = crcs
            return batch
        }
    }

    /// What ``read(from:maxRecords:maxBytes:)`` does with a damaged line.
    enum Damage {
        case passOver, reread, wait
    }

    /// Whether another process's writer may still be writing segment `number`, so that what a
    /// read found there can still change: the live region.
    ///
    /// A reader in another process copies a file page by page while the writer copies its
    /// `write(2)` in page by page too, and the writer preallocates segments (`fallocate`), so the
    /// size says nothing: a read can find a later page already written and an earlier one still
    /// zeros, or a frame's first bytes and then zeros. Bytes are final once the writer is done
    /// with them: a writer finishes a segment (cut, fsynced) before it creates the next, and
    /// writes only while it holds `writer.lock`. So segment `number` is live while it is the
    /// newest (the directory is listed to see) and a writer holds the lock (tried with `flock`
    /// and let go at once: a writer opening meanwhile retries for 200 ms, see
    /// `DirectoryLock.tryLockBriefly`). In this process's own writer's segments reads stop at
    /// what its writes returned, so nothing is live.
    func mayStillBeWritten(segment number: UInt64, io: inout ReaderIO) throws -> Bool {
        guard !canWrite else { return false }
        if try segment(after: number, io: &io) != nil { return false }
        return try writerHoldsTheLog()
    }

    /// Whether a writer (this process's or another's) holds `writer.lock`.
    func writerHoldsTheLog() throws -> Bool {
        let file: LogFile
        do {
            file = try fs.open(directory.file(LockKind.writer.rawValue + ".lock"), .read)
        } catch let error as BeaconLogError where error.errno == ENOENT {
            return false
        }
        // Closing the descriptor lets go of the lock if we got it.
        defer { fs.close(file) }
        return try !fs.tryLock(file)
    }

    /// Runs `body` (which may read other lines) and puts `io.cache` back as it was.
    func keepingCache<T>(_ io: inout ReaderIO, _ body: (inout ReaderIO) throws -> T) rethrows -> T {
        let cache = io.cache
        defer { io.cache = cache }
        return try body(&io)
    }

    /// Counts a corrupt record once, however often it is read again.
    func countCorrupt(at position: LogPosition, reason: CorruptionReason) -> Int {
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
    ///
    /// Another process's writer only appends to a segment, so a size once seen stays readable:
    /// the file is looked at again (`fstat`) only when reading has reached `offset` and `offset`
    /// is at or past that size. (A writer that reopens the log may cut a torn tail off the newest
    /// segment; reading there finds an incomplete line, as it would have a moment before the cut.)
    func readableLimit(ofSegment number: UInt64, beyond offset: UInt64, io: inout ReaderIO) throws -> UInt64? {
        if canWrite {
            return state.withLock { s in s.segments.first { $0.number == number }?.size }
        }
        guard let file = try readingFile(number, io: &io) else { return nil }
        if let seen = io.readFile?.size, seen > offset { return seen }
        let size = try fs.size(file)
        io.readFile?.size = size
        state.withLock { s in
            if let i = s.segments.firstIndex(where: { $0.number == number }), s.segments[i].size < size { s.segments[i].size = size }
        }
        return size
    }

    /// Whether segment `number` holds nothing but zero bytes (or nothing) from `offset` to its end
    /// as it is now: the space a writer preallocated and did not fill (see `preallocate`).
    func onlyZeros(inSegment number: UInt64, from offset: UInt64, io: inout ReaderIO) throws -> Bool {
        guard let file = try readingFile(number, io: &io), let size = try currentSize(ofSegment: number, io: &io) else { return true }
        var at = offset
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while at < size {
            let n = try chunk.withUnsafeMutableBytes { try fs.read(file, into: $0, at: at) }
            if n == 0 { break }
            if chunk[0..<n].contains(where: { $0 != 0 }) { return false }
            at += UInt64(n)
        }
        return true
    }

    /// Segment `number`'s size now (`fstat`), which becomes its readable limit, and the read-ahead
    /// cache is dropped: for when the size may have shrunk (a preallocated tail cut). Nil if it is gone.
    func currentSize(ofSegment number: UInt64, io: inout ReaderIO) throws -> UInt64? {
        guard let file = try readingFile(number, io: &io) else { return nil }
        let size = try fs.size(file)
        io.readFile?.size = size
        io.cache = nil
        return size
    }
}
