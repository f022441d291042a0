import Glibc

/// Opening a log directory: find the segments, repair the newest one, load and check the checkpoint.
///
/// Reads only the newest segment (and older ones only while the newer are empty) and one record at
/// the checkpoint, so opening costs O(newest segment), not O(backlog): a large backlog must not slow a restart.
enum Recovery {
    struct Opened {
        var state: State
        var generation: UInt64
        /// A checkpoint slot was damaged: the first checkpoint write replaces the whole file.
        var damagedCheckpointSlot = false
    }

    /// What a full scan of one segment found.
    struct Scan {
        var size: UInt64
        /// The end of the last valid record (0 if none).
        var validEnd: UInt64
        var lastSeq: UInt64?
    }

    static func open(directory: String, fs: any FileSystem, canWrite: Bool, canAcknowledge: Bool) throws -> Opened {
        let names = try fs.list(directory)
        var segments: [SegmentInfo] = []
        for number in names.compactMap(SegmentName.parse).sorted() {
            let size = try fs.fileSize(directory + "/" + SegmentName.fileName(number)) ?? 0
            segments.append(SegmentInfo(number: number, size: size))
        }
        if canAcknowledge, names.contains(Checkpoint.fileName + ".tmp") {
            try fs.remove(directory + "/" + Checkpoint.fileName + ".tmp")
        }
        var stats = LogStats()

        // The newest segment: keep every valid record, cut the invalid tail, make it durable.
        var lastSeq: UInt64?
        var index = segments.count - 1
        while index >= 0 {
            let path = directory + "/" + SegmentName.fileName(segments[index].number)
            let scan = try scanSegment(path: path, fs: fs)
            if index == segments.count - 1 && canWrite {
                if scan.size > scan.validEnd || scan.size > 0 {
                    let file = try fs.open(path, .readWrite)
                    defer { fs.close(file) }
                    if scan.size > scan.validEnd {
                        try fs.truncate(file, to: scan.validEnd)
                        stats.truncatedBytes = scan.size - scan.validEnd
                    }
                    // The previous writer may have died before its fsync: make what it wrote durable now.
                    try fs.sync(file)
                }
                segments[index].size = scan.validEnd
            }
            if let seq = scan.lastSeq {
                lastSeq = seq
                break
            }
            index -= 1
        }

        // The checkpoint.
        let checkpointPath = directory + "/" + Checkpoint.fileName
        var generation: UInt64 = 0
        var position = LogPosition(segment: segments.first?.number ?? 0, offset: 0, seq: 0)
        var checkpointExisted = false
        var damagedSlot = false
        if let size = try fs.fileSize(checkpointPath) {
            checkpointExisted = true
            let file = try fs.open(checkpointPath, .read)
            defer { fs.close(file) }
            var bytes = [UInt8](repeating: 0, count: Checkpoint.fileSize)
            let n = try bytes.withUnsafeMutableBytes { try fs.read(file, into: $0, at: 0) }
            let slots = Checkpoint.slots(file: Array(bytes.prefix(n)))
            var notes: [String] = []
            for (k, slot) in slots.enumerated() where slot.checkpoint == nil && !slot.blank {
                notes.append("checkpoint slot \(k) is damaged (a torn write or a damaged block)")
                damagedSlot = true
            }
            let candidates = slots.compactMap(\.checkpoint).sorted { $0.generation > $1.generation }
            // The next write must carry a newer generation than any slot on disk.
            generation = candidates.first?.generation ?? 0
            var chosen = false
            for cp in candidates {
                if let last = lastSeq, cp.position.seq > last + 1 {
                    // Acknowledging records that were never written: not a checkpoint this log wrote.
                    notes.append("checkpoint generation \(cp.generation) (\(cp.position)) lies beyond the last record (seq \(last)) and is ignored")
                    continue
                }
                let (resolved, note) = try resolve(cp.position, segments: segments, directory: directory, fs: fs)
                position = resolved
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
            stats.checkpointRecovery = notes.isEmpty ? nil : notes.joined(separator: "; ")
        }

        // Segments wholly before the checkpoint are acknowledged: a crash came between the checkpoint and their deletion.
        if canAcknowledge {
            let gone = segments.filter { $0.number < position.segment && $0.number != segments.last?.number }
            for segment in gone {
                try fs.remove(directory + "/" + SegmentName.fileName(segment.number))
            }
            if !gone.isEmpty {
                try fs.syncDirectory(directory)
                segments.removeAll { s in gone.contains { $0.number == s.number } }
            }
        }

        let nextSeq = max(lastSeq.map { $0 + 1 } ?? 0, position.seq)
        let tailSegment: UInt64
        if let newest = segments.last {
            tailSegment = newest.number + 1
        } else {
            tailSegment = checkpointExisted ? position.segment + 1 : 0
        }
        let end: LogPosition
        if let newest = segments.last {
            end = LogPosition(segment: newest.number, offset: newest.size, seq: nextSeq)
        } else {
            end = LogPosition(segment: tailSegment, offset: 0, seq: nextSeq)
        }
        if position > end {
            stats.checkpointRecovery = "the checkpoint (\(position)) lies beyond the end of the log (\(end)); delivering again from the oldest segment"
            position = LogPosition(segment: segments.first?.number ?? tailSegment, offset: 0, seq: 0)
        }
        var state = State(nextSeq: nextSeq, tailSegment: tailSegment, segments: segments, written: end, durable: end, checkpoint: position)
        state.stats = stats
        return Opened(state: state, generation: generation, damagedCheckpointSlot: damagedSlot)
    }

    /// Checks that `position` names an existing segment and lands on the record with its seq; if not,
    /// picks the safe place to resume from and says why.
    static func resolve(_ position: LogPosition, segments: [SegmentInfo], directory: String, fs: any FileSystem) throws -> (LogPosition, String?) {
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
        let path = directory + "/" + SegmentName.fileName(position.segment)
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
    static func recordStarts(at position: LogPosition, path: String, fs: any FileSystem) throws -> Bool {
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

    /// Reads a segment and finds its last valid record.
    static func scanSegment(path: String, fs: any FileSystem) throws -> Scan {
        let file = try fs.open(path, .read)
        defer { fs.close(file) }
        let bytes = try fs.readAll(file)
        var scan = Scan(size: UInt64(bytes.count), validEnd: 0, lastSeq: nil)
        bytes.withUnsafeBytes { raw in
            forEachLine(raw) { range, parsed in
                if case .record(let seq, _) = parsed {
                    scan.validEnd = UInt64(range.upperBound + 1)
                    scan.lastSeq = seq
                }
            }
        }
        return scan
    }

    /// Calls `body` for every complete line (ending in `\n`) with its range (without the newline)
    /// and what it holds. An incomplete last line is not reported.
    static func forEachLine(_ raw: UnsafeRawBufferPointer, _ body: (Range<Int>, Frame.Parsed) -> Void) {
        guard let base = raw.baseAddress else { return }
        var start = 0
        while start < raw.count {
            guard let hit = memchr(base + start, 0x0A, raw.count - start) else { return }
            let newline = base.distance(to: UnsafeRawPointer(hit))
            body(start..<newline, Frame.parse(raw, line: start..<newline))
            start = newline + 1
        }
    }
}
