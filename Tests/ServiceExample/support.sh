# Sourced by test.sh, state-changes.sh, wrk-compare.sh and rss-after-load.sh (after BEACON is set):
# a work directory removed at exit with the processes they started (the collector, the example as
# EXAMPLE_PID), `start_collector OUT [PORT]`, which starts `beacon collect` on PORT (default: a free
# loopback port) writing to OUT and sets COLLECTOR_URL, `free_port`, which prints a port nothing
# listens on, and `start_example MODE PORT DIR` (below).
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

# start_example MODE PORT DIR: starts $EXAMPLE on PORT as EXAMPLE_PID, with Beacon's log in DIR
# delivering to the collector, or without Beacon (WITHOUT_BEACON=1) when MODE is "without"; waits
# until it answers /ok, and a second more.
start_example() {
  if [ "$1" = without ]; then
    WITHOUT_BEACON=1 PORT="$2" "$EXAMPLE" >"$WORK/service.log" 2>&1 &
  else
    PORT="$2" BEACON_DIRECTORY="$3" BEACON_URL="$COLLECTOR_URL" "$EXAMPLE" >"$WORK/service.log" 2>&1 &
  fi
  EXAMPLE_PID=$!
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$2/ok" >/dev/null && break; sleep 0.05; done
  sleep 1
}
