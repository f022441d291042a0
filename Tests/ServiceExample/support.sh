# Sourced by test.sh and wrk-compare.sh (after BEACON is set): a work directory removed at exit
# with the processes they started (the collector, the example as EXAMPLE_PID), and
# `start_collector OUT`, which starts `beacon collect` on a free loopback port writing to OUT and
# sets COLLECTOR_URL.
WORK="$(mktemp -d)"
COLLECTOR_PID=""; EXAMPLE_PID=""
cleanup() {
  [ -n "$EXAMPLE_PID" ] && kill -9 "$EXAMPLE_PID" 2>/dev/null
  [ -n "$COLLECTOR_PID" ] && kill "$COLLECTOR_PID" 2>/dev/null && wait "$COLLECTOR_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

start_collector() {
  "$BEACON" collect --port 0 --out "$1" 2>"$WORK/collector.log" &
  COLLECTOR_PID=$!
  for _ in $(seq 100); do grep -q "listening on" "$WORK/collector.log" 2>/dev/null && break; sleep 0.1; done
  COLLECTOR_URL="$(grep -o 'http://127.0.0.1:[0-9]*[^ ]*' "$WORK/collector.log" | head -1)"
  [ -n "$COLLECTOR_URL" ] || { echo "FAILED: the collector did not start: $(cat "$WORK/collector.log")"; exit 1; }
}
