import Glibc

/// What went wrong in the log, on which file, why, and what to do about it.
///
/// ```swift
/// do { try log.append(record) } catch let error as BeaconLogError where error.code == .diskFull {
///     // error.keptSeqs: appended anyway, kept in memory; error.cause: the system call and errno
/// }
/// ```
///
/// Compare ``code`` with the static codes; the set of codes may grow, so keep a default case.
/// ``message`` says what failed and what to do; ``cause`` names the system call and `errno`
/// behind an I/O failure.
public struct BeaconLogError: Error, Sendable, CustomStringConvertible {
    /// The kind of failure. Only the library makes codes; the set may grow.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Kind: String, Sendable {
            case locked, diskFull, quotaExceeded, recordTooLarge, invalidRecord, permissionDenied
            case io, failed, closed, invalidArgument, corrupt, linkedFile, unsafeDirectory
        }

        private let kind: Kind
        private init(_ kind: Kind) { self.kind = kind }

        /// A stable identifier without spaces, for metric labels: `"diskFull"`.
        public var name: String { kind.rawValue }
        public var description: String { name }

        /// Another process (or another `BeaconLog` in this one) holds the directory's writer or reader lock.
        public static let locked = Code(.locked)
        /// The file system is full (`ENOSPC`, `EDQUOT`). Appended records are kept in memory and
        /// written when space frees.
        public static let diskFull = Code(.diskFull)
        /// The log's disk quota (`maxBytes`) is reached and the quota policy is `.rejectNew`.
        public static let quotaExceeded = Code(.quotaExceeded)
        /// A record is larger than `maxRecordBytes`.
        public static let recordTooLarge = Code(.recordTooLarge)
        /// A record is empty or contains a raw newline, which would break the framing.
        public static let invalidRecord = Code(.invalidRecord)
        /// A system call was refused for lack of permission (`EACCES`, `EPERM`).
        public static let permissionDenied = Code(.permissionDenied)
        /// A system call failed (`EIO` and others).
        public static let io = Code(.io)
        /// An fsync failed earlier; the log refuses further work until it is reopened.
        public static let failed = Code(.failed)
        /// The log was closed.
        public static let closed = Code(.closed)
        /// The call does not fit how the log was opened or its state (for example acknowledging
        /// backwards), or a configuration value is out of range.
        public static let invalidArgument = Code(.invalidArgument)
        /// A file of the log could not be understood.
        public static let corrupt = Code(.corrupt)
        /// A symbolic link (or a second hard link) was found in place of a file of the log
        /// directory, or the directory's own path is a symbolic link. Beacon never writes through
        /// a link: remove it, and check who can write the directory.
        public static let linkedFile = Code(.linkedFile)
        /// The log directory can be written by users other than this process's (its mode or
        /// owner), who could replace its files; the message names the command that fixes it
        /// (`chmod 700 DIR`). See ``BeaconLog/Configuration/sharing``.
        public static let unsafeDirectory = Code(.unsafeDirectory)
    }

    /// A system call that failed: which, with which `errno`, on which path.
    public struct SystemCallError: Error, Sendable, Hashable, CustomStringConvertible {
        /// The system call, as its manual page names it: `"fdatasync"`, `"open"`.
        public var systemCall: String
        /// The `errno` it left.
        public var errno: Int32
        /// The file or directory it was called on.
        public var path: String?

        /// The failure of `systemCall` with `errno`, on `path` when it had one.
        public init(systemCall: String, errno: Int32, path: String?) {
            self.systemCall = systemCall
            self.errno = errno
            self.path = path
        }

        public var description: String {
            "\(systemCall)(\(path ?? "")) failed with errno \(errno) (\(String(cString: strerror(errno))))"
        }
    }

    /// The kind of failure.
    public var code: Code
    /// A sentence for people: what failed and what to do.
    public var message: String
    /// The file or directory concerned, if any.
    public var path: String?
    /// The system call behind the failure, if one failed.
    public var cause: SystemCallError?
    /// For `.locked`: the process id written in the lock file by the holder, if known.
    public var lockHolderPID: Int32?
    /// For an append that failed while writing (`.diskFull`, `.io`): the sequence numbers it
    /// appended anyway. They are kept in memory and written when the disk accepts them; do not
    /// append those records again. Nil when the call appended nothing.
    public var keptSeqs: Range<UInt64>?
    /// What failed, without the advice about records kept in memory that ``message`` adds for a
    /// process that keeps the log open: for a caller about to exit, where that advice is untrue.
    package var failure: String?

    /// The `errno` of the failed system call, if any (``cause``'s).
    public var errno: Int32? { cause?.errno }

    /// An error with `code`, `message` and, for an I/O failure, the system call that caused it.
    public init(_ code: Code, _ message: String, path: String? = nil, cause: SystemCallError? = nil, lockHolderPID: Int32? = nil) {
        self.code = code
        self.message = message
        self.path = path ?? cause?.path
        self.cause = cause
        self.lockHolderPID = lockHolderPID
    }

    public var description: String {
        var text = "BeaconLog error (\(code)): \(message)"
        if let path { text += " [\(path)]" }
        if let cause { text += " (\(cause.systemCall): errno \(cause.errno): \(String(cString: strerror(cause.errno))))" }
        return text
    }

    /// This error with `advice` (what to do, as the caller knows it) added to its message.
    package func advising(_ advice: String) -> BeaconLogError {
        var advised = self
        advised.message += "; " + advice
        return advised
    }
}
