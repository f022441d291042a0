extension BeaconLog {
    func rewriteAfterFailedSync(io: inout WriterIO, error: any Error) throws -> UInt64 {
        let failedPath = io.file?.path ?? directory.path
        let failedSegment = io.fileSegment
        let failedSize = io.fileSize
        if io.preallocated, let file = io.file {
            // Never fsynced again; if the cut is lost too, readers take its zeros for the end.
            try? fs.truncate(file, to: failedSize)
            forgetPreallocation(&io)
        }
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
            s.stats.lastError = "the sync (fdatasync) of \(failedPath) failed: \(error); rewriting \(pending.reduce(0) { $0 + $1.records }) records into segment \(target)"
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
            let size = io.fileSize - UInt64(pending.last?.partialBytes ?? 0)
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
                "the sync (fdatasync) of \(failedPath) failed, and rewriting the unsynced records elsewhere failed too (\(error)); \(fate) (everything before is durable). Beacon never retries a sync of the same data; check the disk (dmesg), then reopen the log",
                path: failedPath, cause: (error as? BeaconLogError)?.cause)
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
}
