#!/usr/bin/env bash
# Issue 26's acceptance for a live reader: `beacon send DIR --follow` started on an empty
# directory, then `beacon append DIR` of EVENTS events while it sends, ROUNDS rounds across
# `--sync batch|none|each` and `--batch 50|500`, every event counted at a collector (`beacon
# collect` on a free port of 127.0.0.1, each event numbered). A round passes when every event
# arrived (lost 0; duplicates are counted, within at-least-once) and `beacon status` counts
# nothing passed over as corrupt and nothing dropped.
#
#   Benchmarks/append-follow.sh [--release | --bin DIR] [--rounds N] [--events N] [--syncs "batch none each"] [--batches "50 500"]
#
# Defaults: debug build, 50 rounds, 200000 events a round (--sync each: a tenth, it fsyncs
# every record). Prints one line per round and a summary; exits 1 if any round lost an event or
# passed one over, 0 otherwise. Everything it starts is stopped and its files removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

config=debug bin="" rounds=50 events=200000 syncs="batch none each" batches="50 500"
usage="usage: $0 [--release | --bin DIR] [--rounds N] [--events N] [--syncs \"batch none each\"] [--batches \"50 500\"]"
. Benchmarks/script-support.sh
parse_flags "$usage" rounds events syncs batches -- "$@"
resolve_bin "$config" beacon
beacon=$bin/beacon
start_work beacon-append-follow

# N events numbered from 0, about 200 bytes each.
generate() {
  awk -v n="$1" 'BEGIN {
    for (i = 0; i < n; i++)
      printf "{\"i\":%d,\"event\":\"Purchase\",\"distinct_id\":\"user-%d\",\"properties\":{\"$lib\":\"Swift\",\"$os\":\"Linux\",\"price\":9.99,\"item\":\"book\",\"count\":3,\"vip\":true,\"note\":\"append while send --follow\"}}\n", i, i % 1000
  }'
}

# Stops process $1 with SIGTERM and waits for it.
stop() {
  kill -TERM "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

sync_modes=($syncs) batch_sizes=($batches)
failed=0 total_lost=0 total_passed=0 total_dupes=0 total_events=0
for round in $(seq 1 "$rounds"); do
  sync=${sync_modes[$(( (round - 1) % ${#sync_modes[@]} ))]}
  batch=${batch_sizes[$(( (round - 1) / ${#sync_modes[@]} % ${#batch_sizes[@]} ))]}
  n=$events
  [ "$sync" = each ] && n=$((events / 10))
  dir=$work/log-$round out=$work/collected-$round
  mkdir -m 700 "$dir"
  "$beacon" collect --port 0 --out "$out" 2> "$work/collect-$round.err" &
  collector=$!; pids+=("$collector")
  port=""
  for _ in $(seq 1 100); do
    port=$(grep -oE '127\.0\.0\.1:[0-9]+' "$work/collect-$round.err" | head -1 | cut -d: -f2 || true)
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { echo "$0: the collector did not say its port: $(cat "$work/collect-$round.err")" >&2; exit 1; }
  "$beacon" send "$dir" --url "http://127.0.0.1:$port/events" --batch "$batch" --follow 2> "$work/send-$round.err" &
  sender=$!; pids+=("$sender")
  sleep 0.3
  started=$SECONDS
  generate "$n" | "$beacon" append "$dir" --sync "$sync"
  # Wait until nothing is pending (at most 300 s), then stop the sender and the collector.
  while pending=$("$beacon" status "$dir" --json 2>/dev/null | grep -oE '"pending_records" *: *[0-9]+' | grep -oE '[0-9]+$' || echo 1); [ "$pending" != 0 ]; do
    [ $((SECONDS - started)) -lt 300 ] || break
    sleep 0.2
  done
  sleep 0.3
  stop "$sender"; stop "$collector"
  received=$(grep -c . "$out" || true)
  distinct=$(grep -oE '^\{"i":[0-9]+' "$out" | sort -u | wc -l)
  lost=$((n - distinct)) dupes=$((received - distinct))
  status=$("$beacon" status "$dir" --json 2>/dev/null || true)
  passed=$(echo "$status" | grep -oE '"corrupt_skipped" *: *[0-9]+' | grep -oE '[0-9]+$' || echo 0)
  dropped=$(echo "$status" | { grep -oE '"dropped" *: *\{[^}]*\}' || true; } | { grep -oE ':[0-9]+' || true; } | tr -d : | awk '{ s += $1 } END { print s + 0 }')
  verdict=ok
  if [ "$lost" -ne 0 ] || [ "${passed:-0}" -ne 0 ] || [ "$dropped" -ne 0 ]; then verdict=FAILED; failed=$((failed + 1)); fi
  printf 'round %2d  --sync %-5s --batch %-3s  appended %6d  received %6d  distinct %6d  lost %d  passed over %s  dropped %s  duplicates %d  %ds  %s\n' \
    "$round" "$sync" "$batch" "$n" "$received" "$distinct" "$lost" "${passed:-0}" "$dropped" "$dupes" $((SECONDS - started)) "$verdict"
  total_lost=$((total_lost + lost)) total_passed=$((total_passed + ${passed:-0})) total_dupes=$((total_dupes + dupes)) total_events=$((total_events + n))
  rm -rf "$dir" "$out"
done
echo "$rounds rounds, $total_events events appended: lost $total_lost, passed over $total_passed, duplicates $total_dupes, failed rounds $failed"
[ "$failed" -eq 0 ]
