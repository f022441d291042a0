#!/usr/bin/env bash
# Issue 27's sidecar comparison: `beacon send` with its defaults against syslog-ng's reliable disk
# buffer and `http()` destination, draining the same backlog of EVENTS events (about 180 bytes
# each) as the same JSON-array bodies into the same private nginx (`return 200`, keep-alive),
# directly and through `beacon-delay-proxy` at each RTT, with syslog-ng at `batch-lines(50)` and at
# `workers(4) batch-lines(500)`.
#
#   Benchmarks/syslog-ng-compare.sh [--release | --bin DIR] [--events 200000] [--rounds 3] [--rtts "0 20 100"]
#
# A backlog for both: Beacon's is a log written by `beacon append`; syslog-ng's is its disk buffer,
# filled by a first syslog-ng process whose destination refuses connections (127.0.0.1:1), then
# stopped; a second one, whose destination is the collector, drains it (the file source's
# position is in the persist file, so nothing is read twice). Each run is timed from the agent's
# start (process start included) to the last event accepted: `beacon send`'s exit, or
# syslog-ng's `written` counter (`syslog-ng-ctl stats`, polled every 20 ms) reaching the backlog.
# A syslog-ng destination with one request in flight (batch-lines(50), one worker) drains at most
# 25 s worth of its one-in-flight limit (50 events / RTT), so a round stays short: EVENTS column.
#
# Per row: events/s; requests (nginx's access log) and events per request; the one-request-in-
# flight limit (events per request / RTT) and the ratio to it; the agent's CPU (user + system:
# `beacon send`'s from /usr/bin/time, syslog-ng's from /proc/PID/stat just before it is
# stopped) per event; the 1-minute load average when the row ran. ROUNDS rounds, the agents'
# order alternating; the table is the median per row. The proxy's own CPU is not counted.
#
# Needs syslog-ng (3.35 or later, with its http module: `apt-get install syslog-ng-core
# syslog-ng-mod-http`), nginx and beacon-delay-proxy; says SKIPPED and exits 0 when syslog-ng or
# its http module is absent. Everything it starts is stopped and its files removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

config=debug bin="" events=200000 rounds=3 rtts="0 20 100"
usage="usage: $0 [--release | --bin DIR] [--events N] [--rounds N] [--rtts \"0 20 100\"] (RTT 0: no proxy)"
. Benchmarks/script-support.sh
parse_flags "$usage" events rounds rtts -- "$@"
syslogng=$(command -v syslog-ng || { [ -x /usr/sbin/syslog-ng ] && echo /usr/sbin/syslog-ng; } || true)
ctl=$(command -v syslog-ng-ctl || { [ -x /usr/sbin/syslog-ng-ctl ] && echo /usr/sbin/syslog-ng-ctl; } || true)
if [ -z "$syslogng" ] || [ -z "$ctl" ]; then
  echo "$0: SKIPPED: syslog-ng is not installed (apt-get install syslog-ng-core syslog-ng-mod-http)" >&2
  exit 0
fi
check=$(mktemp "${TMPDIR:-/tmp}/beacon-syslog-ng-check.XXXXXX")
printf '@version: 3.35\ndestination d { http(url("http://127.0.0.1:1/")); };\n' > "$check"
if ! why=$("$syslogng" --syntax-only -f "$check" 2>&1); then
  rm -f "$check"
  echo "$0: SKIPPED: syslog-ng has no http() destination (apt-get install syslog-ng-mod-http): $(echo "$why" | head -1)" >&2
  exit 0
fi
rm -f "$check"
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || { echo "$0: nginx is not installed" >&2; exit 64; }
[ -x /usr/bin/time ] || { echo "$0: /usr/bin/time is not installed (apt-get install time)" >&2; exit 64; }
resolve_bin "$config" beacon beacon-delay-proxy
beacon=$bin/beacon
start_work beacon-syslog-ng
ticks=$(getconf CLK_TCK)

# nginx, one access-log line a request.
start_nginx '$status'
requests_so_far() { wc -l < "$work/nginx/access.log"; }

