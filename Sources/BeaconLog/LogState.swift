/// A segment file on disk.
struct SegmentInfo: Sendable {
    var number: UInt64
    /// Bytes of valid data in the file (the written size for the segment being appended to).
    var size: UInt64
}

/// Framed records waiting to be written, all destined for one segment.
///
/// Usually whole frames. An aligned write (see ``BeaconLog/holdBack(_:io:state:)``) splits one:
/// the written part may end inside a frame (`partialBytes` of it) and the part held back starts
/// with that frame's rest. A chunk's records are the frames that end in it, `firstSeq` the first
/// of them, `lastSeq` the last.
struct Chunk: Sendable {
    var segment: UInt64
    var bytes: FrameBuffer
    var firstSeq: UInt64
    var lastSeq: UInt64
    var records: Int = 0
    /// Bytes at the end that begin a frame ending in the next chunk (0: the chunk ends with a frame).
    var partialBytes = 0
}

/// The shared state of a log, behind `BeaconLog.state`. Never held across a system call that waits.
struct State: Sendable {
    var closed = false
    /// Set when an fsync failed and the unsynced bytes could not be rewritten: every call reports it.
    var failure: BeaconLogError?
    /// The last write failure (disk full); its chunks are kept in `chunks` and retried.
    var writeError: BeaconLogError?
    var nextSeq: UInt64
    /// Frames appended but not yet written, oldest first.
    var chunks: [Chunk] = []
    var bufferedBytes = 0
    var bufferedRecords = 0
    /// The segment new frames go into, and its size counting buffered frames.
    var tailSegment: UInt64
    var tailSize: UInt64 = 0
    /// Segment files on disk, ascending.
    var segments: [SegmentInfo]
    var diskBytes: UInt64 { segments.reduce(0) { $0 + $1.size } }
    /// End of the data written to files (readable).
    var written: LogPosition
    /// End of the data known to be fsynced.
    var durable: LogPosition
    var checkpoint: LogPosition
    /// The furthest batch end `read` returned: without the writer's state, a reader acknowledges
    /// no further than what it has read.
    var readEnd: LogPosition?
    /// The first seq a quota drop left on disk: records before it are gone even when another
    /// process owns the checkpoint (a `.write` instance cannot move it).
    var droppedBefore: UInt64 = 0
    /// The seq after the last record `read` returned in this instance.
    var readThrough: UInt64 = 0
    /// Records a quota drop deleted after they were read: counted as dropped, but an
    /// acknowledgement covering them (they were delivered from the batch in flight) takes them
    /// back out of `dropped`. A read from the checkpoint gives them up.
    var droppedButRead: Range<UInt64>?
    /// The seqs a `.read` instance read from each segment, not yet acknowledged: an
    /// acknowledgement that finds one of those segments deleted by another process's quota counts
    /// its records in `deliveredAfterDrop`.
    var readRuns: [(segment: UInt64, seqs: Range<UInt64>)] = []
    /// Records the writer process's quota counted as dropped that this reader delivered after all
    /// (read before the drop, acknowledged after it). Persisted in `reader.counters`.
    var deliveredAfterDrop: UInt64 = 0
    /// Records the writer process's quota counted as dropped that a sender had sent without
    /// recording the answer (see ``DropReason/quotaInDoubt``). Persisted in `reader.counters`.
    var inDoubtAfterDrop: UInt64 = 0
    /// The seq below which every record a quota deleted has been settled (taken back as delivered
    /// or moved to in doubt): settling again after a crash counts nothing twice. Persisted in
    /// `reader.counters`.
    var dropSettledThrough: UInt64 = 0
    var flushScheduled = false
    /// The furthest position at which a corrupt record was counted, so re-reading does not count it twice.
    var corruptCountedThrough: LogPosition?
    var stats = LogStats()
    /// Loss counters changed since they were last saved (see `PersistedCounters`).
    var countersDirty = false
    /// Emptied buffers of durable chunks, reused for new chunks (see `recycle`).
    var spare: [FrameBuffer] = []
    var spareBytes = 0
    var countersSaveScheduled = false
}

/// The writer's side: the open tail segment. Behind `BeaconLog.writerIO`, which serialises commits.
struct WriterIO: Sendable {
    var file: LogFile?
    var fileSegment: UInt64 = 0
    var fileSize: UInt64 = 0
    /// Chunks written to `file` since its last successful fsync: rewritten elsewhere if that fsync fails.
    var unsynced: [Chunk] = []
    /// `file` was preallocated: its size on disk runs past `fileSize` with zeros (cut when sealed).
    var preallocated = false
    /// The preallocated tail was cut and that size is not durable yet: the seal fsyncs it even with
    /// nothing unsynced, so a sealed segment never ends in zeros after a power loss.
    var cutUnsynced = false
    /// Where the writeback started under `.none` has reached in `file` (see `startWriteback`).
    var writebackStarted: UInt64 = 0
    /// The file system refused `fallocate` (`EOPNOTSUPP`): segments are written without it.
    var preallocationUnsupported = false
}

/// The checkpoint's writer: the file and its last generation. Behind `BeaconLog.checkpointIO`, so
/// that a checkpoint's fdatasync does not hold the reader lock (reads go on meanwhile).
struct CheckpointIO: Sendable {
    /// The newest generation written.
    var generation: UInt64
    /// Write the next checkpoint as a whole new file (a slot was damaged), not in place.
    var replaceCheckpointFile = false
    var checkpointFile: LogFile?
    /// The newest generation known to be durable. Every write goes to the other slot, so the
    /// durable one is never overwritten before a newer one is durable (see
    /// `Configuration.checkpointSyncInterval`).
    var durableGeneration: UInt64 = 0
    /// When the checkpoint was last made durable (`monotonicNanoseconds()`).
    var lastSync: UInt64 = 0
    /// A sync of a lazily written checkpoint is scheduled on the timer.
    var syncScheduled = false
}

/// The reader's side: the open segments and a read-ahead cache. Behind `BeaconLog.readerIO`.
struct ReaderIO: Sendable {
    /// The segment being read.
    var readFile: SegmentFile?
    /// Segments a `.read` instance read records from and moved off, kept open so that the next
    /// acknowledgement can fsync them without opening them again (at most `keptForSyncLimit`).
    var keptForSync: [SegmentFile] = []
    /// How far this `.read` instance has fsynced what it read: the next acknowledgement syncs only
    /// the segments from here to its position. Nil: nothing yet (the checkpoint is the start).
    var syncedThrough: LogPosition?
    /// The descriptors an acknowledgement is fsyncing without the reader lock (see
    /// `BeaconLog.syncRead`): a read that moves off one of them leaves closing it to the
    /// acknowledgement (``closeAfterSync``), so the fsync never meets a closed descriptor.
    var syncing: [LogFile] = []
    /// Descriptors closed while an acknowledgement fsyncs them: it closes them when done.
    var closeAfterSync: [LogFile] = []
    /// A segment listed in `State.segments` was gone when opened (another process deleted it):
    /// list the directory again before trusting that list to find the next segment.
    var segmentsStale = false
    var cache: ReadCache?
}

/// An open segment file of the reader.
struct SegmentFile: Sendable {
    var segment: UInt64
    var file: LogFile
    /// The file's size when last looked at (another process appends to it), nil before.
    var size: UInt64?
}

/// Bytes of one segment starting at `start`, read ahead. Batches slice into `bytes` without copying.
struct ReadCache: Sendable {
    var segment: UInt64
    var start: UInt64
    var bytes: [UInt8]
}
