#!/usr/bin/env bash
# The memory Beacon adds to a service after a long load: the service example with Beacon and
# without it (WITHOUT_BEACON=1), alternating, ROUNDS rounds (default 1): `wrk -t1 -c16` on /track
# in runs of 20 s until REQUESTS requests (default 1,000,000) were answered, then 5 s for the
# uploader to drain. Prints /proc/PID/smaps_rollup's Rss and Anonymous after start and after the
# load, and the difference with against without.
#
#   Tests/ServiceExample/rss-after-load.sh
#   REQUESTS=200000 ROUNDS=2 Tests/ServiceExample/rss-after-load.sh
#   EXAMPLE=/path/to/ServiceExample Tests/ServiceExample/rss-after-load.sh   # a binary built elsewhere
#
# Builds the example in release (unless EXAMPLE is set) and `beacon` (the loopback collector).
# Needs wrk and curl.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
ROUNDS="${ROUNDS:-1}"
REQUESTS="${REQUESTS:-1000000}"
for tool in wrk curl; do
  command -v "$tool" >/dev/null || { echo "rss-after-load: $tool is not installed (apt-get install $tool)"; exit 1; }
done
BUILD_LOG="$(mktemp)"
swift build --package-path "$ROOT" --product beacon >"$BUILD_LOG" 2>&1 || { tail -30 "$BUILD_LOG"; echo "FAILED: building beacon"; exit 1; }
if [ -z "${EXAMPLE:-}" ]; then
  echo "building the service example (release)..."
  swift build -c release --package-path "$HERE" >"$BUILD_LOG" 2>&1 || { tail -30 "$BUILD_LOG"; echo "FAILED: building the service example"; exit 1; }
  EXAMPLE="$(swift build -c release --package-path "$HERE" --show-bin-path)/ServiceExample"
fi
rm -f "$BUILD_LOG"
BEACON="$(swift build --package-path "$ROOT" --show-bin-path)/beacon"

. "$HERE/support.sh"

start_collector /dev/null

# "rss_mib anonymous_mib" of PID, from smaps_rollup.
memory() { awk '/^Rss:/ {r = $2} /^Anonymous:/ {a = $2} END {printf "%.1f %.1f", r / 1024, a / 1024}' "/proc/$1/smaps_rollup"; }

# run MODE: prints "rss_start anon_start rss_end anon_end requests"
run() {
  local mode="$1" port dir total=0 out n
  port="$(free_port)"; dir="$WORK/beacon-$mode-$RANDOM"
  start_example "$mode" "$port" "$dir"
  local start; start="$(memory "$EXAMPLE_PID")"
  while [ "$total" -lt "$REQUESTS" ]; do
    out="$(wrk -t1 -c16 -d20s "http://127.0.0.1:$port/track?id=1")"
    n="$(echo "$out" | awk '/requests in/ {print $1}')"
    total=$((total + ${n:-0}))
    [ "${n:-0}" -gt 0 ] || { echo "FAILED: wrk answered nothing: $out" >&2; break; }
  done
  sleep 5
  local end; end="$(memory "$EXAMPLE_PID")"
  kill -TERM "$EXAMPLE_PID"; wait "$EXAMPLE_PID" 2>/dev/null; EXAMPLE_PID=""
  echo "$start $end $total"
}

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; $REQUESTS requests per run (wrk -t1 -c16), $ROUNDS rounds, alternating"
for round in $(seq "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then order="without with"; else order="with without"; fi
  for mode in $order; do
    line="$(run "$mode")"
    eval "m_$mode=(\$line)"
    echo "round $round $mode: $(echo "$line" | awk '{printf "Rss %s MiB (anonymous %s) after start, %s MiB (anonymous %s) after %s requests", $1, $2, $3, $4, $5}')"
  done
  echo "round $round: RSS added by Beacon $(awk -v a="${m_with[0]}" -v b="${m_without[0]}" 'BEGIN {printf "%.1f", a - b}') MiB after start, $(awk -v a="${m_with[2]}" -v b="${m_without[2]}" 'BEGIN {printf "%.1f", a - b}') MiB after the load (anonymous $(awk -v a="${m_with[3]}" -v b="${m_without[3]}" 'BEGIN {printf "%.1f", a - b}') MiB); load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
