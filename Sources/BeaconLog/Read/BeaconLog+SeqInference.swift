extension BeaconLog {
    /// Whether a record with `seq` may follow `last` in the same segment, where seqs normally go up by
    /// one. Going back is never plausible there. A jump ahead is (records in between were corrupt) when
    /// the record after it continues from `seq`, or there is none yet; if the record after it
    /// continues from `last` instead, `seq`'s digits were damaged.
    func plausibleJump(to seq: UInt64, after last: UInt64, next: LogPosition, limit: UInt64, io: inout ReaderIO) throws -> Bool {
        if seq <= last { return false }
        guard next.offset < limit, let (cache, line) = try line(at: next, limit: limit, io: &io) else {
            // The last record of its segment: the next segment's first record tells. If it lies in
            // (last, seq], the log continues from before `seq`, so `seq`'s digits were damaged.
            guard let following = try segment(after: next.segment, io: &io),
                  let nextFirst = try? firstSeq(ofSegment: following) else { return true }
            return !(nextFirst > last && nextFirst <= seq)
        }
        guard case .record(let following, _) = cache.bytes.withUnsafeBytes({ Frame.parse($0, line: line) }) else { return true }
        return following > seq || following <= last
    }

    /// Whether a segment's first record, whose `seq` is not the `expected` one, has genuine seq
    /// digits, judged by the records after it (it ends at `next`): genuine when the next one
    /// continues from it, or the one after that does (the next one is the damaged one); damaged
    /// when the next ones continue from `expected` instead. With nothing to compare, taken as is.
    func seqContinues(from seq: UInt64, expected: UInt64, next: LogPosition, limit: UInt64, io: inout ReaderIO) throws -> Bool {
        guard let (following, afterFollowing) = try seqOfRecord(at: next, limit: limit, io: &io) else { return true }
        if following == seq + 1 { return true }
        if following == expected + 1 { return false }
        guard let (after, _) = try seqOfRecord(at: afterFollowing, limit: limit, io: &io) else { return true }
        if after == seq + 2 { return true }
        return after != following + 1
    }

    /// The seq of the valid record starting at `position` and the position after it; nil if there
    /// is none (yet) or it is corrupt.
    func seqOfRecord(at position: LogPosition, limit: UInt64, io: inout ReaderIO) throws -> (UInt64, LogPosition)? {
        guard position.offset < limit, let (cache, line) = try line(at: position, limit: limit, io: &io),
              case .record(let seq, _) = cache.bytes.withUnsafeBytes({ Frame.parse($0, line: line) }) else { return nil }
        return (seq, LogPosition(segment: position.segment, offset: cache.start + UInt64(line.upperBound) + 1, seq: position.seq))
    }
}
