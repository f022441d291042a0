import Glibc

extension BeaconLog {
    /// The two `flock` locks of a log directory.
    public enum LockKind: String, Sendable {
        /// `writer.lock`: held by the one instance that appends.
        case writer
        /// `reader.lock`: held by the one instance that reads and acknowledges (the uploader).
        case reader
    }

    /// The pid of the process holding `kind`'s lock on `directory`, or nil when it is free.
    ///
    /// Probes the lock with `flock(LOCK_EX | LOCK_NB)` on a separate open file description and
    /// releases it at once; the pid is the one the holder wrote into the lock file. A holder that
    /// wrote no pid is reported as pid 0.
    public static func lockHolder(_ kind: LockKind, directory: String) -> Int32? {
        let fs = SystemFileSystem()
        let path = LogDirectory(directory).file(kind.rawValue + ".lock")
        guard (try? fs.fileSize(path)) ?? nil != nil, let file = try? fs.open(path, .read) else { return nil }
        defer { fs.close(file) }
        if (try? fs.tryLock(file)) == true { return nil }
        return DirectoryLock.readPID(file, fileSystem: fs) ?? 0
    }

    /// Reads every record of every segment and the checkpoint, taking no lock, and lists each
    /// problem with its file, byte offset and reason. A clean log has no problems.
    ///
    /// Checks each record's framing and CRC-32C, that sequence numbers increase by one, and that
    /// the checkpoint has a valid slot naming an existing segment and a record boundary. An
    /// incomplete last line of the newest segment is reported too (a torn write, or a write in
    /// progress by a live writer). Zeros after a segment's last line are not: they are space a
    /// writer preallocated (see ``Configuration/segmentBytes``), the end of the segment's records.
    public static func verify(directory: String) throws -> VerifyReport {
        let fs = SystemFileSystem()
        let path = directory
        let directory = LogDirectory(path)
        do {
            _ = try fs.status(directory)
        } catch let error as BeaconLogError where error.errno == ENOENT {
            throw BeaconLogError(.invalidArgument, "there is no log directory here; check the path", path: path)
        }
        let numbers = try fs.list(directory).compactMap(SegmentName.parse).sorted()
        var problems: [VerifyReport.Problem] = []
        var records = 0
        var previousSeq: UInt64?
        var badSincePrevious: UInt64 = 0
        var segments: [SegmentInfo] = []
        for (index, number) in numbers.enumerated() {
            let name = SegmentName.fileName(number)
            guard let file = try? fs.open(directory.file(name), .read) else { continue }
            defer { fs.close(file) }
            var bytes = try fs.readAll(file)
            segments.append(SegmentInfo(number: number, size: UInt64(bytes.count)))
            var end = 0
            // A segment may start with copies of the previous one's last records: a rewrite after a
            // failed fsync. They go back, then count up to where the previous segment ended.
            var copyRun: UInt64? = index > 0 ? 0 : nil
            bytes.withUnsafeBytes { raw in
                Recovery.forEachLine(raw) { range, parsed in
                    end = range.upperBound + 1
                    switch parsed {
                    case .record(let seq, _):
                        records += 1
                        if let run = copyRun, let previousSeq, seq <= previousSeq, run == 0 || seq == run + 1 {
                            copyRun = seq
                            return
                        }
                        copyRun = nil
                        // A gap no longer than the bad records just reported is explained by them.
                        if let previousSeq, seq != previousSeq + 1, !(seq > previousSeq && seq - previousSeq - 1 <= badSincePrevious) {
                            let what = seq <= previousSeq ? "repeats or goes back from" : "skips ahead from"
                            problems.append(.init(file: name, offset: UInt64(range.lowerBound), reason: "seq \(seq) \(what) \(previousSeq) (records \(previousSeq + 1)..<\(seq) are missing or were rewritten)"))
                        }
                        previousSeq = seq
                        badSincePrevious = 0
                    case .corrupt(let reason, _):
                        problems.append(.init(file: name, offset: UInt64(range.lowerBound), reason: reason))
                        badSincePrevious += 1
                    }
                }
            }
            let newest = index == numbers.count - 1
            // Zeros after the last line are a writer's preallocated space, where the next records
            // go (in a sealed segment: a cut the writer could not make durable), not a problem.
            bytes.removeSubrange(max(end, (bytes.lastIndex { $0 != 0 } ?? -1) + 1)...)
            if end < bytes.count {
                let tail = bytes[end...]
                let what = "an incomplete record of \(tail.count) bytes"
                badSincePrevious += 1
                problems.append(.init(file: name, offset: UInt64(end), reason: "\(what) at the end (\(newest ? "a torn write, or a write in progress; the next writer cuts it off" : "a torn write in a sealed segment"))"))
            }
        }
        let checkpoint = try verifyCheckpoint(directory: directory, fs: fs, segments: segments, problems: &problems)
        return VerifyReport(problems: problems, records: records, segments: numbers.count, checkpoint: checkpoint)
    }

    /// The start of the oldest segment still on disk: read from here to see acknowledged records
    /// that have not been deleted yet (`beacon cat --all`).
    public var oldestPosition: LogPosition {
        state.withLock { s in
            LogPosition(segment: s.segments.first?.number ?? s.tailSegment, offset: 0, seq: 0)
        }
    }
}

/// The result of ``BeaconLog/verify(directory:)``.
public struct VerifyReport: Sendable {
    /// One problem found in the directory.
    public struct Problem: Sendable, CustomStringConvertible {
        /// The file concerned (a segment or `checkpoint`).
        public var file: String
        /// The byte offset in that file, if the problem has one.
        public var offset: UInt64?
        /// What is wrong, in words.
        public var reason: String

        /// A problem in `file` (at byte `offset`, when it has one), described by `reason`.
        public init(file: String, offset: UInt64?, reason: String) {
            self.file = file
            self.offset = offset
            self.reason = reason
        }

        public var description: String {
            if let offset { return "\(file) at byte \(offset): \(reason)" }
            return "\(file): \(reason)"
        }
    }

    /// Every problem, in file order.
    public var problems: [Problem]
    /// Valid records seen.
    public var records: Int
    /// Segment files seen.
    public var segments: Int
    /// The checkpoint as read, if it was valid.
    public var checkpoint: LogPosition?

    /// A report of what a verification found.
    public init(problems: [Problem], records: Int, segments: Int, checkpoint: LogPosition?) {
        self.problems = problems
        self.records = records
        self.segments = segments
        self.checkpoint = checkpoint
    }

    /// True when no problem was found.
    public var isClean: Bool { problems.isEmpty }
}
