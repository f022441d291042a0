import Glibc

extension BeaconLog {
    /// Bytes buffered under `.none` before they are written.
    static let writeThreshold = 64 * 1024

    /// Appends one record, the UTF-8 bytes of one JSON value, and returns its sequence number.
    ///
    /// The record must not be empty, must not contain a raw newline and must not be larger than
    /// `maxRecordBytes`. It is durable when this returns under `.everyRecord`, and at the next group
    /// commit otherwise (see ``sync()``). The frame is copied into a user-space buffer; one
    /// `write(2)` per group commit puts the buffer in the segment.
    ///
    /// A `.diskFull` or `.io` error with ``BeaconLogError/keptSeqs`` set means the record was
    /// appended but its write failed: it is kept in memory and written when the disk accepts it
    /// (do not append it again). Without `keptSeqs` the record was not appended.
    @discardableResult
    public func append(_ record: some Collection<UInt8>) throws -> UInt64 {
        if let result = try record.withContiguousStorageIfAvailable({ try appendOne(UnsafeRawBufferPointer($0)) }) {
            return result
        }
        let copy = Array(record)
        return try copy.withUnsafeBytes { try appendOne($0) }
    }

    /// Appends one record given as bytes (the common case, without generic dispatch).
    @discardableResult
    public func append(_ record: [UInt8]) throws -> UInt64 {
        try record.withUnsafeBytes { try appendOne($0) }
    }

    /// Appends one record given as a JSON string.
    @discardableResult
    public func append(_ record: String) throws -> UInt64 {
        var record = record
        return try record.withUTF8 { try appendOne(UnsafeRawBufferPointer($0)) }
    }

    /// Appends several records in order with at most one group commit; returns their sequence numbers.
    ///
    /// Either every record is accepted or none is (an invalid record is reported before any is written).
    @discardableResult
    public func append(contentsOf records: [[UInt8]]) throws -> Range<UInt64> {
        try append(contentsOf: records, committingNow: false)
    }

    /// Appends several records like ``append(contentsOf:)`` and commits them at once as the
    /// durability policy commits (`write(2)` and fsync under `.everyRecord` and `.batched`, a
    /// `write(2)` under `.none`), arming no interval timer: for a caller that gathers a commit's
    /// worth of records itself (the tracker's writer thread), so that the log wakes no other thread.
    @discardableResult
    package func appendCommittingNow(contentsOf records: [[UInt8]]) throws -> Range<UInt64> {
        try append(contentsOf: records, committingNow: true)
    }

    private func append(contentsOf records: [[UInt8]], committingNow: Bool) throws -> Range<UInt64> {
        var crcs: [UInt32] = []
        crcs.reserveCapacity(records.count)
        for (index, record) in records.enumerated() {
            try record.withUnsafeBytes { raw in
                crcs.append(try checksum(raw, index: records.count > 1 ? index : nil))
            }
        }
        let (range, action) = try state.withLock { s -> (Range<UInt64>, AfterAppend) in
            try checkWritable(&s, incoming: records.reduce(0) { $0 + $1.count + Frame.maxOverhead })
            let first = s.nextSeq
            for (index, record) in records.enumerated() {
                record.withUnsafeBytes { _ = buffer(&s, record: $0, crc: crcs[index]) }
            }
            return (first..<s.nextSeq, committingNow ? commitNow(s) : afterAppend(&s))
        }
        do {
            try perform(action, through: range.isEmpty ? nil : range.upperBound - 1)
        } catch {
            throw keptInMemory(error, seqs: range)
        }
        return range
    }

    /// Writes and fsyncs everything appended so far. Returns when it is durable.
    public func sync() throws {
        guard canWrite else {
            throw BeaconLogError(.invalidArgument, "this log was opened without write access; only the writer can sync", path: directory.path)
        }
        try state.withLock { try checkUsable($0) }
        try commit(sync: true)
    }

