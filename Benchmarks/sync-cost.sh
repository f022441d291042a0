#!/usr/bin/env bash
# What one small commit costs on the file system of DIR (default: a temporary directory under
# TMPDIR): Benchmarks/sync-cost.c, compiled with cc, writes WRITE bytes (default 2048) then syncs,
# N times (default 1000), into a file prepared each way a segment can be, and rewrites the
# checkpoint's 512-byte slot in place with fdatasync as the checkpoint does. Each mode runs ROUNDS
# times (default 3), the modes alternating. Prints one line per run: CPU of the syncing thread,
# CPU of all kworkers (the whole machine's: noisy), block write and flush requests and sectors per
# commit (the whole device's, from /sys/block/DEV/stat: noisy when others write), wall time, and
# with perf the block requests the process itself submitted per commit.
#
#   Benchmarks/sync-cost.sh [--dir DIR] [--dev vda] [--n 1000] [--write 2048] [--rounds 3]
#
# Modes: fallocate (mode 0: unwritten extents, what segments had before), zerorange
# (FALLOC_FL_ZERO_RANGE), zeros (8 MiB of zeros written and synced first), zerowindow (zeros
# written 1 MiB ahead as the writes reach them, as segments have now), append (no preallocation);
# each with fsync and with fdatasync; then checkpoint (fdatasync).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="" dev="" n=1000 write=2048 rounds=3
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    --dev) dev=$2; shift 2 ;;
    --n) n=$2; shift 2 ;;
    --write) write=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "usage: $0 [--dir DIR] [--dev DEV] [--n N] [--write BYTES] [--rounds R]" >&2; exit 64 ;;
  esac
done
command -v cc >/dev/null || { echo "sync-cost: SKIPPED: no C compiler (cc)"; exit 0; }
work=$(mktemp -d "${TMPDIR:-/tmp}/sync-cost.XXXXXX")
trap 'rm -rf "$work"' EXIT
cc -O2 -o "$work/sync-cost" Benchmarks/sync-cost.c
[ -n "$dir" ] || dir=$work
if [ -z "$dev" ]; then
  # The whole disk holding DIR: /sys/class/block/<partition>/.. is the disk.
  majmin=$(stat -c '%d' "$dir")
  dev=$(basename "$(readlink -f "/sys/dev/block/$((majmin >> 8)):$((majmin & 255))")")
  [ -e "/sys/block/$dev/stat" ] || dev=$(basename "$(dirname "$(readlink -f "/sys/class/block/$dev")")")
fi
echo "file system: $(df -T "$dir" | awk 'NR == 2 {print $2}') on $dev; load average $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; $n commits of $write bytes per run"
# With perf (and the right to read block tracepoints), the block requests this process submitted
# (block:block_bio_queue, counted in its own context: the device-wide counts include everyone's),
# less those of the setup (the same run with no commit).
bios() { perf stat -x, -e block:block_bio_queue "$@" 2>&1 >/dev/null | awk -F, '/block_bio_queue/ {print $1}'; }
use_perf=no
perf stat -x, -e block:block_bio_queue true >/dev/null 2>&1 && use_perf=yes
[ "$use_perf" = yes ] || echo "(no perf or no access to block tracepoints: block requests from /sys/block/$dev/stat only)"
run() {
  local line; line=$("$work/sync-cost" "$@")
  if [ "$use_perf" = yes ]; then
    local total setup mode=$1 sync=$2; shift 3
    total=$(bios "$work/sync-cost" "$mode" "$sync" "$n" "$@")
    setup=$(bios "$work/sync-cost" "$mode" "$sync" 0 "$@")
    line="$line; this process's block requests $(awk -v t="$total" -v s="$setup" -v n="$n" 'BEGIN {printf "%.2f", (t - s) / n}') per commit"
  fi
  echo "$line"
}
for round in $(seq "$rounds"); do
  for mode in fallocate zerorange zeros zerowindow append; do
    for sync in fsync fdatasync; do
      size=$((8 << 20)); [ "$mode" = zerowindow ] && size=$((1 << 20))
      run "$mode" "$sync" "$n" "$write" "$dir" "$dev" "$size"
    done
  done
  run checkpoint fdatasync "$n" 512 "$dir" "$dev"
done
