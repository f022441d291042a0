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

    public init(records: [ArraySlice<UInt8>], seqs: [UInt64], start: LogPosition, end: LogPosition, skippedCorrupt: Int = 0) {
        precondition(records.count == seqs.count, "every record needs its sequence number")
        self.records = records
        self.seqs = seqs
        self.start = start
        self.end = end
        self.skippedCorrupt = skippedCorrupt
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
