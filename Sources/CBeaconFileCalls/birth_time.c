#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>
#include "beacon_birth_time.h"

long long beacon_birth_time_millis(int fd) {
#ifdef STATX_BTIME
    struct statx st;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_BTIME, &st) != 0) return -1;
    if (!(st.stx_mask & STATX_BTIME)) return -1;
    return (long long)st.stx_btime.tv_sec * 1000 + st.stx_btime.tv_nsec / 1000000;
#else
    (void)fd;
    return -1;
#endif
}
