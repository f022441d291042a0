#!/usr/bin/env bash
# What Beacon costs inside a service: the service example's /track (one event per request) under
# wrk, against the same service without Beacon (WITHOUT_BEACON=1: no tracker, /track tracks
# nothing), alternating, ROUNDS rounds, at each of CONNECTIONS. Prints, per round and as the
# median of the rounds: CPU per request of the whole service process (every thread, user +
# system, from /proc/PID/stat), requests/s, context switches per request (every thread, from
# /proc/PID/task/*/status) and RSS after start and after the load; then the CPU added per tracked
# request and the requests/s ratio. Beside them, per run: the CPU per request of Beacon's own threads
# in the service (beacon-writer, beacon-uploader, beacon-pool-N, beacon-net-N, beacon-timer: the
# `track` calls themselves run on the service's threads and are only in the difference), of the
# collector process (on this machine it shares the 2 cores with wrk and the service, so its CPU
# lowers the tracked service's requests/s; a collector far away would not), and of the whole
# machine (/proc/stat).
#
#   Tests/ServiceExample/wrk-compare.sh
#   ROUNDS=3 SECONDS_PER_RUN=10 CONNECTIONS="16 64" Tests/ServiceExample/wrk-compare.sh
#   EXAMPLE=/path/to/ServiceExample Tests/ServiceExample/wrk-compare.sh   # a binary built elsewhere
#
# Builds the example in release (the first build takes several minutes on 2 cores) and `beacon`
# in release (the loopback collector the tracked service delivers to, in its own process: its CPU is not the
# service's). Needs wrk and curl. The load generator runs on the same machine: on 2 cores, read
# the CPU figures (per request), not the absolute rates.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
ROUNDS="${ROUNDS:-3}"
SECONDS_PER_RUN="${SECONDS_PER_RUN:-10}"
CONNECTIONS="${CONNECTIONS:-16 64}"
for tool in wrk curl; do
  command -v "$tool" >/dev/null || { echo "wrk-compare: $tool is not installed (apt-get install $tool)"; exit 1; }
done
echo "building the service example (release) and beacon..."
BUILD_LOG="$(mktemp)"
swift build -c release --package-path "$ROOT" --product beacon >"$BUILD_LOG" 2>&1 || { tail -30 "$BUILD_LOG"; echo "FAILED: building beacon"; exit 1; }
if [ -z "${EXAMPLE:-}" ]; then   # EXAMPLE=/path/to/ServiceExample: a binary built elsewhere (another commit's)
  swift build -c release --package-path "$HERE" >"$BUILD_LOG" 2>&1 || { tail -30 "$BUILD_LOG"; echo "FAILED: building the service example"; exit 1; }
  EXAMPLE="$(swift build -c release --package-path "$HERE" --show-bin-path)/ServiceExample"
fi
rm -f "$BUILD_LOG"
BEACON="$(swift build -c release --package-path "$ROOT" --show-bin-path)/beacon"   # a release collector: its CPU shares the cores
TICKS="$(getconf CLK_TCK)"

. "$HERE/support.sh"

