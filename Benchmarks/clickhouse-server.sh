# Sourced by Benchmarks/clickhouse*.sh: private ClickHouse servers on 127.0.0.1 for the scripts.
# Each server gets free ports and its own config, users and data under a temporary directory,
# runs as the current user, and is stopped on exit (SIGTERM, then SIGKILL). Never the system
# service, never another address.

CH_SERVER=${BEACON_CLICKHOUSE_SERVER:-$(PATH="$PATH:/usr/sbin:/usr/local/sbin" command -v clickhouse-server || true)}
if [ -z "$CH_SERVER" ]; then
  echo "clickhouse-server not found: apt-get install clickhouse-server (or set BEACON_CLICKHOUSE_SERVER)" >&2
  exit 69
fi
CH_PIDS=()
CH_DIRS=()

. "$(dirname "${BASH_SOURCE[0]}")/script-support.sh"

ch_cleanup() {
  stop_processes 100 "${CH_PIDS[@]}"
  [ ${#CH_DIRS[@]} -eq 0 ] || rm -rf "${CH_DIRS[@]}"
}

# A TCP port nothing listens on, from the ephemeral range.
ch_free_port() {
  local port
  while :; do
    port=$((20000 + RANDOM % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "$port"; return; }
  done
}

# ch_start NAME [EXTRA_XML [HTTP TCP INTERSERVER]]: starts a server on the given ports (free
# ones by default); sets CH_HTTP_NAME, CH_TCP_NAME, CH_DIR_NAME.
ch_start() {
  local name=$1 extra=${2:-} dir http=${3:-} tcp=${4:-} inter=${5:-}
  dir=$(mktemp -d "${TMPDIR:-/tmp}/beacon-clickhouse-$name.XXXXXX")
  [ -n "$http" ] || http=$(ch_free_port)
  [ -n "$tcp" ] || tcp=$(ch_free_port)
  [ -n "$inter" ] || inter=$(ch_free_port)
  mkdir -p "$dir"/{data,tmp,user_files,format_schemas,log}
  cat > "$dir/config.xml" <<EOF
<?xml version="1.0"?>
<yandex>
    <logger><level>warning</level><log>$dir/log/server.log</log><errorlog>$dir/log/server.err.log</errorlog><size>10M</size><count>1</count></logger>
    <listen_host>127.0.0.1</listen_host>
    <http_port>$http</http_port>
    <tcp_port>$tcp</tcp_port>
    <interserver_http_port>$inter</interserver_http_port>
    <interserver_http_host>127.0.0.1</interserver_http_host>
    <path>$dir/data/</path>
    <tmp_path>$dir/tmp/</tmp_path>
    <user_files_path>$dir/user_files/</user_files_path>
    <format_schema_path>$dir/format_schemas/</format_schema_path>
    <users_config>$dir/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <keep_alive_timeout>3</keep_alive_timeout>
    <mark_cache_size>268435456</mark_cache_size>
    <mlock_executable>false</mlock_executable>
    $extra
</yandex>
EOF
  cat > "$dir/users.xml" <<'EOF'
<?xml version="1.0"?>
<yandex>
    <profiles><default></default></profiles>
    <users><default><password></password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></default></users>
    <quotas><default></default></quotas>
</yandex>
EOF
  "$CH_SERVER" --config-file="$dir/config.xml" > "$dir/stdout.log" 2>&1 < /dev/null &
  local pid=$!
  CH_PIDS+=("$pid")
  CH_DIRS+=("$dir")
  for _ in $(seq 1 600); do
    if curl -fsS "http://127.0.0.1:$http/ping" > /dev/null 2>&1; then
      printf -v "CH_HTTP_$name" '%s' "$http"
      printf -v "CH_TCP_$name" '%s' "$tcp"
      printf -v "CH_DIR_$name" '%s' "$dir"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "clickhouse-server $name did not start on 127.0.0.1:$http; its log:" >&2
  tail -20 "$dir/stdout.log" "$dir/log/server.err.log" >&2 2>/dev/null
  exit 70
}

# ch_query PORT SQL: runs SQL over HTTP; fails with ClickHouse's message.
ch_query() {
  curl -fsS --show-error "http://127.0.0.1:$1/" --data-binary "$2" || { echo "query failed: $2" >&2; return 1; }
}

# ch_insert_url PORT TABLE: the URL Beacon POSTs NDJSON batches to.
ch_insert_url() {
  echo "http://127.0.0.1:$1/?query=INSERT%20INTO%20$2%20FORMAT%20JSONEachRow&input_format_import_nested_json=1&input_format_skip_unknown_fields=1"
}

# The README's table for Beacon events (properties of the benchmark's workload events).
ch_events_ddl() {
  cat <<EOF
CREATE TABLE $1 (
    _track_id          UInt64,
    time               UInt64,
    event              String,
    distinct_id        String,
    \`properties.\$lib\` String,
    \`properties.price\` Float64,
    \`properties.item\`  String,
    \`properties.count\` UInt32,
    \`properties.vip\`   UInt8
) ENGINE = ${2:-ReplacingMergeTree()}
PARTITION BY toYYYYMM(toDate(intDiv(time, 1000)))
ORDER BY (event, time, _track_id)
EOF
}

# ch_events N START: N workload events (the benchmark's event shape, about 200 bytes) as JSON lines.
ch_events() {
  awk -v n="$1" -v start="${2:-0}" 'BEGIN {
    for (i = start; i < start + n; i++)
      printf "{\"distinct_id\":\"user-%d\",\"event\":\"Purchase\",\"time\":%.0f,\"_track_id\":%.0f,\"properties\":{\"$lib\":\"Swift\",\"$lib_version\":\"1.0.0\",\"$os\":\"Linux\",\"price\":9.99,\"item\":\"book\",\"count\":3,\"vip\":true}}\n", i % 1000, 1700000000000 + i, i + 1
  }'
}

# The `beacon` executable: release with --release, else debug; built when missing.
ch_beacon() {
  local config=${1:-debug} bin
  bin=$(swift build -c "$config" --show-bin-path 2>/dev/null)/beacon
  if [ ! -x "$bin" ]; then swift build -c "$config" --product beacon >&2; fi
  echo "$bin"
}
