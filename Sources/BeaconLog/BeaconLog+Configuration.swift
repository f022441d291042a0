extension BeaconLog {
    /// When an appended record becomes durable (fsynced). See the Guarantees article (durability modes) for loss windows.
    public enum Durability: Sendable, Equatable {
        /// Every `append` returns only after its record is fsynced. Concurrent appends share one fsync.
        case everyRecord
        /// Group commit: one `write` and one fsync per `records` appends or per `interval`, whichever
        /// comes first. A power loss can lose at most that window; a process crash loses only records
        /// not yet written (at most the same window).
        case batched(records: Int, interval: Duration)
        /// No fsync while appending: bytes are written when 64 KiB are buffered or every 10 ms, and
        /// fsynced on segment roll, `sync()` and `close()`.
        case none

        /// 100 records or 10 ms, whichever comes first.
        public static let `default` = Durability.batched(records: 100, interval: .milliseconds(10))
    }

    /// What happens when the log's files would exceed `maxBytes`.
    public enum QuotaPolicy: Sendable, Equatable {
        /// Delete the oldest segment (pending records in it are counted as dropped, ``DropReason/quotaDeleted``).
        case dropOldest
        /// Refuse new records with `BeaconLogError.Code.quotaExceeded` (counted as refused).
        case rejectNew
    }

    /// What this instance may do, and which `flock` locks it takes.
    public enum Access: Sendable, Equatable {
        /// Append, read and acknowledge: takes `writer.lock` and `reader.lock`.
        case readWrite
        /// Append only: takes `writer.lock`; another process may read and acknowledge.
        case write
        /// Read and acknowledge only: takes `reader.lock`; another process may append.
        case read
        /// Read without acknowledging, taking no lock (inspection tools).
        case readOnly
    }

    /// How to open a log. Every property has a documented default.
    public struct Configuration: Sendable {
        /// The log directory. Created (mode 0700) if missing.
        public var directory: String
        /// Which locks to take and what the instance may do. Default `.readWrite`.
        public var access: Access = .readWrite
        /// When appended records become durable. Default: 100 records or 10 ms.
        public var durability: Durability = .default
        /// A segment is sealed and a new one started once it would grow past this size. Default 8 MiB.
        ///
        /// Under `.everyRecord` and `.batched` durability a segment of 64 KiB or more is preallocated to this size
        /// (`fallocate`: zeros after the last record, so an fsync need not record a new size); the
        /// zeros are cut when the segment is sealed or the log closed, and by the next open after a crash.
        public var segmentBytes: Int = 8 << 20
        /// The most disk space the segments' records may use. Default 256 MiB. The open segment's
        /// preallocated space is not counted: the files may take up to `segmentBytes` more.
        public var maxBytes: Int64 = 256 << 20
        /// How long an acknowledgement may leave the checkpoint in the page cache before it is made
        /// durable (`fdatasync`). Default 1 s; nil makes every acknowledgement durable before
        /// ``BeaconLog/acknowledge(through:)`` returns.
        ///
        /// Every acknowledgement writes the checkpoint at once, so a process crash (`kill -9`)
        /// loses none: the page cache keeps it. Only a power loss may take the ones of the last
        /// interval back, and then their records are delivered again (at least once), never lost.
        /// The fdatasync made at most once per interval costs a commit's CPU (hundreds of
        /// microseconds on a VM) once a second instead of once per request. Segments are deleted
        /// only after the checkpoint that passed them is durable, and `close()` makes it durable.
        /// A `.read` instance (another process writes) makes each acknowledgement durable.
        public var checkpointSyncInterval: Duration? = .seconds(1)
        /// What to do when `maxBytes` is reached. Default `.dropOldest`.
        public var quotaPolicy: QuotaPolicy = .dropOldest
        /// The largest record `append` accepts, in bytes of event JSON. Default 1 MiB.
        public var maxRecordBytes: Int = 1 << 20
        /// Called after the quota (`.dropOldest`) deleted pending records, with how many, on the
        /// thread that appended (keep it short; appending from it deadlocks). Records a
        /// reader already had in flight count here too; an acknowledgement that later covers them
        /// takes them back out of ``LogStats/dropped``. Default nil.
        public var onDropped: (@Sendable (_ records: UInt64) -> Void)?
        /// Who besides this process's user may write the log directory. Default `.owner`: the
        /// directory must belong to this process's effective user and neither its group nor
        /// others may write it, or opening throws ``BeaconLogError/Code/unsafeDirectory`` naming
        /// the fix (`chmod 700 DIR`). `.group` allows a directory its group may write (mode 0770
        /// or 2770), owned by any user, for a volume shared with a group. See ``DirectorySharing``.
        public var sharing: DirectorySharing = .owner
        /// The file-operation seam; tests replace it to inject failures.
        package var fileSystem: any FileSystem = SystemFileSystem()

        /// The configuration of a log in `directory`, every other setting at its default.
        public init(directory: String) {
            self.directory = directory
        }
    }
}
