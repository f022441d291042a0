#!/usr/bin/env bash
# Delivery into a real ClickHouse by batch size: starts a private clickhouse-server on 127.0.0.1,
# fills a Beacon log with N workload events (`beacon append`), times `beacon send --format ndjson`
# draining it into the README's ReplacingMergeTree table, once per batch size with and without
# gzip (and with the catch-up batch when `beacon send` has it), checks every event arrived, and
# stops the server.
#
#   Benchmarks/clickhouse.sh [--release] [-n EVENTS] [--batches "50 500 5000"] [--catch-up N] [--rounds R]
#
# Prints one line per run and a summary table (events/s, median of the rounds). The figures
# depend on the machine; nothing is asserted about speed.
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/clickhouse-server.sh

config=debug n=100000 batches="50 500 5000" catchup="" rounds=1
while [ $# -gt 0 ]; do
  case $1 in
    --release) config=release ;;
    -n) n=$2; shift ;;
    --batches) batches=$2; shift ;;
    --catch-up) catchup=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    *) echo "usage: $0 [--release] [-n EVENTS] [--batches \"50 500 5000\"] [--catch-up N] [--rounds R]" >&2; exit 64 ;;
  esac
  shift
done

beacon=$(ch_beacon "$config")
work=$(mktemp -d "${TMPDIR:-/tmp}/beacon-clickhouse-bench.XXXXXX")
trap 'ch_cleanup; rm -rf "$work"' EXIT
ch_start bench
port=$CH_HTTP_bench
ch_query "$port" "$(ch_events_ddl events)"
ch_events "$n" > "$work/events.jsonl"
echo "clickhouse $(ch_query "$port" 'SELECT version()'), beacon $config build, $n events of $(( $(wc -c < "$work/events.jsonl") / n )) bytes, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

catchup_flag=""
if [ -n "$catchup" ]; then
  if "$beacon" help send 2>&1 | grep -q -- --catch-up-batch; then
    catchup_flag="--catch-up-batch $catchup"
  else
    echo "note: this beacon send has no --catch-up-batch; skipping the catch-up runs" >&2
    catchup=""
  fi
fi

runs=()
for b in $batches; do
  runs+=("--batch $b" "--batch $b --gzip")
  if [ -n "$catchup" ]; then runs+=("--batch $b $catchup_flag" "--batch $b $catchup_flag --gzip"); fi
done

declare -A rates
for run in "${runs[@]}"; do
  for round in $(seq 1 "$rounds"); do
    rm -rf "$work/log"
    "$beacon" append "$work/log" --sync none < "$work/events.jsonl"
    ch_query "$port" "TRUNCATE TABLE events"
    start=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$beacon" send "$work/log" --url "$(ch_insert_url "$port" events)" --format ndjson $run 2> "$work/send.err" \
      || { cat "$work/send.err" >&2; exit 1; }
    end=$(date +%s.%N)
    rows=$(ch_query "$port" "SELECT count() FROM events FINAL")
    [ "$rows" -eq "$n" ] || { echo "expected $n rows, found $rows" >&2; exit 1; }
    rate=$(awk -v n="$n" -v s="$start" -v e="$end" 'BEGIN { printf "%.0f", n / (e - s) }')
    echo "run: beacon send --format ndjson $run  round=$round  seconds=$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.2f", e - s }')  events_per_s=$rate"
    rates["$run"]+="$rate "
  done
done

echo
echo "| beacon send --format ndjson | events/s (median of $rounds) |"
echo "|---|---:|"
for run in "${runs[@]}"; do
  median=$(echo "${rates[$run]}" | tr ' ' '\n' | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  echo "| \`$run\` | $median |"
done
