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
        /// The highest seq of a valid record: the log goes on after it. Not simply the last one's:
        /// in a damaged segment a lower seq may follow, and the next append must not reuse a seq
        /// that a reader already delivered (nor could the batch that read it be acknowledged).
        var lastSeq: UInt64?
        /// A line that is not a valid record, or bytes after the last line.
        var damaged = false
    }

    static func open(directory: LogDirectory, fs: any FileSystem, canWrite: Bool, canAcknowledge: Bool) throws -> Opened {
        let names = try fs.list(directory)
        var segments: [SegmentInfo] = []
        for number in names.compactMap(SegmentName.parse).sorted() {
            let size = try fs.fileSize(directory.file(SegmentName.fileName(number))) ?? 0
            segments.append(SegmentInfo(number: number, size: size))
        }
        if canAcknowledge, names.contains(Checkpoint.fileName + ".tmp") {
            try fs.remove(directory.file(Checkpoint.fileName + ".tmp"))
        }
        var stats = LogStats()

        // The newest segment: keep every valid record, cut the invalid tail, make it durable.
        var lastSeq: UInt64?
        var newestDamaged = false
        var index = segments.count - 1
        while index >= 0 {
            let path = directory.file(SegmentName.fileName(segments[index].number))
            let scan = try scanSegment(path: path, fs: fs)
            newestDamaged = scan.damaged || scan.size > scan.validEnd
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
        // A rewrite after a failed fsync starts a segment with copies of the previous one's last
        // records; if the rest of it was torn, the previous segment ends higher than it: the log
        // goes on after that, or its batch could never be acknowledged and an append would reuse
        // a seq a reader delivered. Looked at only when the newest segment is damaged, and then
        // only the previous one's tail (64 KiB, more while it holds no record).
        if let newest = lastSeq, newestDamaged, index > 0,
           let previous = try highestSeqNearEnd(path: directory.file(SegmentName.fileName(segments[index - 1].number)), fs: fs) {
            lastSeq = max(newest, previous)
        }

        // The checkpoint.
        let loaded = try loadCheckpoint(segments: segments, lastSeq: lastSeq, directory: directory, fs: fs)
        var position = loaded.position
        stats.checkpointRecovery = loaded.notes

        // Segments wholly before the checkpoint are acknowledged: a crash came between the checkpoint and their deletion.
        if canAcknowledge {
            let gone = segments.filter { $0.number < position.segment && $0.number != segments.last?.number }
            for segment in gone {
                try fs.remove(directory.file(SegmentName.fileName(segment.number)))
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
            tailSegment = loaded.existed ? position.segment + 1 : 0
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
        return Opened(state: state, generation: loaded.generation, damagedCheckpointSlot: loaded.damagedSlot)
    }

    /// Reads a segment and finds its last valid record.
    static func scanSegment(path: LogPath, fs: any FileSystem) throws -> Scan {
        let file = try fs.open(path, .read)
        defer { fs.close(file) }
        let bytes = try fs.readAll(file)
        var scan = Scan(size: UInt64(bytes.count), validEnd: 0, lastSeq: nil)
        bytes.withUnsafeBytes { raw in
            forEachLine(raw) { range, parsed in
                if case .record(let seq, _) = parsed {
                    scan.validEnd = UInt64(range.upperBound + 1)
                    scan.lastSeq = max(scan.lastSeq ?? seq, seq)
                } else {
                    scan.damaged = true
                }
            }
        }
        return scan
    }

    /// The highest seq among the valid records at the end of a segment: its last 64 KiB, four
    /// times more while they hold no valid record.
    static func highestSeqNearEnd(path: LogPath, fs: any FileSystem) throws -> UInt64? {
        let file = try fs.open(path, .read)
        defer { fs.close(file) }
        let size = try fs.size(file)
        var window: UInt64 = 64 * 1024
        while true {
            let start = size > window ? size - window : 0
            var bytes = [UInt8](repeating: 0, count: Int(size - start))
            let n = try bytes.withUnsafeMutableBytes { try fs.read(file, into: $0, at: start) }
            bytes.removeLast(bytes.count - n)
            var highest: UInt64?
            bytes.withUnsafeBytes { raw in
                // From inside the file the first line may be cut: only lines after its first newline count.
                let from = start == 0 ? 0 : (raw.firstIndex(of: 0x0A).map { $0 + 1 } ?? raw.count)
                forEachLine(UnsafeRawBufferPointer(rebasing: raw[from...])) { _, parsed in
                    if case .record(let seq, _) = parsed { highest = max(highest ?? seq, seq) }
                }
            }
            if highest != nil || start == 0 { return highest }
            window *= 4
        }
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
