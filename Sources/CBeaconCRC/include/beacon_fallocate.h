#ifndef BEACON_FALLOCATE_H
#define BEACON_FALLOCATE_H

/// fallocate(fd, 0, 0, size): allocates the file's blocks up to `size` bytes and makes that its
/// size (zeros), not moving the offset. Returns 0, or the errno (EOPNOTSUPP where the file system
/// cannot; EINTR is the caller's to retry).
int beacon_fallocate(int fd, long long size);

#endif
