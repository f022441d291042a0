import CBeaconFileCalls
import Glibc

extension BeaconLog {
    /// ``LogStats/diskBytes`` alone: what the quota counts, without the rest of ``stats``.
    package var diskBytesInUse: UInt64 { state.withLock { $0.diskBytes } }

    /// The oldest pending record as found on disk, for its age (``oldestPendingRecord()``).
    package struct PendingHead: Sendable, Equatable {
        /// The record's sequence number.
        package var seq: UInt64
        /// The start of the record's event bytes (the whole event when it fits the peek).
        package var event: ArraySlice<UInt8>
        /// When the segment holding it was created (statx `STATX_BTIME`), in milliseconds since
        /// 1970: the record was appended at or after it. Nil where the file system does not
        /// record birth times.
        package var segmentCreatedMillis: Int64?
    }

    /// Bytes read at the oldest pending position: one record usually fits; a longer one is read
    /// again with ``longPeekBytes``.
    static let peekBytes = 4096
    static let longPeekBytes = 64 << 10

    /// The first valid record at or after the checkpoint (or the oldest segment on disk, when the
    /// quota deleted the segment it points into): one `pread` of a few KiB of one segment,
    /// whatever the backlog, so ``LogStats``-like figures can show the lag without reading it.
    /// Separate from ``read(from:maxRecords:maxBytes:)`` (its own file descriptor, no reader lock):
    /// it neither disturbs the uploader's read-ahead nor counts corruption. Nil when nothing is
    /// pending on disk (records still buffered are not looked at) or the record cannot be read.
    package func oldestPendingRecord() -> PendingHead? {
        let (segments, start) = state.withLock { s -> ([SegmentInfo], LogPosition) in
            (s.segments, s.checkpoint)
        }
        for segment in segments where segment.number >= start.segment {
            let offset = segment.number == start.segment ? start.offset : 0
            // Through the log's file system: relative to the directory, never through a link.
            guard let file = try? fs.open(path(ofSegment: segment.number), .read) else { continue }
            defer { fs.close(file) }
            guard let found = Self.firstRecord(in: file.descriptor, at: offset, notBefore: start.seq) else {
                // The checkpoint's segment holds nothing more: the oldest pending record starts the next.
                continue
            }
            let born = beacon_birth_time_millis(file.descriptor)
            return PendingHead(seq: found.seq, event: found.event, segmentCreatedMillis: born >= 0 ? born : nil)
        }
        return nil
    }

    /// The first complete, valid record in the open file `fd` from byte `offset` (corrupt lines and
    /// records before `seq` passed over), within ``longPeekBytes``; its event is cut to what was read.
    static func firstRecord(in fd: Int32, at offset: UInt64, notBefore seq: UInt64) -> (seq: UInt64, event: ArraySlice<UInt8>)? {
        for size in [peekBytes, longPeekBytes] {
            var buffer = [UInt8](repeating: 0, count: size)
            var count = 0
            while count < size {
                let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + count, size - count, off_t(offset) + off_t(count)) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                count += n
            }
            guard count > 0 else { return nil }
            var lineStart = 0
            var sawWholeLine = false
            while let newline = buffer[lineStart..<count].firstIndex(of: 0x0A) {
                sawWholeLine = true
                let parsed = buffer.withUnsafeBytes { Frame.parse($0, line: lineStart..<newline) }
                if case .record(let found, let event) = parsed, found >= seq {
                    return (found, buffer[event])
                }
                lineStart = newline + 1
            }
            // No whole record in the peek: a long one (read more), or the end of what is written.
            if sawWholeLine || count < size { return nil }
        }
        return nil
    }

    /// The pending records and bytes as the directory holds them now, for an instance that does
    /// not write (`beacon send` beside a writer in another process), whose ``stats`` know only
    /// what it has read: the directory listed, each segment's size looked up, and the newest
    /// segment's last record found by a binary search over its preallocated zeros and one read of
    /// its tail (a few `pread`s, whatever the backlog), and the bytes of all its segments (what
    /// the quota counts, ``LogStats/diskBytes``). Nil for a writing instance (its ``stats`` are
    /// current) or when the newest record cannot be found.
    package func pendingOnDisk() -> (records: UInt64, bytes: UInt64, diskBytes: UInt64)? {
        guard !canWrite, let names = try? fs.list(directory) else { return nil }
        let numbers = names.compactMap(SegmentName.parse).sorted()
        let checkpoint = state.withLock { $0.checkpoint }
        guard let newest = numbers.last, let file = try? fs.open(path(ofSegment: newest), .read) else { return nil }
        defer { fs.close(file) }
        guard let end = Self.dataEnd(of: file.descriptor), let last = Self.lastRecordSeq(in: file.descriptor, before: end) else { return nil }
        var bytes: UInt64 = 0, diskBytes: UInt64 = 0
        for number in numbers {
            let size = number == newest ? end : ((try? fs.fileSize(path(ofSegment: number))) ?? 0) ?? 0
            diskBytes += size
            guard number >= checkpoint.segment else { continue }
            bytes += number == checkpoint.segment ? size - min(size, checkpoint.offset) : size
        }
        let records = last + 1 > checkpoint.seq ? last + 1 - checkpoint.seq : 0
        return (records, bytes, diskBytes)
    }

    /// Where the records of the open file `fd` end: its size, less the zeros a preallocation left
    /// after them (found by a binary search over 4 KiB pages: a page holding a record is never all zeros).
    static func dataEnd(of fd: Int32) -> UInt64? {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        let size = UInt64(st.st_size), page: UInt64 = 4096
        var buffer = [UInt8](repeating: 0, count: Int(page))
        func zeroPage(_ index: UInt64) -> Bool {
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress!, Int(page), off_t(index * page)) }
            return n <= 0 || buffer[0..<n].allSatisfy { $0 == 0 }
        }
        // The first all-zero page of the tail: pages [0, low) hold data, [high, count) are zeros.
        var (low, high) = (UInt64(0), (size + page - 1) / page)
        while low < high {
            let mid = (low + high) / 2
            if zeroPage(mid) { high = mid } else { low = mid + 1 }
        }
        guard low > 0 else { return 0 }
        // The data ends inside page low - 1, after its last non-zero byte.
        let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress!, Int(page), off_t((low - 1) * page)) }
        guard n > 0, let lastByte = buffer[0..<n].lastIndex(where: { $0 != 0 }) else { return nil }
        return (low - 1) * page + UInt64(lastByte) + 1
    }

    /// The seq of the last valid record ending at or before `end` in the open file `fd`.
    static func lastRecordSeq(in fd: Int32, before end: UInt64) -> UInt64? {
        guard end > 0 else { return nil }
        let count = Int(min(end, UInt64(longPeekBytes)))
        var buffer = [UInt8](repeating: 0, count: count)
        let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress!, count, off_t(end) - off_t(count)) }
        guard n == count else { return nil }
        var lineEnd = buffer.lastIndex(of: 0x0A)
        while let endIndex = lineEnd {
            let start = buffer[..<endIndex].lastIndex(of: 0x0A).map { $0 + 1 } ?? 0
            if start == 0 && count < end { return nil }  // the line may start before what was read
            if case .record(let seq, _) = buffer.withUnsafeBytes({ Frame.parse($0, line: start..<endIndex) }) { return seq }
            lineEnd = start > 0 ? start - 1 : nil
        }
        return nil
    }
}
