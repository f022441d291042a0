#ifndef BEACON_BIRTH_TIME_H
#define BEACON_BIRTH_TIME_H

/// The birth (creation) time of the file at `path` in milliseconds since 1970, from
/// statx(AT_FDCWD, path, 0, STATX_BTIME); -1 when the file system or kernel does not record it
/// (or the call fails). Swift's Glibc module does not import `statx`.
long long beacon_birth_time_millis(const char *path);

#endif
