import Glibc

/// The exclusion between a quota drop in the writer's process and an acknowledgement in the
/// reader's: an exclusive open-file-description lock (`fcntl(F_OFD_SETLKW)`) on byte 0 of
/// `reader.lock`, held only around the drop (reading the checkpoint, counting, unlinking) and
/// around the acknowledgement's checkpoint write. Independent of the `flock` that the reader
/// holds on the same file for its whole life (Linux keeps the two kinds apart).
///
/// With it, a drop either comes before an acknowledgement (which then finds the segments its
/// records came from dropped: those records were counted as dropped and were delivered) or after
/// it (and reads the new checkpoint: it does not count them). See `countDeliveredAfterDrop`.
///
/// The drop leaves its mark in `reader.lock` under the lock: at byte 32, after the holder's pid,
/// one more than the newest segment number the quota deleted (8 bytes, little-endian). The quota
/// deletes the oldest segment first, so every segment below the mark is gone: the reader needs
/// one `pread` per acknowledgement, not a look at each segment. A new reader truncates the file
/// when it takes the lock, and starts with no mark: it never read what was dropped before.
enum DropExclusion {
    static let markOffset: UInt64 = 32

    /// The drop mark in `file` (0: none).
    static func mark(in file: LogFile, fs: any FileSystem) -> UInt64 {
        var bytes = [UInt8](repeating: 0, count: 8)
        let n = (try? bytes.withUnsafeMutableBytes { try fs.read(file, into: $0, at: markOffset) }) ?? 0
        guard n == 8 else { return 0 }
        return bytes.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
    }

    /// Raises the drop mark in `file` to cover segment `number`.
    static func noteDrop(of number: UInt64, in file: LogFile, fs: any FileSystem) throws {
        guard mark(in: file, fs: fs) <= number else { return }
        let bytes = withUnsafeBytes(of: (number + 1).littleEndian) { Array($0) }
        try bytes.withUnsafeBytes { try fs.write(file, $0, at: markOffset) }
    }

    /// `F_OFD_SETLKW` (Linux 3.15; not exported by Swift's Glibc module).
    static let setLockWaiting: Int32 = 38

    /// Runs `body` holding the lock on `file` (open for writing), waiting for it (the other side
    /// holds it for one checkpoint write or one segment's unlink).
    static func withLock<T>(_ file: LogFile, _ body: () throws -> T) rethrows -> T {
        var lock = flock()
        lock.l_type = Int16(F_WRLCK)
        lock.l_whence = Int16(SEEK_SET)
        lock.l_start = 0
        lock.l_len = 1
        // A kernel without OFD locks (EINVAL) leaves the two unexcluded: the counts may then be
        // off by what was in flight at a drop, as before; nothing else depends on the lock.
        _ = retryingInterrupts { fcntl(file.descriptor, setLockWaiting, &lock) }
        defer {
            var unlock = lock
            unlock.l_type = Int16(F_UNLCK)
            _ = fcntl(file.descriptor, setLockWaiting, &unlock)
        }
        return try body()
    }
}
