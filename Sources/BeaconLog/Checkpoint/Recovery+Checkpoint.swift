import Glibc
/// Choosing the checkpoint on open: both slots read, damaged ones noted, the newest usable one
/// checked against the segments.
extension Recovery {
    /// The checkpoint as chosen on open.
    struct LoadedCheckpoint {
        /// Where reading resumes: the chosen checkpoint, resolved to a record, or the oldest segment.
        var position: LogPosition
        /// The newest generation on disk; the next write carries a newer one.
        var generation: UInt64 = 0
        /// Whether the checkpoint file exists.
        var existed = false
        /// A checkpoint slot was damaged: the first checkpoint write replaces the whole file.
        var damagedSlot = false
        /// What was wrong and what was done about it, for `LogStats.checkpointRecovery`.
        var notes: String?
    }

    /// Reads the checkpoint file of `directory` and picks the newest slot that names a record of
    /// the log (`lastSeq` is the last record written); without one, reading starts at the oldest segment.
    static func loadCheckpoint(segments: [SegmentInfo], lastSeq: UInt64?, directory: LogDirectory, fs: any FileSystem) throws -> LoadedCheckpoint {
        var loaded = LoadedCheckpoint(position: LogPosition(segment: segments.first?.number ?? 0, offset: 0, seq: 0))
        if let size = try fs.fileSize(directory.file(Checkpoint.fileName)) {
            loaded.existed = true
            let slots = Checkpoint.slots(file: try Checkpoint.readFile(in: directory, fs: fs))
            var notes: [String] = []
            for (k, slot) in slots.enumerated() where slot.checkpoint == nil && !slot.blank {
                notes.append("checkpoint slot \(k) is damaged (a torn write or a damaged block)")
                loaded.damagedSlot = true
            }
            let candidates = slots.compactMap(\.checkpoint).sorted { $0.generation > $1.generation }
            // The next write must carry a newer generation than any slot on disk.
            loaded.generation = candidates.first?.generation ?? 0
            var chosen = false
            for cp in candidates {
                if let last = lastSeq, cp.position.seq > last + 1 {
                    // Acknowledging records that were never written: not a checkpoint this log wrote.
                    notes.append("checkpoint generation \(cp.generation) (\(cp.position)) lies beyond the last record (seq \(last)) and is ignored")
                    continue
                }
                let (resolved, note) = try resolve(cp.position, segments: segments, directory: directory, fs: fs)
                loaded.position = resolved
                if let note { notes.append(note) }
                if cp.generation != candidates.first?.generation { notes.append("using the older slot (generation \(cp.generation))") }
                chosen = true
                break
            }
            if !chosen {
                notes.append(candidates.isEmpty
                    ? "the checkpoint file (\(size) bytes) has no valid slot; delivering again from the oldest segment (at-least-once)"
                    : "no checkpoint slot is usable; delivering again from the oldest segment (at-least-once)")
            }
            loaded.notes = notes.isEmpty ? nil : notes.joined(separator: "; ")
        }
        return loaded
    }

    /// Checks that `position` names an existing segment and lands on the record with its seq; if not,
    /// picks the safe place to resume from and says why.
    static func resolve(_ position: LogPosition, segments: [SegmentInfo], directory: LogDirectory, fs: any FileSystem) throws -> (LogPosition, String?) {
        guard let oldest = segments.first, let newest = segments.last else {
            return (position, nil)
        }
        if position.segment < oldest.number {
            // Its segment was deleted after the checkpoint passed all of it (or the quota dropped
            // it): resume at the oldest segment, keeping the seq so that nothing is delivered twice.
            return (LogPosition(segment: oldest.number, offset: 0, seq: position.seq), nil)
        }
        if position.segment > newest.number || !segments.contains(where: { $0.number == position.segment }) {
            return (LogPosition(segment: oldest.number, offset: 0, seq: 0),
                    "the checkpoint names segment \(position.segment), which does not exist; delivering again from the oldest segment \(oldest.number) (at-least-once)")
        }
        let path = directory.file(SegmentName.fileName(position.segment))
        do {
            return try resolve(position, in: path, oldest: oldest, fs: fs)
        } catch let error as BeaconLogError where error.errno == ENOENT {
            // Listed, then deleted before it was opened: a writer's quota in another process (a
            // reader opening beside `beacon append`) took it. Its records are gone like those of
            // a segment older than the oldest: resume at the next segment with the checkpoint's
            // seq, where the reader finds the gap and settles it as the quota's.
            guard let next = segments.first(where: { $0.number > position.segment }) else { return (position, nil) }
            return (LogPosition(segment: next.number, offset: 0, seq: position.seq),
                    "segment \(position.segment), where the checkpoint is, was deleted while the log was opened (another process's quota); resuming at segment \(next.number)")
        }
    }