    func appendOne(_ record: UnsafeRawBufferPointer) throws -> UInt64 {
        let crc = try checksum(record, index: nil)
        let (seq, action) = try state.withLock { s -> (UInt64, AfterAppend) in
            try checkWritable(&s, incoming: record.count + Frame.maxOverhead)
            let seq = buffer(&s, record: record, crc: crc)
            return (seq, afterAppend(&s))
        }
        do {
            try perform(action, through: seq)
        } catch {
            throw keptInMemory(error, seqs: seq..<(seq + 1))
        }
        return seq
    }

    /// An append whose record was accepted but whose write or commit failed (disk full, I/O error):
    /// the record stays in memory, is written when the disk accepts it, and must not be appended
    /// again. Says so in the error, which keeps its code.
    func keptInMemory(_ error: any Error, seqs: Range<UInt64>) -> any Error {
        // A write error that did not fail the log went through `putBack`: the frames are kept and
        // retried (maybe already written by the background flush since). Decided from the error, not
        // from `writeError`, which a concurrent successful write may already have cleared.
        guard let error = error as? BeaconLogError, error.code == .diskFull || error.code == .io,
              state.withLock({ $0.failure == nil }) else { return error }
        var kept = error
        kept.keptSeqs = seqs
        kept.failure = kept.failure ?? error.message
        kept.message = "\(error.message). The record (seq \(seqs.count == 1 ? "\(seqs.lowerBound)" : "\(seqs)")) was appended and is kept in memory until the disk accepts it: do not append it again; sync() reports when it is durable"
        return kept
    }

    /// The CRC-32C of a record that may be appended; refuses (and counts) an empty record, an
    /// oversized one and one with a raw newline. One pass over the record checks and sums it.
    @inline(__always)
    func checksum(_ record: UnsafeRawBufferPointer, index: Int?) throws -> UInt32 {
        if record.count > 0, record.count <= config.maxRecordBytes, let crc = CRC32C.checksum(ofLine: record) { return crc }
        throw refusal(record, index: index)
    }

    /// Why `record` may not be appended (empty, oversized, a raw newline), counted as refused.
    @inline(never)
    func refusal(_ record: UnsafeRawBufferPointer, index: Int?) -> BeaconLogError {
        let which = index.map { "record \($0)" } ?? "the record"
        if record.isEmpty {
            state.withLock { s in s.stats.refused[.invalidRecord, default: 0] += 1; countersChanged(&s) }
            return BeaconLogError(.invalidRecord, "\(which) is empty; append the bytes of one JSON value", path: directory.path)
        }
        if record.count > config.maxRecordBytes {
            state.withLock { s in s.stats.refused[.recordTooLarge, default: 0] += 1; countersChanged(&s) }
            return BeaconLogError(.recordTooLarge, "\(which) is \(record.count) bytes, more than maxRecordBytes (\(config.maxRecordBytes)); split it or raise the limit", path: directory.path)
        }
        state.withLock { s in s.stats.refused[.invalidRecord, default: 0] += 1; countersChanged(&s) }
        return BeaconLogError(.invalidRecord, "\(which) contains a raw newline, which would break the one-record-per-line framing; escape it as \\n inside JSON strings", path: directory.path)
    }

    /// Throws unless a record of about `incoming` bytes may be buffered now. The common case (open,
    /// writable, no quota refusal possible, no failed write) is a few flag tests on the append path.
    @inline(__always)
    func checkWritable(_ s: inout State, incoming: Int) throws {
        if s.closed || s.failure != nil || s.writeError != nil || !canWrite || config.quotaPolicy == .rejectNew {
            try checkWritableSlowly(&s, incoming: incoming)
        }
    }

