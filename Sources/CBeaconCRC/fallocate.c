// fallocate(2) for BeaconLog's segment preallocation: a GNU extension the Swift Glibc module does
// not import (posix_fallocate is no substitute: where the file system lacks fallocate it writes
// zeros block by block instead of failing, and BeaconLog would rather write without it).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include "beacon_fallocate.h"

int beacon_fallocate(int fd, long long size) {
    return fallocate(fd, 0, 0, (off_t)size) == 0 ? 0 : errno;
}
