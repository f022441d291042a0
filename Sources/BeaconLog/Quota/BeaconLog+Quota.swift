import Glibc

/// The disk quota: `.dropOldest` deletes whole segments from the old end (`.rejectNew` is checked
/// when a record is buffered, in `checkWritable`).
extension BeaconLog {
    /// `.dropOldest`: deletes the oldest segments until `incoming` more bytes fit in `maxBytes`,
    /// advancing the checkpoint past them first and counting the pending records they held.
    func enforceQuota(incoming: UInt64) throws {
        guard config.quotaPolicy == .dropOldest else { return }
        // Without the reader lock, another process acknowledges and deletes segments: look at the
        // directory before believing the quota is reached.
        var pruned = canAcknowledge
        while true {
            let victim = state.withLock { s -> (SegmentInfo, next: LogPosition)? in
                guard Int64(s.diskBytes + incoming) > config.maxBytes, s.segments.count >= 2 else { return nil }
                let oldest = s.segments[0]
                let next = s.segments[1]
                return (oldest, LogPosition(segment: next.number, offset: 0, seq: 0))
            }
            guard let (oldest, nextStart) = victim else { return }
            if !pruned {
                try forgetSegmentsDeletedByTheReader()
                pruned = true
                continue
            }
            // Under the reader lock, so that an acknowledgement (which deletes segments and moves
            // the checkpoint under it too) cannot change what counts as pending meanwhile.
            // Without the reader lock, also excluding the reader process's acknowledgements, so
            // that each record is counted once: dropped here, or delivered there (see DropExclusion).
            let deleted = try excludingAcknowledgements { lockFile in try checkpointIO.withLock { cio in try readerIO.withLock { rio -> UInt64? in
                guard state.withLock({ $0.segments.first?.number == oldest.number }) else { return nil }
                // Sequence numbers of the victim's and the next segment's first records: read their first lines.
                let firstSeqOfNext = try firstSeq(ofSegment: nextStart.segment) ?? state.withLock { $0.written.seq }
                let firstSeqOfVictim = try firstSeq(ofSegment: oldest.number) ?? firstSeqOfNext
                // Pending records lost with it: the victim's own records the checkpoint has not passed.
                // Without the reader lock, the checkpoint on disk is the reader process's, not ours.
                let acknowledged = canAcknowledge ? state.withLock { $0.checkpoint.seq } : checkpointSeqOnDisk()
                let from = max(firstSeqOfVictim, acknowledged)
                let dropped = firstSeqOfNext > from ? firstSeqOfNext - from : 0
                if canAcknowledge, state.withLock({ $0.checkpoint.segment <= oldest.number }) {
                    try writeCheckpoint(LogPosition(segment: nextStart.segment, offset: 0, seq: firstSeqOfNext), dropping: true, io: &cio)
                }
                closeReader(ofSegment: oldest.number, io: &rio)
                // Forget it before unlinking, so a reader never looks for a file that is gone.
                state.withLock { s in
                    s.segments.removeAll { $0.number == oldest.number }
                    s.droppedBefore = max(s.droppedBefore, firstSeqOfNext)
                    if dropped > 0 {
                        s.stats.dropped[.quotaDeleted, default: 0] += dropped
                        // Records already read may still be delivered: their acknowledgement takes
                        // them back out of `dropped` (see `acknowledge(through:)`).
                        let read = min(s.readThrough, firstSeqOfNext)
                        if canAcknowledge, read > from {
                            if let earlier = s.droppedButRead, earlier.upperBound == from {
                                s.droppedButRead = earlier.lowerBound..<read
                            } else {
                                s.droppedButRead = from..<read
                            }
                        }
                        countersChanged(&s)
                    }
                }
                do {
                    try fs.remove(path(ofSegment: oldest.number))
                } catch let error as BeaconLogError where error.errno == ENOENT && !canAcknowledge {
                    // The reader process deleted it first.
                }
                if let lockFile { try? DropExclusion.noteDrop(of: oldest.number, in: lockFile, fs: fs) }
                return dropped
            } } }
            guard let deleted else { continue }
            if deleted > 0 { config.onDropped?(deleted) }
            try fs.syncDirectory(directory)
        }
    }

    /// Runs `body` (a quota drop) excluding another process's acknowledgements: under
    /// ``DropExclusion`` on `reader.lock` when this instance does not hold the reader lock itself.
    /// `body` gets the open `reader.lock`, to mark the drop in it.
    func excludingAcknowledgements<T>(_ body: (LogFile?) throws -> T) throws -> T {
        guard !canAcknowledge else { return try body(nil) }
        let file = try fs.open(directory.file(LockKind.reader.rawValue + ".lock"), .createOrOpen)
        defer { fs.close(file) }
        return try DropExclusion.withLock(file) { try body(file) }
    }

    /// Drops from the segment list the segments a reader process deleted after acknowledging them.
    /// The writer's own sizes are kept: it knows best how much it wrote.
    func forgetSegmentsDeletedByTheReader() throws {
        let present = Set(try fs.list(directory).compactMap(SegmentName.parse))
        state.withLock { s in
            let newest = s.segments.last?.number
            s.segments.removeAll { !present.contains($0.number) && $0.number != newest }
        }
    }

    /// The sequence number of the first valid record of a segment, reading only its first lines.
    func firstSeq(ofSegment number: UInt64) throws -> UInt64? {
        let file = try fs.open(path(ofSegment: number), .read)
        defer { fs.close(file) }
        var want = 64 * 1024
        while true {
            var bytes = [UInt8](repeating: 0, count: want)
            let n = try bytes.withUnsafeMutableBytes { try fs.read(file, into: $0, at: 0) }
            var found: UInt64?
            bytes.withUnsafeBytes { raw in
                Recovery.forEachLine(UnsafeRawBufferPointer(rebasing: raw[0..<n])) { _, parsed in
                    if found == nil, case .record(let seq, _) = parsed { found = seq }
                }
            }
            if found != nil || n < want { return found }
            want *= 4
        }
    }
}
