import Glibc

/// The exclusion between a quota drop in the writer's process and an acknowledgement in the
/// reader's: an exclusive open-file-description lock (`fcntl(F_OFD_SETLKW)`) on byte 0 of
/// `reader.lock`, held only around the drop (reading the checkpoint, counting, unlinking) and
/// around the acknowledgement's checkpoint write. Independent of the `flock` that the reader
/// holds on the same file for its whole life (Linux keeps the two kinds apart).
///
/// With it, a drop either comes before an acknowledgement (which then finds the segments its
/// records came from gone: those records were counted as dropped and were delivered) or after it
/// (and reads the new checkpoint: it does not count them). See `countDeliveredAfterDrop`.
enum DropExclusion {
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
