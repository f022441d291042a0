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
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