    @inline(never)
    func checkWritableSlowly(_ s: inout State, incoming: Int) throws {
        try checkUsable(s)
        guard canWrite else {
            throw BeaconLogError(.invalidArgument, "this log was opened without write access (access \(config.access)); open it with .readWrite or .write to append", path: directory.path)
        }
        if config.quotaPolicy == .rejectNew, Int64(s.diskBytes) + Int64(s.bufferedBytes) + Int64(incoming) > config.maxBytes {
            s.stats.refused[.quotaExceeded, default: 0] += 1
            countersChanged(&s)
            throw BeaconLogError(.quotaExceeded, "the log holds \(s.diskBytes + UInt64(s.bufferedBytes)) bytes and its quota is \(config.maxBytes) (policy .rejectNew); deliver and acknowledge records, or raise maxBytes", path: directory.path)
        }
        // While writes fail (disk full), keep at most one segment's worth in memory, then refuse.
        if let error = s.writeError, s.bufferedBytes + incoming > max(config.segmentBytes, 1 << 20) {
            s.stats.refused[.diskFull, default: 0] += 1
            countersChanged(&s)
            throw BeaconLogError(.diskFull, "\(error.message); \(s.bufferedRecords) records wait in memory and new ones are refused until space frees", path: error.path, cause: error.cause)
        }
    }

    /// Frames `record` into the buffer and returns its sequence number. Decides the segment: a frame
    /// that would make the tail segment exceed `segmentBytes` starts the next one.
    @discardableResult @inline(__always)
    func buffer(_ s: inout State, record: UnsafeRawBufferPointer, crc: UInt32) -> UInt64 {
        let seq = s.nextSeq
        s.nextSeq += 1
        let seqDigits = Frame.digits(seq)
        // Three CRCs in four have ten digits.
        let crcDigits = crc >= 1_000_000_000 ? 10 : Frame.digits(UInt64(crc))
        let length = Frame.length(seqDigits: seqDigits, crcDigits: crcDigits, count: record.count)
        if s.tailSize > 0 && s.tailSize + UInt64(length) > UInt64(config.segmentBytes) {
            s.tailSegment += 1
            s.tailSize = 0
        }
        if s.chunks.last?.segment != s.tailSegment { openChunk(&s, firstSeq: seq) }
        // The open chunk is mutated in place: its buffer is a class, so no copy-on-write.
        s.chunks[s.chunks.count - 1].frame(seq: seq, crc: crc, seqDigits: seqDigits, crcDigits: crcDigits, length: length, record: record)
        s.tailSize += UInt64(length)
        s.bufferedBytes += length
        s.bufferedRecords += 1
        s.stats.appendedRecords += 1
        s.stats.appendedBytes += UInt64(record.count)
        return seq
    }

    /// Starts a chunk for the tail segment.
    @inline(never)
    func openChunk(_ s: inout State, firstSeq seq: UInt64) {
        s.chunks.append(Chunk(segment: s.tailSegment, bytes: frameBuffer(&s), firstSeq: seq, lastSeq: seq))
    }

    /// An empty buffer for a chunk: a spare one if there is one.
    func frameBuffer(_ s: inout State) -> FrameBuffer {
        if let spare = s.spare.popLast() {
            s.spareBytes -= spare.capacity
            return spare
        }
        return FrameBuffer(capacity: chunkCapacity)
    }

    /// A new chunk buffer's capacity: room for a write threshold and a record or so.
    var chunkCapacity: Int { min(config.segmentBytes, Self.writeThreshold + 16 * 1024) }

    /// The spare chunk buffers kept under `.everyRecord` and `.batched` (see `recycle`): a commit
    /// usually holds one chunk, two across a segment roll.
    static let committedSpareBuffers = 4
}

extension Chunk {
    /// Appends the frame of `record` (`length` bytes) to this chunk's buffer.
    @inline(__always)
    mutating func frame(seq: UInt64, crc: UInt32, seqDigits: Int, crcDigits: Int, length: Int, record: UnsafeRawBufferPointer) {
        Frame.write(seq: seq, crc: crc, seqDigits: seqDigits, crcDigits: crcDigits, record: record, to: bytes.tail(reserving: length))
        bytes.count += length
        lastSeq = seq
        records += 1
    }
}
