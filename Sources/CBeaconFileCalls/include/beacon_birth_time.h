#ifndef BEACON_BIRTH_TIME_H
#define BEACON_BIRTH_TIME_H

/// The birth (creation) time of the open file `fd` in milliseconds since 1970, from
/// statx(fd, "", AT_EMPTY_PATH, STATX_BTIME) (the file already opened, so no path is looked up
/// again); -1 when the file system or kernel does not record it (or the call fails). Swift's
/// Glibc module does not import `statx`.
long long beacon_birth_time_millis(int fd);

#endif
