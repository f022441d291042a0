#!/usr/bin/env bash
# The service example under load, stopped with SIGTERM: it must exit within the grace, and every
# request it answered on /track must have its event at the collector exactly once, in order.
#
#   Tests/ServiceExample/test.sh
#
# Builds the example (Hummingbird, swift-service-lifecycle, swift-log: the first build takes
# 3-5 minutes on 2 cores) and `beacon` (the repository's loopback collector, `beacon collect`),
# starts the collector and the example on free loopback ports, loads /track with curl (WORKERS
# keep-alive loops, each id once, in order per worker), sends SIGTERM after LOAD_SECONDS while the
# load goes on, and checks what the collector received. Prints "N passed, M failed"; exits
# non-zero on a failure. Needs curl.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
WORKERS="${WORKERS:-4}"
LOAD_SECONDS="${LOAD_SECONDS:-3}"
GRACE_SECONDS="${GRACE_SECONDS:-5}"   # the example's Beacon grace is 3 s; the whole stop must fit in 5

if ! command -v curl >/dev/null; then
  echo "service example test SKIPPED: curl is not installed"; exit 0
fi
echo "building the service example and beacon (the first build takes 3-5 minutes)..."
BUILD_LOG="$(mktemp)"
swift build --package-path "$ROOT" --product beacon >"$BUILD_LOG" 2>&1 || { tail -30 "$BUILD_LOG"; echo "FAILED: building beacon"; exit 1; }
swift build --package-path "$HERE" >"$BUILD_LOG" 2>&1 || { tail -30 "$BUILD_LOG"; echo "FAILED: building the service example"; exit 1; }
rm -f "$BUILD_LOG"
BEACON="$(swift build --package-path "$ROOT" --show-bin-path)/beacon"
EXAMPLE="$(swift build --package-path "$HERE" --show-bin-path)/ServiceExample"

. "$HERE/support.sh"

passed=0; failed=0
check() {  # check NAME CONDITION-STATUS DETAIL
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); echo "  ok: $1"
  else failed=$((failed + 1)); echo "  FAILED: $1${3:+ ($3)}"; fi
}

start_collector "$WORK/collected.jsonl"

PORT="$(free_port)"
PORT="$PORT" BEACON_DIRECTORY="$WORK/beacon" BEACON_URL="$COLLECTOR_URL" "$EXAMPLE" >"$WORK/example.log" 2>&1 &
EXAMPLE_PID=$!
for _ in $(seq 200); do curl -sf "http://127.0.0.1:$PORT/ok" >/dev/null 2>&1 && break; sleep 0.05; done
curl -sf "http://127.0.0.1:$PORT/ok" >/dev/null || { echo "FAILED: the example did not answer: $(cat "$WORK/example.log")"; exit 1; }

# Each worker sends ids w*10^6 + 0, 1, 2... in batches of 20 over one keep-alive connection,
# recording "STATUS ID" per request, until the example has gone.
worker() {
  local w=$1 next=$(( $1 * 1000000 )) args id
  while kill -0 "$EXAMPLE_PID" 2>/dev/null; do
    args=()
    for ((id = next; id < next + 20; id++)); do args+=(-o /dev/null "http://127.0.0.1:$PORT/track?id=$id"); done
    curl -s --max-time 10 -w '%{http_code} %{url_effective}\n' "${args[@]}" 2>/dev/null | sed -E 's/^([0-9]+) .*id=([0-9]+)$/\1 \2/'
    next=$((next + 20))
  done > "$WORK/answers.$w"
}
WORKER_PIDS=()
for w in $(seq 1 "$WORKERS"); do worker "$w" & WORKER_PIDS+=($!); done
sleep "$LOAD_SECONDS"
# The example's own /metrics route under load: Prometheus' text format, checked by promtool when
# it is installed (Debian's prometheus package; .ci/run installs it), OpenMetrics when asked.
curl -s --max-time 10 -D "$WORK/metrics.head" "http://127.0.0.1:$PORT/metrics" > "$WORK/metrics.txt"
check "GET /metrics answers beacon_pending_records in Prometheus' text format" $(grep -q '^beacon_pending_records ' "$WORK/metrics.txt" && grep -qi '^content-type: text/plain; version=0.0.4' "$WORK/metrics.head"; echo $?)
curl -s --max-time 10 -H 'Accept: application/openmetrics-text;version=1.0.0' "http://127.0.0.1:$PORT/metrics" > "$WORK/metrics.om"
check "GET /metrics answers OpenMetrics when asked (ends with # EOF)" $([ "$(tail -1 "$WORK/metrics.om")" = "# EOF" ]; echo $?)
if command -v promtool >/dev/null; then
  check "promtool check metrics passes on the example's /metrics" $(promtool check metrics < "$WORK/metrics.txt" >"$WORK/promtool.log" 2>&1; echo $?) "$(head -3 "$WORK/promtool.log")"
