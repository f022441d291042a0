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
        var vanishedBefore: UInt64?
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
            var vanished = false
            let deleted = try excludingAcknowledgements { lockFile in try checkpointIO.withLock { cio in try readerIO.withLock { rio -> UInt64? in
                guard state.withLock({ $0.segments.first?.number == oldest.number }) else { return nil }
                // Sequence numbers of the victim's and the next segment's first records: read their first lines.
                let firstSeqOfNext: UInt64, firstSeqOfVictim: UInt64
                do {
                    firstSeqOfNext = try firstSeq(ofSegment: nextStart.segment) ?? state.withLock { $0.written.seq }
                    firstSeqOfVictim = try firstSeq(ofSegment: oldest.number) ?? firstSeqOfNext
                } catch let error as BeaconLogError where error.errno == ENOENT && !canAcknowledge && vanishedBefore != oldest.number {
                    // The reader process acknowledged and deleted it since the directory was
                    // looked at (a drop earlier in this loop): look again, instead of failing
                    // the append (issue 26; seen as "open failed" in a sender-kill test). Once
                    // for a victim: a segment that stays missing is an error.
                    vanished = true
                    return nil
                }
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
            guard let deleted else {
                if vanished {
                    pruned = false
                    vanishedBefore = oldest.number
                }
                continue
            }
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

extension BeaconLog {
    /// What ``settleDropped(_:sent:)`` found about records another process's quota deleted
    /// before this reader reached them.
    package struct DropSettlement: Equatable, Sendable {
        /// Records the collector had accepted (taken back out of `dropped[.quotaDeleted]`).
        package var delivered: UInt64 = 0
        /// The seqs sent without a recorded answer, now counted in `dropped[.quotaInDoubt]`.
        package var inDoubt: [Range<UInt64>] = []
        package var inDoubtCount: UInt64 { inDoubt.reduce(0) { $0 + ($1.upperBound - $1.lowerBound) } }
    }

    /// Settles the records of `gap`, which another process's quota deleted (and counted as
    /// dropped) before this `.read` instance read them: reading resumed at `gap.lowerBound` and
    /// found `gap.upperBound` first. `sent` are the ranges a sender had sent of them, as its
    /// `delivery.inflight` says, and whether the collector accepted them: accepted ones were
    /// delivered and are taken back out of `dropped[.quotaDeleted]`; the others had no recorded
    /// answer and move to `dropped[.quotaInDoubt]`; the rest of the gap was never sent and stays
    /// dropped.
    ///
    /// Each seq is settled once, even when a crash makes a restarted reader find the same gap:
    /// the counts and the seq settled through are saved together in `reader.counters` before this
    /// returns. So `gap` must start at the durable checkpoint: acknowledge what was delivered
    /// before the gap first (a gap settled ahead of a pending acknowledgement is saved as settled
    /// through its end, and a reader restarted at the older checkpoint would count what lies
    /// between as dropped, delivered or not). Does nothing for other instances (a writer's own
    /// quota moves the checkpoint).
    @discardableResult
    package func settleDropped(_ gap: Range<UInt64>, sent: [(seqs: Range<UInt64>, accepted: Bool)]) -> DropSettlement {
        guard !canWrite && canAcknowledge, !gap.isEmpty else { return DropSettlement() }
        let settlement = state.withLock { s -> DropSettlement in
            let from = max(gap.lowerBound, s.dropSettledThrough)
            guard from < gap.upperBound else { return DropSettlement() }
            let open = from..<gap.upperBound
            let accepted = Self.union(sent.filter(\.accepted).map(\.seqs), within: open)
            let unanswered = Self.subtract(Self.union(sent.filter { !$0.accepted }.map(\.seqs), within: open), accepted)
            let settlement = DropSettlement(delivered: accepted.reduce(0) { $0 + UInt64($1.count) }, inDoubt: unanswered)
            s.deliveredAfterDrop += settlement.delivered
            s.inDoubtAfterDrop += settlement.inDoubtCount
            // This instance's snapshot of the writer's counts, as a later opening reports them.
            let quota = s.stats.dropped[.quotaDeleted, default: 0]
            let delivered = min(quota, settlement.delivered), inDoubt = min(quota - delivered, settlement.inDoubtCount)
            if quota > 0 { s.stats.dropped[.quotaDeleted] = quota - delivered - inDoubt }
            if inDoubt > 0 { s.stats.dropped[.quotaInDoubt, default: 0] += inDoubt }
            s.dropSettledThrough = gap.upperBound
            // Records read from the gap before it was deleted are settled here, not again by an
            // acknowledgement (`countDeliveredAfterDrop`). Those read before the gap are not: their
            // acknowledgement counts them (on 53b7eed they were forgotten here too, and counted
            // as dropped though delivered).
            s.readRuns = s.readRuns.flatMap { run -> [(segment: UInt64, seqs: Range<UInt64>)] in
                let before = run.seqs.lowerBound..<max(run.seqs.lowerBound, min(run.seqs.upperBound, gap.lowerBound))
                let after = min(run.seqs.upperBound, max(run.seqs.lowerBound, gap.upperBound))..<run.seqs.upperBound
                return [(run.segment, before), (run.segment, after)].filter { !$0.seqs.isEmpty }
            }
            countersChanged(&s)
            return settlement
        }
        saveCounters()
        return settlement
    }

    /// The union of `ranges` clipped to `bounds`, sorted and disjoint.
    static func union(_ ranges: [Range<UInt64>], within bounds: Range<UInt64>) -> [Range<UInt64>] {
        var merged: [Range<UInt64>] = []
        for range in ranges.map({ $0.clamped(to: bounds) }).filter({ !$0.isEmpty }).sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = merged.last, range.lowerBound <= last.upperBound {
                merged[merged.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
            } else {
                merged.append(range)
            }
        }
        return merged
    }

    /// `ranges` less `removed`, both sorted and disjoint.
    static func subtract(_ ranges: [Range<UInt64>], _ removed: [Range<UInt64>]) -> [Range<UInt64>] {
        var result: [Range<UInt64>] = []
        for range in ranges {
            var pieces = [range]
            for cut in removed {
                pieces = pieces.flatMap { piece -> [Range<UInt64>] in
                    guard cut.overlaps(piece) else { return [piece] }
                    return [piece.lowerBound..<max(piece.lowerBound, cut.lowerBound), min(piece.upperBound, cut.upperBound)..<piece.upperBound].filter { !$0.isEmpty }
                }
            }
            result += pieces
        }
        return result
    }
}
