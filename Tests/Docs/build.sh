#!/usr/bin/env bash
# Builds the DocC documentation of Beacon's library products with the toolchain's `docc`, from
# symbol graphs of the debug build (`swift build` first), and fails on any warning (a broken symbol
# link, an unknown article) and on any public symbol without a doc comment. The types Beacon
# re-exports from BeaconHTTP and BeaconTLS (Sources/Beacon/Exports.swift) are documented as Beacon's.
#
#   Tests/Docs/build.sh [OUTPUT-DIR]     (default: .build/docs; open OUTPUT-DIR/Beacon.doccarchive)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.build/docs}
build=$(swift build --show-bin-path)
modules="$build/Modules"
[ -d "$modules" ] || { echo "docs: no build at $build: run 'swift build' first" >&2; exit 1; }
triple=$(swift -print-target-info | sed -n 's/.*"triple": "\(.*\)".*/\1/p' | head -1)
docc=$(command -v docc || echo "$(dirname "$(readlink -f "$(command -v swift)")")/docc")
[ -x "$docc" ] || { echo "docs: the toolchain has no docc ($docc)" >&2; exit 1; }
graphs=$(mktemp -d)
trap 'rm -rf "$graphs"' EXIT
rm -rf "$out" && mkdir -p "$out"
status=0
for module in BeaconLog Beacon BeaconTesting BeaconURLSession; do
  mkdir -p "$graphs/$module"
  swift symbolgraph-extract -module-name "$module" -target "$triple" -minimum-access-level public \
    -I "$modules" -I Sources/CZlib -I Sources/COpenSSL -Xcc -I -Xcc Sources/CBeaconCRC/include \
    -Xcc "-fmodule-map-file=$build/CBeaconCRC.build/module.modulemap" \
    -Xcc -I -Xcc Sources/CBeaconFileCalls/include \
    -Xcc "-fmodule-map-file=$build/CBeaconFileCalls.build/module.modulemap" \
    -experimental-allowed-reexported-modules=BeaconHTTP,BeaconTLS \
    -output-dir "$graphs/$module"
  catalog="Sources/$module/$module.docc"
  args=(--additional-symbol-graph-dir "$graphs/$module" --output-dir "$out/$module.doccarchive"
        --fallback-display-name "$module" --fallback-bundle-identifier "beacon.$module"
        --fallback-default-module-kind "Framework" --warnings-as-errors)
  if [ -d "$catalog" ]; then args=("$catalog" "${args[@]}"); fi
  if ! "$docc" convert "${args[@]}" >"$graphs/$module.log" 2>&1; then
    cat "$graphs/$module.log" >&2
    echo "docs: docc reported warnings or errors for $module (above)" >&2
    status=1
  fi
done
# Every public symbol declared by Beacon's modules has a doc comment. Symbols a conformance brings
# in (`hash(into:)` of an enum, an extension of a standard type) carry no comment of their own and
# are not counted.
python3 - "$graphs" <<'PY' || status=1
import glob, json, sys
missing = []
for path in sorted(glob.glob(sys.argv[1] + "/*/*.symbols.json")):
    graph = json.load(open(path))
    module = graph["module"]["name"]
    if "@" in path.rsplit("/", 1)[1]:
        continue  # extensions of other modules' types (Int, String...)
    synthesized = {"hashValue", "hash(into:)", "init(rawValue:)", "rawValue", "==(_:_:)", "!=(_:_:)"}
    for symbol in graph["symbols"]:
        name = symbol["pathComponents"][-1]
        # No location: a default implementation the standard library gives a conformance.
        if "docComment" in symbol or "sourceOrigin" in symbol or name in synthesized or "location" not in symbol:
            continue
        where = symbol.get("location", {})
        file = where.get("uri", "?").split("/Sources/")[-1]
        line = where.get("position", {}).get("line", 0) + 1
        missing.append(f"Sources/{file}:{line}: {module}.{'.'.join(symbol['pathComponents'])} has no doc comment")
for line in missing:
    print(line, file=sys.stderr)
if missing:
    print(f"docs: {len(missing)} public symbols without a doc comment (above)", file=sys.stderr)
    sys.exit(1)
PY
[ $status -eq 0 ] && echo "docs: BeaconLog, Beacon, BeaconTesting and BeaconURLSession built without warnings, every public symbol documented: $out"
exit $status