# One delay proxy per RTT above 0, in front of nginx: proxy_port[RTT].
declare -A proxy_port
for rtt in $rtts; do
  [ "$rtt" -gt 0 ] || continue
  "$bin/beacon-delay-proxy" --to "$nginx_port" --rtt "${rtt}ms" > "$work/proxy-$rtt.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 500); do grep -q listening "$work/proxy-$rtt.out" && break; sleep 0.02; done
  proxy_port[$rtt]=$(grep -oE '127\.0\.0\.1:[0-9]+' "$work/proxy-$rtt.out" | head -1 | cut -d: -f2 || true)
  [ -n "${proxy_port[$rtt]}" ] || { echo "$0: beacon-delay-proxy did not start: $(cat "$work/proxy-$rtt.out")" >&2; exit 1; }
done
port_for() { if [ "$1" -gt 0 ]; then echo "${proxy_port[$1]}"; else echo "$nginx_port"; fi; }

now() { date +%s.%N; }
load() { cut -d' ' -f1 /proc/loadavg; }
event_lines() { awk -v n="$1" 'BEGIN { for (i = 0; i < n; i++) printf "{\"i\":%d,\"event\":\"Purchase\",\"distinct_id\":\"user-%d\",\"properties\":{\"$lib\":\"Swift\",\"$os\":\"Linux\",\"price\":9.99,\"item\":\"book\",\"count\":3,\"vip\":true,\"note\":\"sidecar comparison\"}}\n", i, i % 1000 }'; }

# Sets `result` to "EVENTS SECONDS REQUESTS CPU_SECONDS LOAD" for one run.
run_beacon() { # RTT
  local n=$events start end before cpu
  event_lines "$n" > "$work/events.jsonl"
  rm -rf "$work/log" && mkdir -m 700 "$work/log"
  "$beacon" append "$work/log" --max-disk $((4 << 30)) < "$work/events.jsonl"
  sync
  before=$(requests_so_far)
  start=$(now)
  if ! /usr/bin/time -f "%U %S" -o "$work/time.out" "$beacon" send "$work/log" --url "http://127.0.0.1:$(port_for "$1")/events" 2> "$work/send.err"; then
    echo "$0: beacon send failed at RTT $1: $(tail -3 "$work/send.err")" >&2; exit 1
  fi
  end=$(now)
  cpu=$(awk '{ print $1 + $2 }' "$work/time.out")
  result="$n $(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.3f", e - s }') $(( $(requests_so_far) - before )) $cpu $(load)"
}

# The value of dst.http's counter NAME (written, queued), empty when syslog-ng does not answer.
counter() { "$ctl" stats -c "$work/sg/ctl" 2>/dev/null | awk -F';' -v name="$1" '$1 == "dst.http" && $5 == name { print $6; exit }' || true; }
# Waits until counter NAME reaches N (TIMEOUT seconds at most, then exits 1 saying WHAT).
await_counter() { # NAME N TIMEOUT WHAT
  local deadline value
  deadline=$(awk -v s="$(now)" -v t="$3" 'BEGIN { printf "%.3f", s + t }')
  while :; do
    value=$(counter "$1")
    [ "${value:-0}" -ge "$2" ] && return
    if awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n > d) }'; then
      echo "$0: syslog-ng: $4: $1 is ${value:-unknown} of $2 after $3 s; its output: $(tail -5 "$work/sg/out")" >&2
      exit 1
    fi
    sleep 0.02
  done
}
sg_config() { # PORT BATCH WORKERS
  cat <<CONF
@version: 3.35
options { threaded(yes); stats-freq(0); };
source s_events { file("$work/sg/events.jsonl" flags(no-parse) follow-freq(0.1) log-fetch-limit(1000) log-iw-size(100000)); };
destination d_http {
  http(url("http://127.0.0.1:$1/events") method("POST")
       headers("Content-Type: application/json")
       body("\${MSG}") body-prefix("[") delimiter(",") body-suffix("]")
       batch-lines($2) batch-timeout(100) workers($3)
       persist-name("bench")
       disk-buffer(reliable(yes) dir("$work/sg/buffer") disk-buf-size(4294967296) mem-buf-size(16777216)));
};
log { source(s_events); destination(d_http); flags(flow-control); };
CONF
}
start_syslog_ng() { # CONFIG
  "$syslogng" -F --no-caps -f "$1" -R "$work/sg/persist" -p "$work/sg/pid" -c "$work/sg/ctl" > "$work/sg/out" 2>&1 &
  sg_pid=$!; pids+=("$sg_pid")
}
stop_syslog_ng() { stop_processes 100 "$sg_pid"; }
run_syslog_ng() { # RTT BATCH WORKERS
  local n=$events cap start end before stat
  # One request in flight: at most 25 s worth of BATCH / RTT.
  if [ "$3" -eq 1 ] && [ "$1" -gt 0 ]; then
    cap=$(( 25 * $2 * 1000 / $1 ))
    [ "$n" -le "$cap" ] || n=$cap
  fi
  rm -rf "$work/sg" && mkdir -p "$work/sg/buffer"
  event_lines "$n" > "$work/sg/events.jsonl"
  # Fill: the destination refuses connections, everything goes to the reliable disk buffer.
  sg_config 1 "$2" "$3" > "$work/sg/fill.conf"
  start_syslog_ng "$work/sg/fill.conf"
  await_counter queued "$n" 120 "filling the disk buffer"
  stop_syslog_ng
  sync
  # Drain: the same configuration towards the collector.
  sg_config "$(port_for "$1")" "$2" "$3" > "$work/sg/drain.conf"
  before=$(requests_so_far)
  start=$(now)
  start_syslog_ng "$work/sg/drain.conf"
  await_counter written "$n" 900 "draining the disk buffer"
  end=$(now)
  stat=$(cut -d')' -f2- "/proc/$sg_pid/stat")
  stop_syslog_ng
  result="$n $(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.3f", e - s }') $(( $(requests_so_far) - before )) $(echo "$stat" | awk -v t="$ticks" '{ print ($12 + $13) / t }') $(load)"
}

