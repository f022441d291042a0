/// Counters and sizes of a log, as seen by this `BeaconLog` instance.
///
/// Counters named "this session" start at zero when the log is opened; the loss counters
/// (`dropped`, `refused`, `skippedCorrupt`) are kept on disk and count since the directory was
/// created; the rest describe the directory now.
public struct LogStats: Sendable, Equatable {
    /// Records appended through this instance (this session).
    public var appendedRecords: UInt64 = 0
    /// Event bytes appended through this instance (this session).
    public var appendedBytes: UInt64 = 0
    /// Records appended this session that are durable (fsynced).
    public var durableRecords: UInt64 = 0
    /// Records acknowledged through this instance (this session).
    public var acknowledgedRecords: UInt64 = 0
    /// Records between the checkpoint and the end of the log (corrupt or dropped ones may make this an upper bound).
    public var pendingRecords: UInt64 = 0
    /// Bytes on disk between the checkpoint and the end of the log, framing included.
    public var pendingBytes: UInt64 = 0
    /// Number of segment files.
    public var segments: Int = 0
    /// Bytes of the records in segment files, framing included: what the quota
    /// (``BeaconLog/Configuration/maxBytes``) counts. The open segment's preallocated space is not
    /// counted (see ``BeaconLog/Configuration/segmentBytes``): the files may take up to one
    /// `segmentBytes` more. Seen from another process than the writer, the open segment counts
    /// with its preallocated size until it is sealed.
    public var diskBytes: UInt64 = 0
    /// Records removed without delivery, by reason (``DropReason/quotaDeleted``), since the
    /// directory was created: kept in `writer.counters` (saved within a second of a change and on
    /// close).
    public var dropped: [DropReason: UInt64] = [:]
    /// Records refused by append, by reason (``RefusalReason``: `.invalidRecord`,
    /// `.recordTooLarge`, `.quotaExceeded`, `.diskFull`), since the directory was created (kept in
    /// `writer.counters`).
    public var refused: [RefusalReason: UInt64] = [:]
    /// Corrupt records passed over while reading (bad checksum, broken line, damaged sequence
    /// number), since the directory was created (kept in `reader.counters`).
    public var skippedCorrupt: UInt64 = 0
    /// `skippedCorrupt` by reason (``CorruptionReason``: `.checksum`, `.malformed`, `.zeros`,
    /// `.tornTail`, `.seqDigits`). Kept with `skippedCorrupt` in `reader.counters`.
    public var skippedCorruptByReason: [CorruptionReason: UInt64] = [:]
    /// Bytes removed from the tail of the newest segment when the log was opened: a torn record,
    /// garbage, and zeros, including the unfilled preallocated space a writer that did not close
    /// leaves (up to ``BeaconLog/Configuration/segmentBytes`` of zeros; not records, not counted
    /// as corrupt).
    public var truncatedBytes: UInt64 = 0
    /// What the checkpoint recovery did when the log was opened, if it was not clean (else nil).
    public var checkpointRecovery: String?
    /// The sequence number the next appended record will get.
    public var nextSeq: UInt64 = 0
    /// The sequence number of the last acknowledged record, or nil if none was ever acknowledged.
    public var acknowledgedSeq: UInt64?
    /// The sequence number of the last durable record, or nil if none.
    public var durableSeq: UInt64?
    /// The last error the log ran into, for diagnostics.
    public var lastError: String?

    /// All counters zero: a log that has done nothing.
    public init() {}
}
