#ifndef BEACON_FILE_CALLS_H
#define BEACON_FILE_CALLS_H

/// fallocate(fd, 0, 0, size): allocates the file's blocks up to `size` bytes and makes that its
/// size (zeros), not moving the offset. Returns 0, or the errno (EOPNOTSUPP where the file system
/// cannot; EINTR is the caller's to retry).
int beacon_fallocate(int fd, long long size);

/// sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE): starts writing those dirty pages
/// to the disk without waiting and without any durability promise (an fsync still makes them
/// durable; it then has less left to wait for). Returns 0 or the errno.
int beacon_start_writeback(int fd, long long offset, long long length);

#endif
