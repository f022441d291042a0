// What one small commit costs on this file system: N times (write WRITE bytes, then fsync or
// fdatasync) into a segment prepared one of several ways, or the checkpoint's in-place slot
// rewrite. Prints CPU of this thread, CPU of all kworkers (noisy: the whole machine's), block
// write/flush requests and sectors per commit (whole device: noisy too), wall time per commit.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifndef FALLOC_FL_ZERO_RANGE
#define FALLOC_FL_ZERO_RANGE 0x10
#endif

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static double cpu(long *nvcsw) {
    struct rusage r; getrusage(RUSAGE_THREAD, &r);
    if (nvcsw) *nvcsw = r.ru_nvcsw;
    return r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6;
}
static void blk(const char *dev, unsigned long long v[17]) {
    char p[256]; snprintf(p, sizeof p, "/sys/block/%s/stat", dev);
    FILE *f = fopen(p, "r"); memset(v, 0, 17 * sizeof v[0]);
    if (!f) return;
    for (int i = 0; i < 17; i++) if (fscanf(f, "%llu", &v[i]) != 1) break;
    fclose(f);
}
// utime+stime of every kworker thread, in clock ticks.
static double kworkers(void) {
    DIR *d = opendir("/proc"); struct dirent *e; unsigned long long total = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        char p[300], buf[1024]; snprintf(p, sizeof p, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(p, "r"); if (!f) continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f); fclose(f); buf[n] = 0;
        char *open = strchr(buf, '('), *close = strrchr(buf, ')');
        if (!open || !close || strncmp(open + 1, "kworker", 7) != 0) continue;
        unsigned long long ut, st; char *rest = close + 2;
        // fields after comm: state(3) ... utime is field 14, stime 15
        int field = 3; char *tok = strtok(rest, " ");
        while (tok && field < 14) { tok = strtok(NULL, " "); field++; }
        if (!tok) continue; ut = strtoull(tok, NULL, 10);
        tok = strtok(NULL, " "); if (!tok) continue; st = strtoull(tok, NULL, 10);
        total += ut + st;
    }
    closedir(d);
    return (double)total / sysconf(_SC_CLK_TCK);
}
static void die(const char *what) { perror(what); exit(1); }

int main(int argc, char **argv) {
    if (argc < 6) { fprintf(stderr, "usage: %s fallocate|zerorange|zeros|zerowindow|append|checkpoint fsync|fdatasync N WRITE_BYTES DIR [DEV] [SEGMENT_BYTES]\n", argv[0]); return 2; }
    const char *mode = argv[1], *sync = argv[2], *dir = argv[5], *dev = argc > 6 ? argv[6] : "vda";
    int n = atoi(argv[3]), size = atoi(argv[4]);
    long long segment = argc > 7 ? atoll(argv[7]) : 8LL << 20;
    int datasync = strcmp(sync, "fdatasync") == 0;
    char path[4096]; snprintf(path, sizeof path, "%s/sync-cost.%s.%d", dir, mode, getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) die("open");
    char *buf = malloc(segment + size);
    memset(buf, 0, segment + size);
    double setupWall = now(), setupCPU = cpu(NULL);
    int checkpoint = strcmp(mode, "checkpoint") == 0;
    if (strcmp(mode, "fallocate") == 0) { if (fallocate(fd, 0, 0, segment) != 0) die("fallocate"); }
    else if (strcmp(mode, "zerorange") == 0) { if (fallocate(fd, FALLOC_FL_ZERO_RANGE, 0, segment) != 0) die("fallocate zero range"); }
    else if (strcmp(mode, "zeros") == 0) { if (pwrite(fd, buf, segment, 0) != segment) die("pwrite zeros"); }
    else if (checkpoint) { if (pwrite(fd, buf, 1024, 0) != 1024) die("pwrite checkpoint"); }
    else if (strcmp(mode, "append") != 0 && strcmp(mode, "zerowindow") != 0) { fprintf(stderr, "unknown mode %s\n", mode); return 2; }
    if (fsync(fd) != 0) die("fsync");
    { int d = open(dir, O_RDONLY | O_DIRECTORY); fsync(d); close(d); }
    setupWall = now() - setupWall; setupCPU = cpu(NULL) - setupCPU;
    for (int i = 0; i < size; i++) buf[i] = (i % 97 == 96) ? '\n' : 'a' + i % 26;
    unsigned long long b0[17], b1[17]; long cs0, cs1;
    double k0 = kworkers();
    blk(dev, b0);
    double c0 = cpu(&cs0), w0 = now();
    long long offset = 0, zeroed = 0;
    int window = strcmp(mode, "zerowindow") == 0;
    // GAP_US: sleep this long between commits, as a paced writer does (its caches go cold between
    // commits, and the sleep's own wakeup is counted in vcsw); 0 (the default) commits back to back.
    const char *gapEnv = getenv("GAP_US");
    long gap = gapEnv ? atol(gapEnv) : 0;
    for (int i = 0; i < n; i++) {
        if (gap > 0) { struct timespec g = { gap / 1000000, (gap % 1000000) * 1000 }; nanosleep(&g, NULL); }
        // zerowindow: zeros written SEGMENT_BYTES ahead whenever a write would pass the zeroed end,
        // synced with that commit.
        if (window && offset + size > zeroed) {
            if (pwrite(fd, buf + size, segment, zeroed) != segment) die("pwrite window");
            zeroed += segment;
        }
        long long at = checkpoint ? (i % 2) * 512 : offset;
        int len = checkpoint ? 512 : size;
        if (pwrite(fd, buf, len, at) != len) die("pwrite");
        offset += len;
        if ((datasync ? fdatasync(fd) : fsync(fd)) != 0) die("sync");
    }
    double w1 = now(), c1 = cpu(&cs1);
    blk(dev, b1);
    double k1 = kworkers();
    printf("%-10s %-9s n=%d write=%d: cpu %.1f us/commit, kworkers %.1f us/commit, wall %.1f us/commit, "
           "write req %.2f, flush req %.2f, sectors %.1f per commit, vcsw %.2f; setup %.2f ms cpu, %.2f ms wall\n",
           mode, sync, n, checkpoint ? 512 : size, (c1 - c0) / n * 1e6, (k1 - k0) / n * 1e6, (w1 - w0) / n * 1e6,
           (double)(b1[4] - b0[4]) / n, (double)(b1[15] - b0[15]) / n, (double)(b1[6] - b0[6]) / n,
           (double)(cs1 - cs0) / n, setupCPU * 1e3, setupWall * 1e3);
    close(fd); unlink(path);
    return 0;
}
