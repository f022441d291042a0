/// A place in the log: a byte offset inside one segment, and the sequence number of the record
/// that starts there (the next record to be read).
///
/// Positions order by segment, then offset. The checkpoint is a position; so is the end of every
/// ``LogBatch``, which is what ``BeaconLog/acknowledge(through:)`` takes.
public struct LogPosition: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The segment number: the 20-digit number in the segment's file name.
    public var segment: UInt64
    /// The byte offset inside the segment where the next record starts.
    public var offset: UInt64
    /// The sequence number of the next record, the first one not covered by this position.
    public var seq: UInt64

    /// The position at byte `offset` of segment `segment`, where record `seq` starts.
    public init(segment: UInt64, offset: UInt64, seq: UInt64) {
        self.segment = segment
        self.offset = offset
        self.seq = seq
    }

    public static func < (lhs: LogPosition, rhs: LogPosition) -> Bool {
        (lhs.segment, lhs.offset) < (rhs.segment, rhs.offset)
    }

    public var description: String { "segment \(segment) offset \(offset) seq \(seq)" }
}
