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
    /// releases it at once; the pid is the one the holder wrote into the lock file.
    public static func lockHolder(_ kind: LockKind, directory: String) -> Int32? { fatalError("not yet") }

    /// Reads every record of every segment and the checkpoint, taking no lock, and lists each
    /// problem with its file, byte offset and reason. A clean log has no problems.
    public static func verify(directory: String) throws -> VerifyReport { fatalError("not yet") }

    /// The start of the oldest segment still on disk: read from here to see acknowledged records
    /// that have not been deleted yet (`beacon cat --all`).
    public var oldestPosition: LogPosition { fatalError("not yet") }
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

    public init(problems: [Problem], records: Int, segments: Int, checkpoint: LogPosition?) {
        self.problems = problems
        self.records = records
        self.segments = segments
        self.checkpoint = checkpoint
    }

    /// True when no problem was found.
    public var isClean: Bool { problems.isEmpty }
}
