#!/usr/bin/env bash
# Peak RSS of `beacon send` as a sidecar, which must stay at most 64 MiB for any backlog:
#
# 1. follow: `beacon send DIR --follow` runs for SECONDS while one `beacon append DIR` is fed RATE
#    events a second (paced, a new chunk each second); its RSS is sampled every 5 s (slope over
#    the samples after the first 30 s or third of the run), then it is stopped with SIGTERM once everything arrived.
# 2. backlog: a log of BACKLOG events (`beacon append --sync none`), then `beacon send DIR
#    --batch B` until drained, for each B.
#
# The collector is beacon-bench's loopback collector in its own process on a free port of
# 127.0.0.1 (it counts the events: every one must arrive). Peak RSS is `/usr/bin/time -f %M`.
#
#   Benchmarks/soak-send.sh [--release | --bin DIR] [--seconds S] [--rate N] [--backlog N] [--batches "500"]
#
# Defaults: debug build, 180 s at 20000 events/s, 1000000 events, batch 500. Exits 1 when a peak
# is over 64 MiB or an event is missing, 0 otherwise. Everything it starts is stopped and its
# files are removed when it exits, however it exits.
set -euo pipefail
cd "$(dirname "$0")/.."

config=debug bin="" seconds=180 rate=20000 backlog=1000000 batches="500" limit_kib=$((64 * 1024))
usage="usage: $0 [--release | --bin DIR] [--seconds S] [--rate N] [--backlog N] [--batches \"500 50\"]"
. Benchmarks/script-support.sh
parse_flags "$usage" seconds rate backlog batches -- "$@"
resolve_bin "$config" beacon beacon-bench
beacon=$bin/beacon
[ -x /usr/bin/time ] || { echo "$0: /usr/bin/time is missing (apt-get install time)" >&2; exit 64; }

start_work beacon-soak-send

# RATE... events numbered from $2 (the README's workload event, about 200 bytes).
events() {
  awk -v n="$1" -v start="$2" 'BEGIN {
    for (i = start; i < start + n; i++)
      printf "{\"distinct_id\":\"user-%d\",\"event\":\"Purchase\",\"time\":%.0f,\"_track_id\":%.0f,\"properties\":{\"$lib\":\"Swift\",\"$lib_version\":\"1.0.0\",\"$os\":\"Linux\",\"price\":9.99,\"item\":\"book\",\"count\":3,\"vip\":true}}\n", i % 1000, 1700000000000 + i, i + 1
  }'
}

coproc COLLECTOR { exec "$bin/beacon-bench" --serve-collector loopback "$work/collector"; }
pids+=("$COLLECTOR_PID")  # it also exits by itself when this script ends (its standard input closes)
read -r -t 30 ready port <&"${COLLECTOR[0]}" || { echo "$0: the collector did not start" >&2; exit 1; }
[ "$ready" = ready ] || { echo "$0: the collector said '$ready $port'" >&2; exit 1; }
url="http://127.0.0.1:$port/events"
accepted() { echo stats >&"${COLLECTOR[1]}"; local events bytes; read -r -t 10 events bytes <&"${COLLECTOR[0]}"; echo "$events"; }
# Waits until the collector holds $1 events, at most $2 seconds.
wait_for() {
  local end=$((SECONDS + $2)) got
  while got=$(accepted); [ "$got" -lt "$1" ]; do
    [ $SECONDS -lt $end ] || { echo "$0: the collector has $got of $1 events after $2 s" >&2; return 1; }
    sleep 0.2
  done
}
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
# The child of $1 (the command /usr/bin/time runs).
child_of() { local c; for _ in $(seq 1 100); do c=$(ps -o pid= --ppid "$1" | tr -d ' '); [ -n "$c" ] && { echo "$c"; return; }; sleep 0.05; done; }
verdict() { if [ "$1" -le $limit_kib ]; then echo "ok (<= 64 MiB)"; else echo "OVER 64 MiB"; failed=1; fi; }
failed=0

echo "beacon send soak: $bin, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), collector on 127.0.0.1:$port"

