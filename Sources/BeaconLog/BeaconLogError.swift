import Glibc

/// What went wrong in the log, on which file, and what to do about it.
///
/// Compare `error.code` with the static codes; the set of codes may grow, so keep a default case.
public struct BeaconLogError: Error, Sendable, CustomStringConvertible {
    /// An extensible error code.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let name: String
        public init(_ name: String) { self.name = name }
        public var description: String { name }

        /// Another process (or another `BeaconLog` in this one) holds the directory's writer or reader lock.
        public static let locked = Code("locked")
        /// The file system is full (`ENOSPC`). Appended records are kept in memory and written when space frees.
        public static let diskFull = Code("diskFull")
        /// The log's disk quota (`maxBytes`) is reached and the quota policy is `.rejectNew`.
        public static let quotaExceeded = Code("quotaExceeded")
        /// A record is larger than `maxRecordBytes`.
        public static let recordTooLarge = Code("recordTooLarge")
        /// A record is empty or contains a raw newline, which would break the framing.
        public static let invalidRecord = Code("invalidRecord")
        /// A system call failed (`EIO` and others).
        public static let io = Code("io")
        /// An fsync failed earlier; the log refuses further work until it is reopened.
        public static let failed = Code("failed")
        /// The log was closed.
        public static let closed = Code("closed")
        /// The call does not fit how the log was opened or its state (for example acknowledging backwards).
        public static let invalidArgument = Code("invalidArgument")
        /// A file of the log could not be understood.
        public static let corrupt = Code("corrupt")
    }

    /// The kind of failure.
    public var code: Code
    /// A sentence for people: what failed and what to do.
    public var message: String
    /// The file or directory concerned, if any.
    public var path: String?
    /// The `errno` of the failed system call, if any.
    public var errno: Int32?
    /// For `.locked`: the process id written in the lock file by the holder, if known.
    public var lockHolderPID: Int32?
    /// For an append that failed while writing (`.diskFull`, `.io`): the sequence numbers it
    /// appended anyway. They are kept in memory and written when the disk accepts them; do not
    /// append those records again. Nil when the call appended nothing.
    public var keptSeqs: Range<UInt64>?
    /// What failed, without the advice about records kept in memory that ``message`` adds for a
    /// process that keeps the log open: for a caller about to exit, where that advice is untrue.
    package var cause: String?

    public init(_ code: Code, _ message: String, path: String? = nil, errno: Int32? = nil, lockHolderPID: Int32? = nil) {
        self.code = code
        self.message = message
        self.path = path
        self.errno = errno
        self.lockHolderPID = lockHolderPID
    }

    public var description: String {
        var text = "BeaconLog error (\(code)): \(message)"
        if let path { text += " [\(path)]" }
        if let errno { text += " (errno \(errno): \(String(cString: strerror(errno))))" }
        return text
    }
}
