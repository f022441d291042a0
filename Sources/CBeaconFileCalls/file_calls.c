// fallocate(2) and sync_file_range(2) for BeaconLog's segments: GNU extensions the Swift Glibc
// module does not import. (posix_fallocate is no substitute: where the file system lacks
// fallocate it writes zeros block by block instead of failing, and BeaconLog would rather write
// without it.)
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include "beacon_file_calls.h"

int beacon_fallocate(int fd, long long size) {
    return fallocate(fd, 0, 0, (off_t)size) == 0 ? 0 : errno;
}

int beacon_start_writeback(int fd, long long offset, long long length) {
    return sync_file_range(fd, (off_t)offset, (off_t)length, SYNC_FILE_RANGE_WRITE) == 0 ? 0 : errno;
}
