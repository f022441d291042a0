# Sourced by test.sh, state-changes.sh and wrk-compare.sh (after BEACON is set): a work directory
# removed at exit with the processes they started (the collector, the example as EXAMPLE_PID),
# `start_collector OUT [PORT]`, which starts `beacon collect` on PORT (default: a free loopback
# port) writing to OUT and sets COLLECTOR_URL, and `free_port`, which prints a port nothing
# listens on.
WORK="$(mktemp -d)"
COLLECTOR_PID=""; EXAMPLE_PID=""
cleanup() {
  [ -n "$EXAMPLE_PID" ] && kill -9 "$EXAMPLE_PID" 2>/dev/null
  [ -n "$COLLECTOR_PID" ] && kill "$COLLECTOR_PID" 2>/dev/null && wait "$COLLECTOR_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

start_collector() {
  : > "$WORK/collector.log"
  "$BEACON" collect --port "${2:-0}" --out "$1" 2>"$WORK/collector.log" &
  COLLECTOR_PID=$!
  for _ in $(seq 100); do grep -q "listening on" "$WORK/collector.log" 2>/dev/null && break; sleep 0.1; done
  COLLECTOR_URL="$(grep -o 'http://127.0.0.1:[0-9]*[^ ]*' "$WORK/collector.log" | head -1)"
  [ -n "$COLLECTOR_URL" ] || { echo "FAILED: the collector did not start: $(cat "$WORK/collector.log")"; exit 1; }
}

free_port() {
  local port
  for _ in $(seq 50); do
    port=$((20000 + RANDOM % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "$port"; return; }
  done
  return 1
}
