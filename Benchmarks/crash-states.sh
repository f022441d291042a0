#!/bin/sh
# Every crash state of the recorded workloads (not a sample): process crashes after each change and
# power losses at each fsync with every variant of the unsynced writes. Not run by CI; takes
# minutes. Run from the package root:
#
#   Benchmarks/crash-states.sh
#
# A failing state is printed as "<workload>: N crash states fail, for example: <crash>: <problem>".
set -eu
cd "$(dirname "$0")/.."
BEACON_CRASH_EXHAUSTIVE=1 swift test --filter CrashStateTests "$@"
