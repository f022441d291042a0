import Glibc

extension BeaconLog {
    /// How much is read ahead from a segment at once: below glibc's default mmap threshold
    /// (128 KiB), so that the block comes from the malloc heap. A mapped block (the 256 KiB this
    /// was before) raises the threshold to its size when it is freed, on every refill, after which
    /// a process's later large blocks stay resident in the malloc arenas when freed (issue 29; see
    /// `FrameBuffer`). Only a line longer than this (a record of over 120 KiB) grows the read
    /// beyond it.
    static let readAhead = 120 * 1024

    /// The line starting at `position` (ending before `limit`), from the read-ahead cache, refilled
    /// as needed. Nil if no complete line starts there yet.
    func line(at position: LogPosition, limit: UInt64, io: inout ReaderIO) throws -> (ReadCache, Range<Int>)? {
        guard let line = try lineRange(at: position, limit: limit, io: &io) else { return nil }
        return (io.cache!, line)
    }

    /// ``line(at:limit:io:)`` for the read loop: the line's range in `io.cache`, which holds it, so
    /// that a record costs no copy of the cache.
    func lineRange(at position: LogPosition, limit: UInt64, io: inout ReaderIO) throws -> Range<Int>? {
        if let cache = io.cache, cache.segment == position.segment, position.offset >= cache.start,
           position.offset < cache.start + UInt64(cache.bytes.count) {
            let from = Int(position.offset - cache.start)
            let upTo = Int(min(UInt64(cache.bytes.count), limit - cache.start))
            if let newline = Self.newline(in: cache.bytes, from: from, upTo: upTo) { return from..<newline }
            // Cached zeros of another process's preallocated segment may have been written over
            // since: read them again.
            if cache.start + UInt64(cache.bytes.count) >= limit && (canWrite || cache.bytes.last != 0) { return nil }
        }
        // Refill from `position`, growing until a whole line fits or the readable data ends.
        var want = Self.readAhead
        while true {
            let count = Int(min(UInt64(want), limit - position.offset))
            if count <= 0 { return nil }
            guard let file = try readingFile(position.segment, io: &io) else {
                throw BeaconLogError.system(ENOENT, path: path(ofSegment: position.segment).path, operation: "open")
            }
            var failure: (any Error)?
            let bytes = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
                var done = 0
                do {
                    while done < count {
                        let n = try fs.read(file, into: UnsafeMutableRawBufferPointer(rebasing: UnsafeMutableRawBufferPointer(buffer)[done..<count]), at: position.offset + UInt64(done))
                        if n == 0 { break }
                        done += n
                    }
                } catch {
                    failure = error
                }
                initialized = done
            }
            if let failure { throw failure }
            io.cache = ReadCache(segment: position.segment, start: position.offset, bytes: bytes)
            if let newline = Self.newline(in: bytes, from: 0, upTo: bytes.count) { return 0..<newline }
            if bytes.count < count || position.offset + UInt64(count) >= limit { return nil }
            // Zeros at the end of what another process's writer has in its newest segment: the
            // space it preallocated, where no line ends yet. Reading on would read all of it on
            // every look (a damaged block of zeros in the middle is read past once the segment is
            // no longer the newest).
            if !canWrite, bytes.last == 0, state.withLock({ $0.segments.last?.number == position.segment }) { return nil }
            want *= 4
        }
    }

    static func newline(in bytes: [UInt8], from: Int, upTo: Int) -> Int? {
        guard from < upTo else { return nil }
        return bytes.withUnsafeBytes { raw -> Int? in
            guard let hit = memchr(raw.baseAddress! + from, 0x0A, upTo - from) else { return nil }
            return raw.baseAddress!.distance(to: UnsafeRawPointer(hit))
        }
    }
}