start_collector /dev/null

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^(non)?voluntary_ctxt_switches/ {n += $2} END {print n}'; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
# CPU ticks of the threads of PID whose name starts with beacon-.
beacon_ticks() { for t in /proc/"$1"/task/*; do grep -q '^beacon-' "$t/comm" 2>/dev/null && awk '{print $14 + $15}' "$t/stat" 2>/dev/null; done | awk '{n += $1} END {print n + 0}'; }
# Busy ticks of the whole machine (every core: user, nice, system, irq, softirq, steal).
machine_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }

# run MODE CONNECTIONS: prints "cpu_us_per_request requests_per_s switches_per_request rss_start_mib
# rss_end_mib beacon_threads_us collector_us machine_us" (per request)
run() {
  local mode="$1" connections="$2" port dir
  port="$(free_port)"; dir="$WORK/beacon-$mode-$connections-$RANDOM"
  start_example "$mode" "$port" "$dir"
  local rss_start; rss_start="$(rss_kib "$EXAMPLE_PID")"
  wrk -t1 -c"$connections" -d2s "http://127.0.0.1:$port/track?id=1" >/dev/null 2>&1   # warm-up
  local cpu0 sw0 cpu1 sw1 out requests bt0 bt1 col0 col1 m0 m1
  cpu0="$(cpu_ticks "$EXAMPLE_PID")"; sw0="$(switches "$EXAMPLE_PID")"
  bt0="$(beacon_ticks "$EXAMPLE_PID")"; col0="$(cpu_ticks "$COLLECTOR_PID")"; m0="$(machine_ticks)"
  out="$(wrk -t1 -c"$connections" -d"${SECONDS_PER_RUN}s" "http://127.0.0.1:$port/track?id=1")"
  cpu1="$(cpu_ticks "$EXAMPLE_PID")"; sw1="$(switches "$EXAMPLE_PID")"
  bt1="$(beacon_ticks "$EXAMPLE_PID")"; col1="$(cpu_ticks "$COLLECTOR_PID")"; m1="$(machine_ticks)"
  local rss_end; rss_end="$(rss_kib "$EXAMPLE_PID")"
  requests="$(echo "$out" | awk '/requests in/ {print $1}')"
  kill -TERM "$EXAMPLE_PID"; wait "$EXAMPLE_PID" 2>/dev/null; EXAMPLE_PID=""
  awk -v c0="$cpu0" -v c1="$cpu1" -v s0="$sw0" -v s1="$sw1" -v n="$requests" -v t="$TICKS" -v d="$SECONDS_PER_RUN" \
      -v r0="$rss_start" -v r1="$rss_end" -v b0="$bt0" -v b1="$bt1" -v k0="$col0" -v k1="$col1" -v m0="$m0" -v m1="$m1" \
      'BEGIN { printf "%.1f %.0f %.2f %.1f %.1f %.1f %.1f %.1f\n", (c1 - c0) / t / n * 1e6, n / d, (s1 - s0) / n, r0 / 1024, r1 / 1024,
               (b1 - b0) / t / n * 1e6, (k1 - k0) / t / n * 1e6, (m1 - m0) / t / n * 1e6 }'
}

median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}'; }

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; wrk -t1, ${SECONDS_PER_RUN} s per run, $ROUNDS rounds, alternating"
for c in $CONNECTIONS; do
  : >"$WORK/with-$c"; : >"$WORK/without-$c"
  for round in $(seq "$ROUNDS"); do
    # Alternate which goes first, so a load change favours neither.
    if [ $((round % 2)) -eq 1 ]; then order="without with"; else order="with without"; fi
    for mode in $order; do
      line="$(run "$mode" "$c")"
      echo "$line" >>"$WORK/$mode-$c"
      echo "c$c round $round $mode: $(echo "$line" | awk '{printf "%s µs CPU/request, %s requests/s, %s switches/request, RSS %s MiB after start, %s MiB after the load; Beacon threads %s µs, collector %s µs, machine %s µs per request", $1, $2, $3, $4, $5, $6, $7, $8}')"
    done
  done
  for mode in with without; do
    for field in 1 2 3 4 5 6 7 8; do awk -v f="$field" '{print $f}' "$WORK/$mode-$c" | median >"$WORK/m-$mode-$c-$field"; done
  done
  m() { cat "$WORK/m-$1-$c-$2"; }
  echo "c$c median: with Beacon $(m with 1) µs CPU/request, $(m with 2) requests/s, $(m with 3) switches/request, RSS $(m with 4) -> $(m with 5) MiB;" \
       "without $(m without 1) µs, $(m without 2) requests/s, $(m without 3) switches/request, RSS $(m without 4) -> $(m without 5) MiB"
  awk -v a="$(m with 1)" -v b="$(m without 1)" -v ra="$(m with 2)" -v rb="$(m without 2)" -v sa="$(m with 4)" -v sb="$(m without 4)" -v ea="$(m with 5)" -v eb="$(m without 5)" -v c="$c" \
    'BEGIN { printf "c%s: CPU added per tracked request %.1f µs; requests/s %.2fx of without; RSS added %.1f MiB after start, %.1f MiB after the load\n", c, a - b, ra / rb, sa - sb, ea - eb }'
  awk -v bt="$(m with 6)" -v col="$(m with 7)" -v mw="$(m with 8)" -v mo="$(m without 8)" -v c="$c" \
    'BEGIN { printf "c%s: of it, Beacon'"'"'s threads %.1f µs per request (the rest is track on the service'"'"'s threads, and what Beacon'"'"'s presence costs them); the collector %.1f µs per request; the whole machine %.1f µs per request with Beacon, %.1f without\n", c, bt, col, mw, mo }'
done
