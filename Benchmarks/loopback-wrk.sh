#!/usr/bin/env bash
# Issue 27's loopback comparison: `beacon send` of a backlog of REQUESTS requests (process start
# included) against `wrk -t1 -c1` posting the same bodies (a Lua script replaying them in order)
# to the same private nginx on 127.0.0.1 (`return 200`, keep-alive), at batch 50 and 500. Beacon
# runs with `--batch B --catch-up-batch B`, so that it sends exactly the REQUESTS bodies wrk posts.
# ROUNDS alternating rounds (wrk first, then beacon first); prints each run and the median ratio
# beacon/wrk (requests per second) per batch.
#
#   Benchmarks/loopback-wrk.sh [--release | --bin DIR] [--requests 6000] [--rounds 3] [--batches "50 500"]
#
# Needs nginx and wrk; the backlog of batch 500 is 3M events (about 600 MB, twice: the log and
# the bodies). Everything it starts is stopped and its files removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

config=debug bin="" requests=6000 rounds=3 batches="50 500"
usage="usage: $0 [--release | --bin DIR] [--requests N] [--rounds N] [--batches \"50 500\"]"
. Benchmarks/script-support.sh
parse_flags "$usage" requests rounds batches -- "$@"
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || { echo "$0: nginx is not installed" >&2; exit 64; }
command -v wrk >/dev/null || { echo "$0: wrk is not installed" >&2; exit 64; }
resolve_bin "$config" beacon
beacon=$bin/beacon
start_work beacon-loopback-wrk

start_nginx
port=$nginx_port
url="http://127.0.0.1:$port/events"

# wrk: replays the bodies of FILE (one a line) in order, one request in flight, and says
# "replayed" after the last answer (wrk itself runs on for its -d; it is stopped then).
cat > "$work/replay.lua" <<'LUA'
local bodies, sent, answered = {}, 0, 0
function init(args)
  for line in io.lines(args[1]) do bodies[#bodies + 1] = line end
end
function request()
  sent = sent + 1
  return wrk.format("POST", "/events", { ["Content-Type"] = "application/json" }, bodies[math.min(sent, #bodies)])
end
function response(status, headers, body)
  answered = answered + 1
  if status ~= 200 then io.stderr:write("wrk: answer " .. status .. "\n") end
  if answered == #bodies then
    io.stderr:write("replayed\n")
    wrk.thread:stop()
  end
end
LUA

now() { date +%s.%N; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for batch in $batches; do
  events=$((requests * batch))
  # The events (about 200 bytes each, numbered), the log holding them, and the request bodies:
  # JSON arrays of BATCH events, exactly what `beacon send --format array` (the default) posts.
  awk -v n="$events" 'BEGIN { for (i = 0; i < n; i++) printf "{\"i\":%d,\"event\":\"Purchase\",\"distinct_id\":\"user-%d\",\"properties\":{\"$lib\":\"Swift\",\"$os\":\"Linux\",\"price\":9.99,\"item\":\"book\",\"count\":3,\"vip\":true,\"note\":\"loopback comparison\"}}\n", i, i % 1000 }' > "$work/events.jsonl"
  awk -v b="$batch" '{ body = body (NR % b == 1 || b == 1 ? "[" : ",") $0; if (NR % b == 0) { print body "]"; body = "" } }' "$work/events.jsonl" > "$work/bodies.txt"
  mkdir -m 700 "$work/backlog"
  # A quota above the backlog (3M events of batch 500 are about 700 MB): nothing is dropped.
  "$beacon" append "$work/backlog" --max-disk $((4 << 30)) < "$work/events.jsonl"
  rm -f "$work/events.jsonl"
  wrk_rates=() beacon_rates=() ratios=()
  for round in $(seq 1 "$rounds"); do
    run_wrk() {
      local start end
      start=$(now)
      coproc WRK { exec wrk -t1 -c1 -d600s --timeout 30s -s "$work/replay.lua" "$url" -- "$work/bodies.txt" 2>&1; }
      local wrk_pid=$WRK_PID line=""
      while IFS= read -r line <&"${WRK[0]}"; do [ "$line" = replayed ] && break; done
      end=$(now)
      kill "$wrk_pid" 2>/dev/null || true
      wait "$wrk_pid" 2>/dev/null || true
      [ "$line" = replayed ] || { echo "$0: wrk ended before replaying the bodies" >&2; exit 1; }
      wrk_rate=$(awk -v n="$requests" -v s="$start" -v e="$end" 'BEGIN { printf "%.0f", n / (e - s) }')
    }
    run_beacon() {
      local start end
      rm -rf "$work/log" && cp -a "$work/backlog" "$work/log"
      sync
      start=$(now)
      "$beacon" send "$work/log" --url "$url" --batch "$batch" --catch-up-batch "$batch" 2> "$work/send.err"
      end=$(now)
      beacon_rate=$(awk -v n="$requests" -v s="$start" -v e="$end" 'BEGIN { printf "%.0f", n / (e - s) }')
    }
    if [ $((round % 2)) -eq 1 ]; then run_wrk; run_beacon; else run_beacon; run_wrk; fi
    ratio=$(awk -v b="$beacon_rate" -v w="$wrk_rate" 'BEGIN { printf "%.2f", b / w }')
    echo "batch $batch round $round: wrk -t1 -c1 $wrk_rate requests/s, beacon send $beacon_rate requests/s ($(grep -o 'sent [0-9]* events' "$work/send.err" | head -1)), ratio $ratio"
    ratios+=("$ratio")
  done
  echo "batch $batch: median ratio beacon send / wrk -t1 -c1 = $(printf '%s\n' "${ratios[@]}" | median) over $rounds rounds ($requests requests of $batch events)"
  rm -rf "$work/backlog" "$work/log" "$work/bodies.txt"
done
