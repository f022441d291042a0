#!/usr/bin/env bash
# Issue 27's prompt resume, measured: a sender delivers to `beacon collect` on a free port of
# 127.0.0.1; the collector is stopped for OUTAGE seconds while events keep coming (one every
# 0.5 s), then started again on the same port; prints the seconds from the moment it listens
# again to the first event it writes. ROUNDS rounds per sender:
#   send     `beacon send DIR --url … --follow`, events appended by `beacon append`
#   service  the service example (Tests/ServiceExample: Hummingbird, Beacon's run() in its
#            service group), events tracked by `curl /track?id=N`; built first (3-5 minutes cold)
#
#   Benchmarks/resume-after-outage.sh [--release | --bin DIR] [--outage 20] [--rounds 3] [--senders "send service"]
#
# Everything it starts is stopped and its files removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

config=debug bin="" outage=20 rounds=3 senders="send service"
usage="usage: $0 [--release | --bin DIR] [--outage SECONDS] [--rounds N] [--senders \"send service\"]"
. Benchmarks/script-support.sh
parse_flags "$usage" outage rounds senders -- "$@"
resolve_bin "$config" beacon
beacon=$bin/beacon
start_work beacon-resume
example=""
if [[ " $senders " == *" service "* ]]; then
  command -v curl >/dev/null || { echo "$0: the service sender needs curl" >&2; exit 64; }
  swift build --package-path Tests/ServiceExample >&2
  example="$(swift build --package-path Tests/ServiceExample --show-bin-path)/ServiceExample"
fi

now() { date +%s.%N; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
lines() { [ -f "$1" ] && wc -l < "$1" || echo 0; }

# Starts `beacon collect` on port $1 (0: a free one) writing to $2; sets `collector` (its pid)
# and `port`, once it listens.
start_collector() {
  : > "$work/collect.err"
  "$beacon" collect --port "$1" --out "$2" 2> "$work/collect.err" &
  collector=$!; pids+=("$collector")
  port=""
  for _ in $(seq 1 200); do
    port=$(grep -oE '127\.0\.0\.1:[0-9]+' "$work/collect.err" | head -1 | cut -d: -f2 || true)
    [ -n "$port" ] && return
    sleep 0.01
  done
  echo "$0: the collector did not listen: $(cat "$work/collect.err")" >&2
  exit 1
}

free_port() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
  return 1
}

for sender in $senders; do
  results=()
  for round in $(seq 1 "$rounds"); do
    dir=$work/log-$sender-$round
    mkdir -m 700 "$dir"
    start_collector 0 "$work/before-$round.jsonl"
    url="http://127.0.0.1:$port/events"
    n=0
    case $sender in
      send)
        "$beacon" send "$dir" --url "$url" --follow 2> "$work/send.err" &
        sender_pid=$!; pids+=("$sender_pid")
        track() { printf '{"event":"Outage","n":%d}\n' "$n" | "$beacon" append "$dir"; n=$((n + 1)); } ;;
      service)
        web=$(free_port)
        PORT=$web BEACON_DIRECTORY="$dir" BEACON_URL="$url" "$example" > "$work/example.log" 2>&1 &
        sender_pid=$!; pids+=("$sender_pid")
        for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$web/ok" >/dev/null 2>&1 && break; sleep 0.05; done
        track() { curl -sf "http://127.0.0.1:$web/track?id=$n" >/dev/null; n=$((n + 1)); } ;;
    esac
    for _ in $(seq 1 10); do track; done
    for _ in $(seq 1 600); do [ "$(lines "$work/before-$round.jsonl")" -ge 10 ] && break; sleep 0.05; done
    [ "$(lines "$work/before-$round.jsonl")" -ge 10 ] || { echo "$0: $sender: the first events were not delivered" >&2; exit 1; }
    # The outage: the collector goes away; events keep coming, the sender fails and backs off.
    kill -TERM "$collector"; wait "$collector" 2>/dev/null || true
    down=$SECONDS
    while [ $((SECONDS - down)) -lt "$outage" ]; do track; sleep 0.5; done
    after=$work/after-$round.jsonl
    start_collector "$port" "$after"
    back=$(now)
    while [ "$(lines "$after")" -eq 0 ]; do
      sleep 0.005
      awk -v b="$back" -v t="$(now)" 'BEGIN { exit !(t - b > 400) }' && { echo "$0: $sender: nothing delivered 400 s after the return" >&2; exit 1; }
    done
    resumed=$(awk -v b="$back" -v t="$(now)" 'BEGIN { printf "%.2f", t - b }')
    echo "$sender round $round: outage ${outage} s, first event delivered ${resumed} s after the collector was back"
    results+=("$resumed")
    kill -TERM "$sender_pid"; wait "$sender_pid" 2>/dev/null || true
    kill -TERM "$collector"; wait "$collector" 2>/dev/null || true
  done
  echo "$sender: median $(printf '%s\n' "${results[@]}" | median) s from the collector's return to the first event delivered ($rounds rounds, ${outage} s outages)"
done