# 1. follow
dir=$work/follow
"$beacon" append "$dir" < /dev/null
/usr/bin/time -f %M -o "$work/follow.time" "$beacon" send "$dir" --url "$url" --follow 2> "$work/follow.err" &
time_pid=$!
pids+=("$time_pid")
send_pid=$(child_of "$time_pid")
[ -n "$send_pid" ] || { echo "$0: beacon send --follow did not start" >&2; cat "$work/follow.err" >&2; exit 1; }
pids+=("$send_pid")  # /usr/bin/time dies of a signal without passing it on
(
  start=$(date +%s%N)
  for ((s = 0; s < seconds; s++)); do
    events "$rate" $((s * rate))
    left=$((start + (s + 1) * 1000000000 - $(date +%s%N)))
    if [ $left -gt 0 ]; then sleep "$(printf '%d.%09d' $((left / 1000000000)) $((left % 1000000000)))"; fi
  done
) | "$beacon" append "$dir" 2> "$work/append.err" &
append_pid=$!
pids+=("$append_pid")
: > "$work/follow.trace"
start=$SECONDS
while kill -0 "$append_pid" 2>/dev/null; do
  sleep 5
  t=$((SECONDS - start)) kib=$(rss_kib "$send_pid")
  echo "$t $kib" >> "$work/follow.trace"
  if [ $((t % 30)) -lt 5 ]; then echo "  follow ${t} s: delivered $(accepted), beacon send RSS $((kib / 1024)) MiB" >&2; fi
done
wait "$append_pid" || { echo "$0: beacon append failed:" >&2; cat "$work/append.err" >&2; exit 1; }
total=$((seconds * rate))
wait_for "$total" 300
kill -TERM "$send_pid"
wait "$time_pid" || { echo "$0: beacon send --follow failed:" >&2; tail -5 "$work/follow.err" >&2; exit 1; }
peak=$(tail -1 "$work/follow.time")
warmup=$((seconds / 3 < 30 ? seconds / 3 : 30))
read -r slope lo hi n < <(awk -v warmup="$warmup" '$1 >= warmup && $2 > 0 { n++; x += $1; y += $2; xx += $1 * $1; xy += $1 * $2; if (!lo || $2 < lo) lo = $2; if ($2 > hi) hi = $2 }
  END { d = n * xx - x * x; printf "%.2f %.1f %.1f %d\n", (d > 0 ? (n * xy - x * y) / d * 60 / 1024 : 0), lo / 1024, hi / 1024, n }' "$work/follow.trace")
echo "follow: $total events in ${seconds} s at $rate/s, all delivered; beacon send --follow peak RSS $((peak / 1024)) MiB ($peak KiB): $(verdict "$peak")"
echo "follow: beacon send RSS after ${warmup} s: $lo..$hi MiB over $n samples (every 5 s), slope $slope MiB/min"

# 2. backlog
dir=$work/backlog
events "$backlog" 0 | "$beacon" append "$dir" --sync none --max-disk 4096MiB
for batch in $batches; do
  before=$(accepted)
  # A second pass over the same log re-reads from the start: copy it first.
  rm -rf "$work/backlog-run" && cp -r "$dir" "$work/backlog-run"
  start=$(date +%s%N)
  # In the background so that a signal to this script stops it at once (timeout passes the signal
  # to its whole process group).
  timeout 1800 /usr/bin/time -f %M -o "$work/backlog.time" "$beacon" send "$work/backlog-run" --url "$url" --batch "$batch" 2> "$work/backlog.err" &
  pids+=("$!")
  wait "$!" || { echo "$0: beacon send --batch $batch failed:" >&2; tail -5 "$work/backlog.err" >&2; exit 1; }
  ms=$((($(date +%s%N) - start) / 1000000))
  wait_for $((before + backlog)) 30
  peak=$(tail -1 "$work/backlog.time")
  echo "backlog: $backlog events, beacon send --batch $batch: $((backlog * 1000 / (ms > 0 ? ms : 1))) events/s, peak RSS $((peak / 1024)) MiB ($peak KiB): $(verdict "$peak")"
done
exit $failed
