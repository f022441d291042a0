#!/usr/bin/env bash
# The README's dependency line must resolve and build in a new package, as a user would write it:
# the README's `swift manifest` block, with the repository URL replaced by a local clone of this
# commit (file://), resolved by SwiftPM and built. A release tag on this commit must equal
# Beacon.libraryVersion, the one place the version is written.
#
#   Tests/Docs/dependency-line.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

version=$(sed -n 's/.*public static let libraryVersion = "\(.*\)".*/\1/p' Sources/Beacon/Tracking/Beacon.swift)
[ -n "$version" ] || { echo "dependency-line: Beacon.libraryVersion not found in Sources/Beacon/Tracking/Beacon.swift" >&2; exit 1; }
for tag in $(git tag --points-at HEAD 2>/dev/null); do
  [ "${tag#v}" = "$version" ] || { echo "dependency-line: HEAD is tagged $tag but Beacon.libraryVersion is $version: make them equal" >&2; exit 1; }
done

# The manifest block of the README, and its dependency line.
manifest=$(awk '/^```swift manifest/{on=1; next} on && /^```/{exit} on{print}' README.md)
line=$(printf '%s\n' "$manifest" | grep -E '^\s*\.package\(url: "[^"]*beacon(\.git)?"' | head -1)
[ -n "$line" ] || { echo "dependency-line: the README's manifest block has no .package(url: \"…/beacon.git\", …) line" >&2; exit 1; }
url=$(printf '%s\n' "$line" | sed -E 's/.*url: "([^"]*)".*/\1/')
echo "dependency-line: the README says: $(printf '%s' "$line" | sed 's/^ *//')"

# A clone of this commit, on the branch the line names (a fresh clone in CI has it already).
git clone --quiet --no-hardlinks "$root" "$work/beacon"
branch=$(printf '%s\n' "$line" | sed -nE 's/.*branch: "([^"]*)".*/\1/p')
if [ -n "$branch" ]; then git -C "$work/beacon" checkout --quiet -B "$branch" "$(git rev-parse HEAD)"; fi

mkdir -p "$work/app/Sources/MyService" "$work/app/Tests/MyServiceTests"
printf '%s\n' "$manifest" | sed "s|$url|file://$work/beacon|" > "$work/app/Package.swift"
cat > "$work/app/Sources/MyService/main.swift" <<SWIFT
import Beacon
import BeaconLog

var config = Beacon.Configuration(directory: "$work/events")
config.lifecycleEvents = false
let beacon = try Beacon(configuration: config)
beacon.track("Installed", properties: ["ok": true])
try beacon.sync()
print("Beacon \\(Beacon.libraryVersion): tracked \\(beacon.stats.tracked) event")
beacon.closeNow()
SWIFT
cat > "$work/app/Tests/MyServiceTests/MyServiceTests.swift" <<'SWIFT'
import BeaconTesting
SWIFT
(cd "$work/app" && swift package resolve && swift build --product MyService) || {
  echo "dependency-line: the README's dependency line did not resolve or build against a clone of this commit (above)" >&2; exit 1; }
output=$("$work/app/.build/debug/MyService")
echo "dependency-line: $output"
case "$output" in *"Beacon $version: tracked 1 event"*) ;; *) echo "dependency-line: unexpected output" >&2; exit 1 ;; esac
echo "dependency-line: the README's line resolves and builds (Beacon $version)"
