extension BeaconLog {
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

    /// Writes `position` into the next checkpoint slot, then publishes it. Makes it durable
    /// (`fdatasync`) unless `lazily` and the last sync is younger than
    /// ``Configuration/checkpointSyncInterval``: then a sync is scheduled for when it is due.
    /// `dropping` marks a move past records the quota deletes: they count as dropped, not acknowledged.
    ///
    /// The slot written is never the one holding the newest durable generation (a generation is
    /// skipped when needed, so that generation G stays in slot G % 2): a power loss leaves that
    /// slot whole whatever happened to the other.
    func writeCheckpoint(_ position: LogPosition, dropping: Bool = false, lazily: Bool = false, io: inout CheckpointIO) throws {
        let path = directory.file(Checkpoint.fileName)
        if io.checkpointFile == nil {
            if !io.replaceCheckpointFile, try fs.fileSize(path) == UInt64(Checkpoint.fileSize) {
                let file = try fs.open(path, .readWrite)
                // An earlier process's last checkpoint may be in the page cache only (written
                // lazily before it was killed): durable before the other slot is written.
                do {
                    try fs.syncData(file)
                } catch {
                    fs.close(file)
                    throw error
                }
                io.checkpointFile = file
                io.durableGeneration = io.generation
                io.lastSync = monotonicNanoseconds()
            } else {
                // First checkpoint (or a damaged file): create it whole with tmp + fsync + rename + directory fsync.
                var bytes = Checkpoint(generation: io.generation + 1, position: position).encodedSlot()
                bytes.append(contentsOf: [UInt8](repeating: 0, count: Checkpoint.slotSize))
                if (io.generation + 1) % 2 == 1 { bytes = Array(bytes[Checkpoint.slotSize...] + bytes[..<Checkpoint.slotSize]) }
                try fs.replaceFile(path, with: bytes)
                io.checkpointFile = try fs.open(path, .readWrite)
                io.generation += 1
                io.durableGeneration = io.generation
                io.lastSync = monotonicNanoseconds()
                io.replaceCheckpointFile = false
                publish(position, dropping: dropping)
                return
            }
        }
        var generation = io.generation + 1
        if generation % 2 == io.durableGeneration % 2 { generation += 1 }
        let slot = Checkpoint(generation: generation, position: position).encodedSlot()
        try slot.withUnsafeBytes { try fs.write(io.checkpointFile!, $0, at: UInt64(Int(generation % 2) * Checkpoint.slotSize)) }
        io.generation = generation
        let due = config.checkpointSyncInterval.map { io.lastSync &+ UInt64(max(0, $0.nanoseconds)) }
        if lazily, let due, monotonicNanoseconds() < due {
            publish(position, dropping: dropping)
            scheduleCheckpointSync(at: due, io: &io)
            return
        }
        try makeCheckpointDurable(io: &io)
        publish(position, dropping: dropping)
    }

    /// Fsyncs the checkpoint file if its newest generation is not durable yet.
    func makeCheckpointDurable(io: inout CheckpointIO) throws {
        guard io.generation != io.durableGeneration, let file = io.checkpointFile else { return }
        try fs.syncData(file)
        io.durableGeneration = io.generation
        io.lastSync = monotonicNanoseconds()
    }

    /// Makes a lazily written checkpoint durable at `deadline`, on the flush lane (the timer's
    /// thread does not wait for a disk).
    private func scheduleCheckpointSync(at deadline: UInt64, io: inout CheckpointIO) {
        guard !io.syncScheduled else { return }
        io.syncScheduled = true
        TimerThread.shared.add(atNanoseconds: deadline) { [self] in flushLane.async { [self] in syncCheckpointWhenDue() } }
    }

    /// The scheduled sync of a lazily written checkpoint. A failed fdatasync is not retried on the
    /// same file (Linux may have marked the page clean): the next checkpoint replaces the whole
    /// file (tmp, fsync, rename), durably; until then a power loss may deliver those batches again.
    func syncCheckpointWhenDue() {
        let closed = state.withLock { $0.closed }
        checkpointIO.withLock { io in
            io.syncScheduled = false
            guard !closed else { return }
            do {
                try makeCheckpointDurable(io: &io)
            } catch {
                if let file = io.checkpointFile { fs.close(file) }
                io.checkpointFile = nil
                io.replaceCheckpointFile = true
            }
        }
    }

    func publish(_ position: LogPosition, dropping: Bool) {
        state.withLock { s in
            if !dropping, position.seq > s.checkpoint.seq { s.stats.acknowledgedRecords += position.seq - s.checkpoint.seq }
            s.checkpoint = position
        }
    }

    /// The seq of the next unacknowledged record according to the checkpoint file (0 if none is readable).
    func checkpointSeqOnDisk() -> UInt64 {
        guard let bytes = try? Checkpoint.readFile(in: directory, fs: fs) else { return 0 }
        return Checkpoint.decode(file: bytes).checkpoint?.position.seq ?? 0
    }

    /// The checkpoint of `directory` as ``verify(directory:)`` reports it: its position (where reading
    /// resumes when it does not land on a record), and what is wrong with it added to `problems`.
    static func verifyCheckpoint(directory: LogDirectory, fs: any FileSystem, segments: [SegmentInfo], problems: inout [VerifyReport.Problem]) throws -> LogPosition? {
        var checkpoint: LogPosition?
        if let size = try fs.fileSize(directory.file(Checkpoint.fileName)) {
            let decoded = Checkpoint.decode(file: try Checkpoint.readFile(in: directory, fs: fs))
            if let cp = decoded.checkpoint {
                checkpoint = cp.position
                if !segments.isEmpty {
                    let (resolved, note) = try Recovery.resolve(cp.position, segments: segments, directory: directory, fs: fs)
                    if let note {
                        problems.append(.init(file: Checkpoint.fileName, offset: nil, reason: note))
                        checkpoint = resolved
                    }
                }
            } else {
                problems.append(.init(file: Checkpoint.fileName, offset: nil, reason: "no valid slot in \(size) bytes; the reader will deliver again from the oldest segment"))
            }
        }
        return checkpoint
    }
}

extension Checkpoint {
    /// The checkpoint file of `directory`: its first `fileSize` bytes, fewer if it is shorter.
    static func readFile(in directory: LogDirectory, fs: any FileSystem) throws -> [UInt8] {
        let file = try fs.open(directory.file(fileName), .read)
        defer { fs.close(file) }
        var bytes = [UInt8](repeating: 0, count: fileSize)
        let n = try bytes.withUnsafeMutableBytes { try fs.read(file, into: $0, at: 0) }
        return Array(bytes.prefix(n))
    }
}