    /// ``resolve(_:segments:directory:fs:)`` within the checkpoint's own segment, at `path`.
    private static func resolve(_ position: LogPosition, in path: LogPath, oldest: SegmentInfo, fs: any FileSystem) throws -> (LogPosition, String?) {
        if try recordStarts(at: position, path: path, fs: fs) {
            return (position, nil)
        }
        // Resynchronise: the first valid record at or after the checkpoint's seq.
        let file = try fs.open(path, .read)
        defer { fs.close(file) }
        let bytes = try fs.readAll(file)
        var found: LogPosition?
        var validEnd: UInt64 = 0
        bytes.withUnsafeBytes { raw in
            forEachLine(raw) { range, parsed in
                if case .record(let seq, _) = parsed {
                    if seq >= position.seq && found == nil {
                        found = LogPosition(segment: position.segment, offset: UInt64(range.lowerBound), seq: seq)
                    }
                    validEnd = UInt64(range.upperBound + 1)
                }
            }
        }
        if let first = found, first.seq > position.seq, position.segment > oldest.number {
            // The records between the checkpoint's seq and this segment's first one can only be in
            // older segments (say, the checkpoint was written by hand or its segment number is
            // wrong): resume at the oldest segment with the checkpoint's seq, which passes over
            // only records that were acknowledged.
            let resumed = LogPosition(segment: oldest.number, offset: 0, seq: position.seq)
            return (resumed, "the checkpoint (\(position)) names a segment whose records start at seq \(first.seq); resuming at \(resumed) so that seqs \(position.seq)..<\(first.seq) in older segments are not passed over")
        }
        let resumed = found ?? LogPosition(segment: position.segment, offset: validEnd, seq: position.seq)
        return (resumed, "the checkpoint (\(position)) does not land on a record; resuming at \(resumed), the first record at or after seq \(position.seq)")
    }

    /// True if `position.offset` is 0, the end of the segment, or the start of the record with `position.seq`.
    static func recordStarts(at position: LogPosition, path: LogPath, fs: any FileSystem) throws -> Bool {
        let file = try fs.open(path, .read)
        defer { fs.close(file) }
        let size = try fs.size(file)
        if position.offset > size { return false }
        var want = 64 * 1024
        while true {
            let start = position.offset == 0 ? 0 : position.offset - 1
            let count = Int(min(UInt64(want), size - start))
            var bytes = [UInt8](repeating: 0, count: count)
            let n = try bytes.withUnsafeMutableBytes { try fs.read(file, into: $0, at: start) }
            bytes.removeLast(count - n)
            var i = 0
            if position.offset > 0 {
                guard bytes.first == 0x0A else { return false }
                i = 1
            }
            if position.offset == size { return true }
            guard let newline = bytes[i...].firstIndex(of: 0x0A) else {
                if start + UInt64(n) >= size { return false }
                want *= 4
                continue
            }
            let parsed = bytes.withUnsafeBytes { Frame.parse($0, line: i..<newline) }
            if case .record(let seq, _) = parsed { return seq == position.seq }
            return false
        }
    }
}
