#!/usr/bin/env bash
# Builds the libFuzzer targets of Tests/Fuzz/ and runs one or all of them (issue 20).
#
#   Benchmarks/fuzz.sh TARGET|all [SECONDS] [libFuzzer options...]
#
# TARGET is HTTPResponse, Segments, StateFiles, JSON, Collector or Gzip (all: each in turn). SECONDS
# (default 60) bounds each run. The committed seeds in Tests/Fuzz/Corpus/TARGET are read, never
# written: what a run finds goes to $BEACON_FUZZ_DIR/TARGET (default .build-fuzz/corpus/TARGET,
# kept between runs so a longer run goes on where the last one stopped), and a crash, leak or
# timeout is saved there as crash-*/leak-*/timeout-* and ends the run with a failure. Replay one
# without the sanitizers: `swift build --package-path Tests/Fuzz && Tests/Fuzz/.build/debug/FuzzX FILE`.
# Needs the Swift toolchain for Linux (libFuzzer ships with it); the first build takes a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(HTTPResponse Segments StateFiles JSON Collector Gzip)
target=${1:?usage: Benchmarks/fuzz.sh TARGET|all [SECONDS] [libFuzzer options...]}
seconds=${2:-60}
shift $(( $# >= 2 ? 2 : 1 ))
if [ "$target" = all ]; then selected=("${targets[@]}"); else selected=("$target"); fi
for t in "${selected[@]}"; do
  [ -d "Tests/Fuzz/Corpus/$t" ] || { echo "fuzz.sh: no target $t (one of: ${targets[*]} all)" >&2; exit 64; }
done
# Its own scratch path: the sanitizer flags apply to the root package's modules too.
build=(swift build --package-path Tests/Fuzz --scratch-path .build-fuzz/build -c debug
       -Xswiftc -DFUZZING -Xswiftc -sanitize=fuzzer,address)
mkdir -p .build-fuzz
for t in "${selected[@]}"; do
  if ! "${build[@]}" --product "Fuzz$t" > .build-fuzz/build.log 2>&1; then
    grep -v "Cannot export local symbol" .build-fuzz/build.log >&2
    echo "fuzz.sh: building Fuzz$t failed" >&2
    exit 1
  fi
done
bin=$("${build[@]}" --show-bin-path)
work=${BEACON_FUZZ_DIR:-.build-fuzz/corpus}
status=0
for t in "${selected[@]}"; do
  mkdir -p "$work/$t"
  echo "== Fuzz$t for ${seconds}s (corpus $work/$t, seeds Tests/Fuzz/Corpus/$t)"
  # Segment files go to a temporary directory: tmpfs where there is one.
  tmp=/dev/shm; [ -w "$tmp" ] || tmp=${TMPDIR:-/tmp}
  # The file-system targets open a log (threads, caches) per input: libFuzzer's leak check after
  # every input whose mallocs and frees differ costs ~30 ms there, 10x the input itself. Leaks are
  # the AddressSanitizer suite's job (.ci/run); the parsers' own targets keep the check.
  leaks=1; case $t in Segments|StateFiles) leaks=0 ;; esac
  rc=0
  TMPDIR=$tmp SWIFT_BACKTRACE=enable=no ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
    "$bin/Fuzz$t" "$work/$t" "Tests/Fuzz/Corpus/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$work/$t/" -print_final_stats=1 -detect_leaks=$leaks "$@" > "$work/$t.log" 2>&1 || rc=$?
  grep -aE "INITED|DONE|ERROR|broken promise|Fatal error|SUMMARY|stat::|^Done " "$work/$t.log" | grep -v "^INFO" || true
  if [ $rc -ne 0 ]; then echo "Fuzz$t FAILED (exit $rc): see $work/$t.log and $work/$t/crash-*" >&2; status=1; fi
done
exit $status
