import Glibc

extension BeaconLog {
    /// Advances the checkpoint to `position` (normally `batch.end`) durably, then deletes segments
    /// that are wholly acknowledged.
    ///
    /// Makes the acknowledged records durable first if they are not yet, so the checkpoint never
    /// points past synced data. Acknowledging a position at or before the checkpoint does nothing.
    /// The checkpoint is written in place (`pwrite`) into the slot of its generation and made
    /// durable with `fdatasync`, at once or, in the writer's process, within
    /// ``Configuration/checkpointSyncInterval`` (a process crash loses no acknowledgement either
    /// way: the page cache keeps it); segments are deleted only after that.
    public func acknowledge(through position: LogPosition) throws {
        guard canAcknowledge else {
            throw BeaconLogError(.invalidArgument, "this log was opened without the reader lock (access \(config.access)); open it with .readWrite or .read to acknowledge", path: directory.path)
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
                throw BeaconLogError(.invalidArgument, "cannot acknowledge \(position): the log ends at \(written); acknowledge a batch's end", path: directory.path)
            }
            if position > durable { try sync() }
        } else {
            // Another process writes, so only what was read is known to exist.
            guard let readEnd, position.seq <= readEnd.seq, !(readEnd < position) else {
                throw BeaconLogError(.invalidArgument, "cannot acknowledge \(position): this reader has read only up to \(readEnd.map { "\($0)" } ?? "nothing"); acknowledge a batch's end", path: directory.path)
            }
        }
        // The checkpoint's fdatasync holds only the checkpoint writer's lock: reads (the next
        // batch, read while this one is made durable) do not wait for it. In the writer's process
        // the reader lock is not taken at all unless a segment is deleted: a quota drop takes the
        // checkpoint writer's lock first, so none is half done while this one is held, and nothing
        // else here touches the reader's files. (Taken, it made the uploader's next read wait for
        // this thread, or this thread for the read's whole batch, on every acknowledgement.)
        try checkpointIO.withLock { cio in
            let behind: Bool
            if canWrite {
                takeBackDelivered(through: position)
                behind = position > state.withLock { $0.checkpoint }
            } else {
                try syncRead(through: position, acknowledged: current)
                behind = readerIO.withLock { _ in
                    takeBackDelivered(through: position)
                    return position > state.withLock({ $0.checkpoint })
                }
            }
            guard behind else { return }
            if canWrite {
                try writeCheckpoint(normalized(position), lazily: true, io: &cio)
            } else {
                try excludingDrops { mark in
                    countDeliveredAfterDrop(from: current.seq, through: position.seq, dropMark: mark)
                    try writeCheckpoint(normalized(position), io: &cio)
                }
            }
            guard canWrite else {
                try readerIO.withLock { io in try deleteAcknowledgedSegments(io: &io) }
                return
            }
            // In the writer's process reads never list the directory, so the files are unlinked
            // after the reader lock is let go: unlinking a full segment frees its cached pages, for
            // milliseconds (3 ms for 8 MiB under strace), which the uploader's next read waited
            // for. Still under the checkpoint writer's lock, after the checkpoint is durable.
            guard !acknowledgedSegments().isEmpty else { return }
            // Deleted only once the checkpoint that passed them is durable.
            try makeCheckpointDurable(io: &cio)
            try remove(segments: readerIO.withLock { io in forgetAcknowledgedSegments(io: &io) })
        }
    }

    /// Runs `body` (writing the checkpoint) excluding the writer process's quota drops (see
    /// ``DropExclusion``), on the `reader.lock` this `.read` instance holds.
    /// `body` gets the drop mark (see ``DropExclusion``): every segment below it was deleted by a quota.
    func excludingDrops<T>(_ body: (UInt64) throws -> T) throws -> T {
        guard let file = locks.withLock({ $0.first { $0.file.path.hasSuffix("/" + LockKind.reader.rawValue + ".lock") }?.file }) else { return try body(0) }
        return try DropExclusion.withLock(file) { try body(DropExclusion.mark(in: file, fs: fs)) }
    }

    /// Counts the records from `from` to `upTo` (seqs) that this `.read` instance read from a
    /// segment another process's quota deleted after they were read (one below `dropMark`) and
    /// counted as dropped: every record of it at or after the checkpoint, which is `from` (under
    /// ``DropExclusion`` the drop read this reader's last checkpoint). They are being
    /// acknowledged, so they were delivered: `deliveredAfterDrop` takes them back out of what is
    /// reported as dropped. (This reader deletes only segments wholly before its checkpoint, whose
    /// records are not among them.) When it counts any, the counters are saved before this
    /// returns, before the checkpoint moves, with the seq settled through (see
    /// ``settleDropped(_:sent:)``): a crash in between neither loses the count nor lets a
    /// restarted reader count these records again.
    func countDeliveredAfterDrop(from: UInt64, through upTo: UInt64, dropMark: UInt64) {
        let counted = state.withLock { s -> Bool in
            var delivered: UInt64 = 0
            for run in s.readRuns where run.segment < dropMark && run.seqs.upperBound > from && run.seqs.lowerBound < upTo {
                delivered += min(run.seqs.upperBound, upTo) - max(run.seqs.lowerBound, from)
            }
            s.readRuns.removeAll { $0.seqs.upperBound <= upTo }
            guard delivered > 0 else { return false }
            s.deliveredAfterDrop += delivered
            s.dropSettledThrough = max(s.dropSettledThrough, upTo)
            countersChanged(&s)
            return true
        }
        if counted { saveCounters() }
    }

    /// Moves the records before `position` that a quota drop deleted after they were read (see
    /// `State.droppedButRead`) from `dropped` to acknowledged: they were delivered, so they are not
    /// lost. Call with the reader lock or the checkpoint writer's lock held (a quota drop holds both),
    /// so that no drop is half done.
    func takeBackDelivered(through position: LogPosition) {
        state.withLock { s in
            guard let range = s.droppedButRead, position.seq > range.lowerBound else { return }
            let upTo = min(position.seq, range.upperBound)
            let delivered = upTo - range.lowerBound
            let dropped = s.stats.dropped[.quotaDeleted, default: 0]
            s.stats.dropped[.quotaDeleted] = dropped - min(dropped, delivered)
            s.stats.acknowledgedRecords += delivered
            s.droppedButRead = upTo < range.upperBound ? upTo..<range.upperBound : nil
            countersChanged(&s)
        }
    }

    /// Makes what a `.read` instance acknowledges durable: another process appends, maybe without
    /// fsyncing (durability `.none`), so the reader fsyncs (which works on a read-only descriptor)
    /// each segment holding records read since its last fsync, through `position`: usually the one
    /// it reads, through the descriptor it reads with.
    ///
    /// The fsyncs run without the reader lock, which is taken only to pick the descriptors and,
    /// afterwards, to record what is durable: held through a device flush, it made the uploader's
    /// next read wait for the flush and then for this thread to be scheduled again, which on a
    /// loaded machine took milliseconds per acknowledgement (`beacon send` under load). A read
    /// that moves off a segment meanwhile leaves its descriptor open until the fsync is done
    /// (``closeSegment(_:io:)``). Acknowledgements run one at a time (the checkpoint writer's lock).
    func syncRead(through position: LogPosition, acknowledged: LogPosition) throws {
        let picked = readerIO.withLock { io -> (open: [LogFile], reopen: [UInt64])? in
            let from = max(io.syncedThrough ?? acknowledged, acknowledged)
            guard from < position else { return nil }
            let listed = state.withLock { s in s.segments.map(\.number) }
            let open = [io.readFile].compactMap { $0 } + io.keptForSync
            let numbers = Set(listed + open.map(\.segment)).filter { (from.segment...position.segment).contains($0) }.sorted()
            let files = numbers.compactMap { number in open.first { $0.segment == number }?.file }
            io.syncing = files
            // Not kept open (reading left more segments than are kept): opened again below.
            return (files, numbers.filter { number in !open.contains { $0.segment == number } })
        }
        guard let picked else { return }
        let synced = Result {
            for file in picked.open { try fs.sync(file) }
            for number in picked.reopen {
                let file: LogFile
                do {
                    file = try fs.open(path(ofSegment: number), .read)
                } catch let error as BeaconLogError where error.errno == ENOENT {
                    continue  // a quota drop deleted it: nothing there to make durable
                }
                defer { fs.close(file) }
                try fs.sync(file)
            }
        }
        readerIO.withLock { io in
            io.syncing = []
            for file in io.closeAfterSync { fs.close(file) }
            io.closeAfterSync = []
            guard case .success = synced else { return }
            io.syncedThrough = position
            // Everything read from the segments before the position's is durable now.
            for kept in io.keptForSync where kept.segment < position.segment { fs.close(kept.file) }
            io.keptForSync.removeAll { $0.segment < position.segment }
        }
        try synced.get()
    }

    /// The segments the checkpoint has passed, never the newest one, going by `State.segments`.
    func acknowledgedSegments() -> [UInt64] {
        state.withLock { s -> [UInt64] in
            guard let newest = s.segments.last?.number else { return [] }
            return s.segments.filter { seg in
                // Only a writer knows the tail it appends to; a reader goes by the newest file.
                seg.number != newest && (!canWrite || seg.number != s.tailSegment)
                    && (seg.number < s.checkpoint.segment || (seg.number == s.checkpoint.segment && s.checkpoint.offset >= seg.size && s.written.segment > seg.number))
            }.map(\.number)
        }
    }

    /// Deletes segments the checkpoint has passed (never the newest one), then fsyncs the directory.
    func deleteAcknowledgedSegments(io: inout ReaderIO) throws {
        if !canWrite {
            // Another process writes: the segments listed last may be out of date (it may have
            // deleted some under its quota, or added newer ones), but segments the checkpoint has
            // passed were listed before reading reached it. List the directory only when one of
            // them can be deleted, to delete what is really there.
            guard !acknowledgedSegments().isEmpty else { return }
            try refreshSegments(io: &io)
        }
        try remove(segments: forgetAcknowledgedSegments(io: &io))
    }

    /// Closes the reader's descriptors of the segments the checkpoint has passed and forgets them
    /// (`State.segments`): from then on no read looks for their files. Returns them, to remove.
    func forgetAcknowledgedSegments(io: inout ReaderIO) -> [UInt64] {
        let doomed = acknowledgedSegments()
        guard !doomed.isEmpty else { return [] }
        for number in doomed { closeReader(ofSegment: number, io: &io) }
        state.withLock { s in s.segments.removeAll { doomed.contains($0.number) } }
        return doomed
    }

    /// Unlinks forgotten segments' files, then fsyncs the directory.
    func remove(segments doomed: [UInt64]) throws {
        guard !doomed.isEmpty else { return }
        for number in doomed { try fs.remove(path(ofSegment: number)) }
        try fs.syncDirectory(directory)
    }
}