else
  echo "  SKIPPED: promtool is not installed (apt-get install prometheus): /metrics not validated"
fi
before_term=$(cat "$WORK"/answers.* | grep -c '^200 ')
start=$(date +%s%N)
kill -TERM "$EXAMPLE_PID"
status=""
for _ in $(seq $((GRACE_SECONDS * 50 + 250))); do
  if ! kill -0 "$EXAMPLE_PID" 2>/dev/null; then wait "$EXAMPLE_PID"; status=$?; break; fi
  sleep 0.02
done
stop_ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ -n "$status" ] || kill -9 "$EXAMPLE_PID" 2>/dev/null
EXAMPLE_PID=""
wait "${WORKER_PIDS[@]}"  # the workers end once the example has gone
kill "$COLLECTOR_PID" 2>/dev/null; wait "$COLLECTOR_PID" 2>/dev/null; COLLECTOR_PID=""

cat "$WORK"/answers.* | awk '$1 == 200 { print $2 }' | sort -n > "$WORK/answered"
grep '"event":"Request"' "$WORK/collected.jsonl" | grep -o '"request_id":[0-9]*' | cut -d: -f2 > "$WORK/received"
answered=$(wc -l < "$WORK/answered")
received=$(wc -l < "$WORK/received")
echo "answered $answered requests ($before_term before SIGTERM), the collector received $received Request events; stopped in $stop_ms ms (exit status ${status:-none: killed})"

check "the example exits on SIGTERM within ${GRACE_SECONDS} s" $([ -n "$status" ] && [ "$stop_ms" -lt $((GRACE_SECONDS * 1000)) ]; echo $?) "stopped in $stop_ms ms"
check "it exits with status 0" $([ "${status:-1}" -eq 0 ]; echo $?) "status ${status:-none}"
check "the load was real (more than 200 answered requests)" $([ "$answered" -gt 200 ]; echo $?) "$answered answered"
missing=$(comm -23 "$WORK/answered" <(sort -n "$WORK/received") | wc -l)
check "every answered request's event reached the collector" $([ "$missing" -eq 0 ]; echo $?) "$missing missing, e.g. $(comm -23 "$WORK/answered" <(sort -n "$WORK/received") | head -3 | tr '\n' ' ')"
duplicates=$(sort -n "$WORK/received" | uniq -d | wc -l)
check "no event arrived twice" $([ "$duplicates" -eq 0 ]; echo $?) "$duplicates ids twice"
unordered=0
for w in $(seq 1 "$WORKERS"); do
  awk -v w="$w" 'int($1 / 1000000) == w' "$WORK/received" | sort -n -c 2>/dev/null || unordered=$((unordered + 1))
done
check "each worker's events arrived in the order it sent them" $([ "$unordered" -eq 0 ]; echo $?) "$unordered workers out of order"
check "Beacon shut down cleanly (\$AppEnd delivered)" $(grep -q '"event":"\$AppEnd"' "$WORK/collected.jsonl"; echo $?)
if [ "$failed" -gt 0 ]; then echo "--- example log (tail)"; tail -20 "$WORK/example.log"; fi
echo "service example: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
