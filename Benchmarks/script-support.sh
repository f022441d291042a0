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
