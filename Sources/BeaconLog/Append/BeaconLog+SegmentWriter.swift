import Glibc

extension BeaconLog {
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
                    throw putBack(Array(chunks[index...]), error: error)
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
                    forgetPreallocation(&io)
                } catch {
                    fail(BeaconLogError(.failed, "a write failed and the partial bytes could not be cut off (\(error)); reopen the log, which will repair the tail", path: io.file!.path))
                }
                throw putBack(Array(chunks[index...]), error: error)
            }
            io.fileSize += UInt64(chunk.bytes.count)
            io.unsynced.append(chunk)
            startWriteback(io: &io)
            // Readers stop at the last whole frame (the file may end inside one, see holdBack).
            let size = io.fileSize - UInt64(chunk.partialBytes)
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

    /// Returns chunks that could not be written to the front of the buffer and records the error,
    /// with what to do about it; returns that error.
    func putBack(_ chunks: [Chunk], error: any Error) -> BeaconLogError {
        var logError = error as? BeaconLogError ?? BeaconLogError(.io, "\(error)", path: directory.path)
        switch logError.code {
        case .diskFull: logError = logError.advising("free space on the file system (nothing already written is lost)")
        case .permissionDenied: logError = logError.advising("the log's files must belong to the user this process runs as")
        case .io: logError = logError.advising("the disk may be failing: check the kernel log (dmesg)")
        default: break
        }
        return state.withLock { s in
            s.chunks = chunks + s.chunks
            s.bufferedBytes += chunks.reduce(0) { $0 + $1.bytes.count }
            s.bufferedRecords += chunks.reduce(0) { $0 + $1.records }
            s.writeError = logError
            s.stats.lastError = logError.description
            return logError
        }
    }

    /// Creates segment `number` (mode 0600), preallocates it (see ``preallocate(_:io:)``) and makes
    /// its directory entry durable before any record in it can count as durable.
    func startSegment(_ number: UInt64, io: inout WriterIO) throws {
        let file = try fs.open(path(ofSegment: number), .createNew)
        do {
            let preallocated = try preallocate(file, io: &io)
            try fs.syncDirectory(directory)
            io.preallocated = preallocated
        } catch {
            fs.close(file)
            try? fs.remove(path(ofSegment: number))
            throw error
        }
        io.file = file
        io.fileSegment = number
        io.fileSize = 0
        io.unsynced = []
        io.cutUnsynced = false
        io.writebackStarted = 0
        state.withLock { $0.segments.append(SegmentInfo(number: number, size: 0)) }
    }

    /// Gives a new segment its space up front when records are fsynced as they are written
    /// (`.everyRecord`, `.batched`): `fallocate` mode 0 sets the size to `segmentBytes`, zeros
    /// after the records, so an fsync of records written inside that space need not record a new
    /// size (measured on ext4: per-record fsync faster by a third). Not under `.none`, whose only
    /// fsyncs are at a roll, nor for segments under ``preallocationMinimum``, whose roll (a cut
    /// and its fsync) would come every few records. Returns whether the segment was preallocated.
    ///
    /// A file system without `fallocate` is written without it from then on; any other failure
    /// (no space for a whole segment, `ENOSPC`) leaves this segment without it, and a write that
    /// does not fit then meets the disk-full path like any other.
    static let preallocationMinimum = 64 * 1024

    func preallocate(_ file: LogFile, io: inout WriterIO) throws -> Bool {
        guard config.durability != .none, !io.preallocationUnsupported, config.segmentBytes >= Self.preallocationMinimum else { return false }
        do {
            try fs.preallocate(file, size: UInt64(config.segmentBytes))
            return true
        } catch let error as BeaconLogError where [EOPNOTSUPP, ENOSYS, EINVAL].contains(error.errno) {
            io.preallocationUnsupported = true
            return false
        } catch {
            // A failed fallocate may have allocated part of the space and grown the file: cut it
            // back, the segment holds no record yet.
            try fs.truncate(file, to: 0)
            return false
        }
    }

    /// Seals the tail segment: cut its preallocated tail, fsync, close. Returns the segment the
    /// unsynced records moved to if the fsync failed and they were rewritten.
    ///
    /// The cut is durable before the next segment is created: only the newest segment may end in
    /// zeros, and opening repairs that one.
    func seal(io: inout WriterIO) throws -> UInt64? {
        if io.preallocated, let file = io.file {
            try fs.truncate(file, to: io.fileSize)
            forgetPreallocation(&io)
            io.cutUnsynced = true
        }
        if let moved = try syncTail(io: &io) {
            // The unsynced records were rewritten into a fresh segment, which is now the tail:
            // keep it open, the frames waiting for the next segment follow them there.
            return moved
        }
        if io.cutUnsynced, let file = io.file {
            // Every record is durable already: this fsync is for the size alone, tried once. If it
            // fails, a power loss may leave the zeros after the last record, which every reader
            // takes for the end of the segment.
            try? fs.sync(file)
            io.cutUnsynced = false
        }
        if let file = io.file { fs.close(file) }
        io.file = nil
        return nil
    }

    /// Cuts the tail segment's preallocated zeros off when the log closes (best effort: the segment
    /// is the newest, whose zeros opening cuts anyway). The records are durable already.
    func cutPreallocation(io: inout WriterIO) {
        guard io.preallocated, let file = io.file else { return }
        forgetPreallocation(&io)
        do {
            try fs.truncate(file, to: io.fileSize)
            try fs.sync(file)
        } catch {
            // Opening the log again cuts them.
        }
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
            io.cutUnsynced = false
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
    ///
    /// Only buffers of the usual size are kept (``chunkCapacity``): one that grew for a large
    /// commit (a burst taken at once, up to a megabyte) is freed, not held for the process's
    /// lifetime. Under `.everyRecord` and `.batched` every commit empties the buffer, so
    /// ``committedSpareBuffers`` are enough; `.none` keeps up to a segment's worth.
    func recycle(_ chunks: inout [Chunk]) {
        let buffers = chunks.map(\.bytes)
        chunks = []
        let standard = chunkCapacity
        let limit = config.durability == .none ? max(config.segmentBytes, 1 << 20) : Self.committedSpareBuffers * standard
        state.withLock { s in
            for buffer in buffers where buffer.capacity <= standard && s.spareBytes + buffer.capacity <= limit {
                buffer.count = 0
                s.spareBytes += buffer.capacity
                s.spare.append(buffer)
            }
        }
    }

    /// How much `.none` writes before it starts their writeback.
    static let writebackBytes: UInt64 = 1 << 20

    /// Under `.none`, starts the writeback of each MiB written as it fills (`sync_file_range`,
    /// as RocksDB's `bytes_per_sync`): the disk writes while records are appended, and the fsync
    /// at the roll, at close or in `sync()` waits for little more than the last MiB instead of a
    /// whole segment (measured: 1.5x the append rate to durable). Promises nothing about
    /// durability; the fsyncs still do.
    func startWriteback(io: inout WriterIO) {
        guard config.durability == .none, let file = io.file else { return }
        if io.writebackStarted > io.fileSize { io.writebackStarted = io.fileSize }
        guard io.fileSize - io.writebackStarted >= Self.writebackBytes else { return }
        fs.startWriteback(file, offset: io.writebackStarted, length: io.fileSize - io.writebackStarted)
        io.writebackStarted = io.fileSize
    }

    /// The open segment no longer runs past its records (cut, or closed).
    func forgetPreallocation(_ io: inout WriterIO) {
        io.preallocated = false
    }

    func markDurable(_ chunks: [Chunk], segment: UInt64, size: UInt64) {
        guard let last = chunks.last else { return }
        let records = UInt64(chunks.reduce(0) { $0 + $1.records })
        state.withLock { s in
            s.durable = LogPosition(segment: segment, offset: size - UInt64(last.partialBytes), seq: last.lastSeq + 1)
            s.stats.durableSeq = last.lastSeq
            s.stats.durableRecords += records
        }
    }

    func fail(_ error: BeaconLogError) {
        state.withLock { s in
            s.failure = error
            s.stats.lastError = error.description
        }
    }
}
