import Glibc

/// The raw baseline: what the workload costs with plain system calls on the same file system.
///
/// Appends go into a 64 KiB user-space buffer written with one `write(2)` when full and at every
/// durability point, which is an `fdatasync(2)`. The drain reads ahead 256 KiB with `pread(2)`,
/// finds 50 lines, compares them and makes the position durable with an in-place `pwrite(2)` of
/// a 16-byte checkpoint + `fdatasync(2)`: the fastest plain C way to get the
/// same guarantees, the bar the log is measured against.
struct RawFile {
    let fd: Int32
    let path: String
    private var buffer: UnsafeMutableRawPointer
    private var used = 0
    static let bufferSize = 64 * 1024

    /// Creates (truncates) `path`.
    init(path: String) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw BenchError("cannot create \(path): \(String(cString: strerror(errno)))") }
        self.fd = fd
        self.path = path
        buffer = UnsafeMutableRawPointer.allocate(byteCount: Self.bufferSize, alignment: 4096)
    }

    /// Appends `payload` + newline to the buffer, writing the buffer out when it is full.
    @inline(__always) mutating func append(_ payload: [UInt8]) throws {
        let need = payload.count + 1
        if used + need > Self.bufferSize { try writeBuffer() }
        payload.withUnsafeBytes { raw in
            (buffer + used).copyMemory(from: raw.baseAddress!, byteCount: raw.count)
        }
        buffer.storeBytes(of: 0x0A, toByteOffset: used + payload.count, as: UInt8.self)
        used += need
    }

    /// One `write(2)` of the buffer.
    mutating func writeBuffer() throws {
        var done = 0
        while done < used {
            let n = write(fd, buffer + done, used - done)
            if n < 0 {
                if errno == EINTR { continue }
                throw BenchError("write \(path): \(String(cString: strerror(errno)))")
            }
            done += n
        }
        used = 0
    }

    /// Writes the buffer and `fdatasync`s: a durability point.
    mutating func commit() throws {
        try writeBuffer()
        guard fdatasync(fd) == 0 else { throw BenchError("fdatasync \(path): \(String(cString: strerror(errno)))") }
    }

    func close() {
        _ = Glibc.close(fd)
        buffer.deallocate()
    }
}

/// The raw drain: batches of 50 lines from a file, each acknowledged by an in-place checkpoint.
struct RawDrain {
    /// Drains `n` lines of `dataPath` (which holds `payloads`) in batches of `batch`; returns seconds.
    static func run(dataPath: String, checkpointPath: String, payloads: Payloads, batch: Int) throws -> Double {
        let data = open(dataPath, O_RDONLY | O_CLOEXEC)
        let checkpoint = open(checkpointPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard data >= 0, checkpoint >= 0 else { throw BenchError("cannot open \(dataPath) / \(checkpointPath)") }
        defer { _ = close(data); _ = close(checkpoint) }
        var zero = [UInt8](repeating: 0, count: 16)
        _ = pwrite(checkpoint, &zero, 16, 0)
        _ = fdatasync(checkpoint)
        let readAhead = 256 * 1024
        let cache = UnsafeMutableRawPointer.allocate(byteCount: readAhead, alignment: 4096)
        defer { cache.deallocate() }
        let n = payloads.events.count
        return try time {
            var cacheStart = 0  // file offset of cache[0]
            var cacheCount = 0
            var offset = 0  // file offset of the next line
            var k = 0
            var lines: [UnsafeRawBufferPointer] = []
            lines.reserveCapacity(batch)
            while k < n {
                lines.removeAll(keepingCapacity: true)
                while lines.count < batch && k + lines.count < n {
                    var from = offset - cacheStart
                    var newline = from < cacheCount ? memchr(cache + from, 0x0A, cacheCount - from) : nil
                    if newline == nil {
                        // Refill from the start of the line; the lines held so far move with it.
                        let held = lines.first.map { cache.distance(to: UnsafeMutableRawPointer(mutating: $0.baseAddress!)) } ?? from
                        let keep = cacheCount - held
                        memmove(cache, cache + held, keep)
                        let shift = held
                        lines = lines.map { UnsafeRawBufferPointer(start: $0.baseAddress! - shift, count: $0.count) }
                        cacheStart += held
                        cacheCount = keep
                        let got = pread(data, cache + cacheCount, readAhead - cacheCount, off_t(cacheStart + cacheCount))
                        guard got > 0 else { throw BenchError("raw drain: \(dataPath) ended early at line \(k + lines.count)") }
                        cacheCount += got
                        from = offset - cacheStart
                        newline = memchr(cache + from, 0x0A, cacheCount - from)
                        guard newline != nil else { throw BenchError("raw drain: a line longer than \(readAhead) bytes") }
                    }
                    let end = cache.distance(to: newline!)
                    lines.append(UnsafeRawBufferPointer(start: cache + from, count: end - from))
                    offset = cacheStart + end + 1
                }
                // The check: exactly events k..<k+count, in order.
                for (j, line) in lines.enumerated() {
                    let expected = payloads.events[k + j]
                    let same = expected.withUnsafeBytes { $0.count == line.count && memcmp($0.baseAddress!, line.baseAddress!, line.count) == 0 }
                    guard same else { throw BenchError("raw drain: line \(k + j) differs from the payload") }
                }
                k += lines.count
                // Durable acknowledgement: the next offset and seq, in place.
                var record: (UInt64, UInt64) = (UInt64(offset), UInt64(k))
                let wrote = withUnsafeBytes(of: &record) { pwrite(checkpoint, $0.baseAddress!, 16, 0) }
                guard wrote == 16, fdatasync(checkpoint) == 0 else { throw BenchError("raw drain: checkpoint write failed") }
            }
        }
    }
}

/// A benchmark failure: what failed.
struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