# One table row from the runs' results (lines "EVENTS SECONDS REQUESTS CPU LOAD"): medians.
row() { # LABEL RTT RESULTS
  local label=$1 rtt=$2 results=$3
  echo "$results" | awk -v label="$label" -v rtt="$rtt" '
    { n[NR] = $1; rate[NR] = $1 / $2; per[NR] = $1 / $3; cpu[NR] = $4 * 1e6 / $1; loads = loads (NR > 1 ? "/" : "") $5 }
    function med(a,   i, j, t, m) { m = NR; for (i = 1; i <= m; i++) s[i] = a[i]; for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (s[j] < s[i]) { t = s[i]; s[i] = s[j]; s[j] = t } return s[int((m + 1) / 2)] }
    function grouped(x,   s, r) { s = sprintf("%.0f", x); r = ""; while (length(s) > 3) { r = "," substr(s, length(s) - 2) r; s = substr(s, 1, length(s) - 3) } return s r }
    END {
      r = med(rate); p = med(per)
      limit = rtt > 0 ? p / (rtt / 1000) : 0
      where = "direct"; lim = "-"; ratio = "-"
      if (rtt > 0) { where = rtt " ms"; lim = grouped(limit); ratio = sprintf("%.2f", r / limit) }
      printf "| %s | %s | %s | %s | %s | %s | %s | %.1f | %s |\n", label, where, grouped(med(n)), grouped(r), grouped(p), lim, ratio, med(cpu), loads
    }'
}

echo "syslog-ng: $("$syslogng" --version | head -1); beacon: $beacon; $events events a backlog, $rounds rounds, $(nproc) cores"
declare -A results
agents=(beacon sg50 sg500)
for round in $(seq 1 "$rounds"); do
  for rtt in $rtts; do
    order=("${agents[@]}")
    [ $((round % 2)) -eq 1 ] || order=(sg500 sg50 beacon)
    for agent in "${order[@]}"; do
      case $agent in
        beacon) run_beacon "$rtt" ;;
        sg50) run_syslog_ng "$rtt" 50 1 ;;
        sg500) run_syslog_ng "$rtt" 500 4 ;;
      esac
      echo "round $round, RTT $rtt ms, $agent: events seconds requests cpu_s load = $result" >&2
      results[$agent,$rtt]+="$result"$'\n'
    done
  done
done

echo
echo "| agent, settings | RTT | events | events/s | events/request | one-in-flight limit | ratio | CPU µs/event | load (1 min) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---|"
for rtt in $rtts; do
  row "Beacon, defaults (\`beacon send\`)" "$rtt" "$(printf '%s' "${results[beacon,$rtt]}")"
  row "syslog-ng, batch-lines(50)" "$rtt" "$(printf '%s' "${results[sg50,$rtt]}")"
  row "syslog-ng, workers(4) batch-lines(500)" "$rtt" "$(printf '%s' "${results[sg500,$rtt]}")"
done
