/// A contiguous run of records read from the log, in append order.
///
/// `records` holds the bytes of each record's event JSON exactly as they were appended: no
/// parsing, no copy beyond the read itself. Acknowledge the batch with
/// `log.acknowledge(through: batch.end)` once it has been delivered.
public struct LogBatch: Sendable {
    /// The event bytes of each record, in order.
    public var records: [ArraySlice<UInt8>]
    /// The sequence number of each record, parallel to `records`.
    public var seqs: [UInt64]
    /// Where this batch starts: the position it was read from.
    public var start: LogPosition
    /// The position just after the last record: pass it to ``BeaconLog/acknowledge(through:)``.
    public var end: LogPosition
    /// Corrupt records (bad checksum, broken line) that were passed over while reading this batch.
    public var skippedCorrupt: Int
    /// The position just after each record, parallel to `records` (see ``end(after:)``).
    public var recordEnds: [LogPosition]
    /// Each record's CRC-32C as checked by the read (empty for a batch made otherwise): what the
    /// uploader's idempotency key hashes, so that the bytes are not passed over again.
    package var crcs: [UInt32] = []

    /// A batch; `recordEnds` defaults to `end` for the last record only being known, which is what
    /// a batch built by hand (tests, an in-memory source) usually has.
    public init(records: [ArraySlice<UInt8>], seqs: [UInt64], start: LogPosition, end: LogPosition, skippedCorrupt: Int = 0, recordEnds: [LogPosition]? = nil) {
        precondition(records.count == seqs.count, "every record needs its sequence number")
        self.records = records
        self.seqs = seqs
        self.start = start
        self.end = end
        self.skippedCorrupt = skippedCorrupt
        self.recordEnds = recordEnds ?? seqs.map { LogPosition(segment: end.segment, offset: end.offset, seq: $0 + 1) }
        precondition(self.recordEnds.count == records.count, "every record needs its end position")
    }

    /// The position just after record `index`: acknowledge through it to acknowledge the first
    /// `index + 1` records only (a batch a collector took in part, or split in two).
    public func end(after index: Int) -> LogPosition {
        index == records.count - 1 ? end : recordEnds[index]
    }

    /// True when no record was pending.
    public var isEmpty: Bool { records.isEmpty }
    /// The number of records.
    public var count: Int { records.count }
    /// The sequence number of the first record, if any.
    public var firstSeq: UInt64? { seqs.first }
    /// The sequence number of the last record, if any.
    public var lastSeq: UInt64? { seqs.last }
    /// The total size of the records' event bytes.
    public var byteCount: Int { records.reduce(0) { $0 + $1.count } }
}
