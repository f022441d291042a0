#!/usr/bin/env bash
# Scale-out: two Beacon services feeding a two-shard ClickHouse cluster. Starts two private
# clickhouse-servers on 127.0.0.1 (each its own shard; `<remote_servers>` names both), creates on
# each a local ReplacingMergeTree table `events_local` and a `Distributed` table `events` over the
# two, fills two service directories with N events each (`beacon append`), and runs one
# `beacon send` per service at the same time, service A into server 1's `events`, service B into
# server 2's. Then it re-sends a copy of service A's directory (every batch again, as after a
# crash before the checkpoint) and shows that deduplication by `_track_id` still counts each
# event once: the sharding key is a function of `_track_id`, so a duplicate lands on the shard
# that holds the original. Stops both servers.
#
#   Benchmarks/clickhouse-cluster.sh [--release] [-n EVENTS_PER_SERVICE] [--batch N]
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/clickhouse-server.sh

config=debug n=50000 batch=1000
while [ $# -gt 0 ]; do
  case $1 in
    --release) config=release ;;
    -n) n=$2; shift ;;
    --batch) batch=$2; shift ;;
    *) echo "usage: $0 [--release] [-n EVENTS_PER_SERVICE] [--batch N]" >&2; exit 64 ;;
  esac
  shift
done

beacon=$(ch_beacon "$config")
work=$(mktemp -d "${TMPDIR:-/tmp}/beacon-clickhouse-cluster.XXXXXX")
trap 'ch_cleanup; rm -rf "$work"' EXIT

# Both servers must know both shards' native (TCP) ports before they start.
http1=$(ch_free_port); tcp1=$(ch_free_port); inter1=$(ch_free_port)
http2=$(ch_free_port); tcp2=$(ch_free_port); inter2=$(ch_free_port)
cluster="<remote_servers><beacon>
      <shard><replica><host>127.0.0.1</host><port>$tcp1</port></replica></shard>
      <shard><replica><host>127.0.0.1</host><port>$tcp2</port></replica></shard>
    </beacon></remote_servers>"
ch_start s1 "$cluster" "$http1" "$tcp1" "$inter1"
ch_start s2 "$cluster" "$http2" "$tcp2" "$inter2"
echo "cluster 'beacon': shard 1 = 127.0.0.1:$tcp1 (HTTP $http1), shard 2 = 127.0.0.1:$tcp2 (HTTP $http2)"

for port in "$http1" "$http2"; do
  ch_query "$port" "$(ch_events_ddl events_local)"
  # Rows go to the shard chosen by the sharding key; the same _track_id always to the same shard.
  ch_query "$port" "CREATE TABLE events AS events_local ENGINE = Distributed(beacon, default, events_local, intHash64(_track_id))"
done

ch_events "$n" 0 > "$work/a.jsonl"
ch_events "$n" "$n" > "$work/b.jsonl"
"$beacon" append "$work/service-a" --sync none < "$work/a.jsonl"
"$beacon" append "$work/service-b" --sync none < "$work/b.jsonl"
cp -a "$work/service-a" "$work/service-a-again"

# insert_distributed_sync=1: the answer comes after every shard has its rows, so Beacon
# acknowledges only what the cluster stored (the default queues them on the receiving server's
# disk and forwards them in the background).
url1="$(ch_insert_url "$http1" events)&insert_distributed_sync=1"
url2="$(ch_insert_url "$http2" events)&insert_distributed_sync=1"
echo "service A: beacon send service-a --url '$url1' --format ndjson --batch $batch"
echo "service B: beacon send service-b --url '$url2' --format ndjson --batch $batch"
start=$(date +%s.%N)
"$beacon" send "$work/service-a" --url "$url1" --format ndjson --batch "$batch" 2> "$work/a.err" & a=$!
"$beacon" send "$work/service-b" --url "$url2" --format ndjson --batch "$batch" 2> "$work/b.err" & b=$!
wait "$a" || { cat "$work/a.err" >&2; exit 1; }
wait "$b" || { cat "$work/b.err" >&2; exit 1; }
end=$(date +%s.%N)
echo "both services drained $((2 * n)) events in $(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.2f s: %.0f events/s together", e - s, 2 * '"$n"' / (e - s) }')"

echo "service A again, through server 2 (a copy of its directory: every batch re-sent)"
"$beacon" send "$work/service-a-again" --url "$url2" --format ndjson --batch "$batch" 2> "$work/a2.err" \
  || { cat "$work/a2.err" >&2; exit 1; }

echo
echo "rows per shard (stored now, background merges drop duplicates over time / counted with FINAL, each _track_id once):"
deduped=0
for port in "$http1" "$http2"; do
  stored=$(ch_query "$port" 'SELECT count() FROM events_local')
  final=$(ch_query "$port" 'SELECT count() FROM events_local FINAL')
  deduped=$((deduped + final))
  echo "  shard on 127.0.0.1:$port: $stored / $final"
done
total=$(ch_query "$http1" "SELECT count() FROM events")
unique=$(ch_query "$http1" "SELECT uniqExact(_track_id) FROM events")
echo "whole cluster (SELECT through the Distributed table): $total rows stored, $unique distinct _track_id, $deduped after dedup; expected $((2 * n))"
[ "$unique" -eq $((2 * n)) ] && [ "$deduped" -eq $((2 * n)) ] || { echo "MISMATCH" >&2; exit 1; }
