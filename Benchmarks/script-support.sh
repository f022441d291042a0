# Sourced by the Benchmarks scripts (bash, set -euo pipefail, run from the repository's root).

# Sets `bin` to the directory holding PRODUCT... built in CONFIG (debug or release), building
# what is missing, unless `bin` is set already (--bin DIR); exits 64 if one is still missing.
#   resolve_bin CONFIG PRODUCT...
resolve_bin() {
  local config=$1 product
  shift
  if [ -z "${bin:-}" ]; then
    bin=$(swift build -c "$config" --show-bin-path)
    for product in "$@"; do
      [ -x "$bin/$product" ] || swift build -c "$config" --product "$product" >&2
    done
  fi
  for product in "$@"; do
    [ -x "$bin/$product" ] || { echo "$0: no $product in $bin" >&2; exit 64; }
  done
}

# Makes the scratch directory `work` (mktemp, prefix NAME) and the list `pids` of the processes
# the script starts: when the script exits, however it exits, each is stopped (SIGTERM, SIGKILL
# after 5 s) and `work` is removed.
#   start_work NAME
start_work() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  pids=()
  trap stop_work EXIT
  trap 'exit 130' INT TERM
}

stop_work() {
  stop_processes 50 "${pids[@]}"
  rm -rf "$work"
}

# Stops each PID: SIGTERM to all, then SIGKILL to each still running after TENTHS tenths of a
# second, and reaps the script's own children.
#   stop_processes TENTHS PID...
stop_processes() {
  local tenths=$1 pid
  shift
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "$@"; do
    for _ in $(seq 1 "$tenths"); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}

# Starts `$beacon collect` on 127.0.0.1:PORT (0: a free one) appending the events it accepts to
# OUT, its standard error in ERR; sets `collector` (its pid, also added to `pids`) and `port` once
# it listens; exits 1 if it does not say its port within 10 s.
#   start_collect PORT OUT ERR
start_collect() {
  : > "$3"
  "$beacon" collect --port "$1" --out "$2" 2> "$3" &
  collector=$!; pids+=("$collector")
  port=""
  for _ in $(seq 1 1000); do
    port=$(grep -oE '127\.0\.0\.1:[0-9]+' "$3" | head -1 | cut -d: -f2 || true)
    [ -n "$port" ] && return
    sleep 0.01
  done
  echo "$0: the collector did not say its port: $(cat "$3")" >&2
  exit 1
}

# Starts nginx (one worker, answering `return 200` to everything, keep-alive, bodies up to 64 MiB)
# on a free port of 127.0.0.1, its files in $work/nginx; sets `nginx_port` and adds its pid to
# `pids`; exits 64 if nginx is not installed, 1 if it does not answer within 5 s. With LOG_FORMAT,
# nginx writes one access-log line a request to $work/nginx/access.log in that format.
#   start_nginx [LOG_FORMAT]
start_nginx() {
  local nginx access="access_log off;"
  nginx=$(command -v nginx || { [ -x /usr/sbin/nginx ] && echo /usr/sbin/nginx; } || true)
  [ -n "$nginx" ] || { echo "$0: nginx is not installed" >&2; exit 64; }
  [ $# -eq 0 ] || access="log_format request '$1'; access_log $work/nginx/access.log request;"
  nginx_port=$((20000 + RANDOM % 40000))
  mkdir -p "$work/nginx"
  cat > "$work/nginx/nginx.conf" <<CONF
daemon off;
worker_processes 1;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 64; }
http {
    $access
    client_body_temp_path $work/nginx/body;
    client_max_body_size 64m;
    client_body_buffer_size 1m;
    keepalive_requests 10000000;
    keepalive_timeout 120s;
    server { listen 127.0.0.1:$nginx_port; location / { return 200; } }
}
CONF
  "$nginx" -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
  pids+=($!)
  for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$nginx_port") 2>/dev/null && break; sleep 0.05; done
  (exec 3<>"/dev/tcp/127.0.0.1/$nginx_port") 2>/dev/null || { echo "$0: nginx did not start on port $nginx_port: $(tail -3 "$work/nginx/error.log")" >&2; exit 1; }
}

# Reads the command line: --release (config=release), --bin DIR (bin=DIR), -h/--help (prints
# USAGE), and --NAME VALUE for each NAME listed (sets the variable NAME); anything else is a
# usage error (exit 64).
#   parse_flags USAGE NAME... -- "$@"
parse_flags() {
  local usage=$1 names=() name known
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do names+=("$1"); shift; done
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --release) config=release ;;
      --bin) bin=$2; shift ;;
      -h|--help) echo "$usage"; exit 0 ;;
      --*)
        known=""
        for name in "${names[@]}"; do [ "$1" = "--$name" ] && known=$name; done
        [ -n "$known" ] && [ $# -ge 2 ] || { echo "$usage" >&2; exit 64; }
        printf -v "$known" '%s' "$2"
        shift ;;
      *) echo "$usage" >&2; exit 64 ;;
    esac
    shift
  done
}
