#!/usr/bin/env bash
# A router and N shards of pg_jobs on this machine, for the tests, the docs and a first try
# (docs/SCALING.md): N+1 throwaway clusters of the release PG_JOBS_PG names (scripts/lib.sh),
# on free local ports from PG_JOBS_SHARDS_PORT (54700 by default) up, under PG_JOBS_SHARDS_DIR
# (/tmp/pg_jobs-shards by default).
#   scripts/shards.sh start N   start shard0..shardN-1 (pg_jobs preloaded, pg_jobs.shard set,
#                               the extension made in database postgres) and a router (PL/Proxy,
#                               router/pg_jobs_router.sql); prints name=DSN lines, router first
#   scripts/shards.sh stop      stop them all (the clusters are kept for the next start)
set -euo pipefail
shopt -s inherit_errexit  # (a cluster that fails to start inside $(...) stops the script)
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
base=${PG_JOBS_SHARDS_DIR:-/tmp/pg_jobs-shards}

dsn_of() { echo "host=127.0.0.1 port=$1 user=postgres dbname=postgres"; }
# As the router connects to a shard: as the role calling the router (PL/Proxy adds it).
routed_dsn() { echo "host=127.0.0.1 port=$1 dbname=postgres connect_timeout=2"; }

# Starts the cluster in $1 on a free port (its port from the last start when it has one) and
# echoes the port.
start_cluster() {
  local dir=$1 conf=$2 port
  if [ -f "$dir/PG_VERSION" ]; then
    port=$(sed -n 's/^port = \([0-9]*\)$/\1/p' "$dir/postgresql.conf" | tail -1)
    port_in_use "$port" && { echo "shards: port $port of $dir is taken; run scripts/shards.sh stop, or remove $base" >&2; exit 1; }
  else
    port=$(free_port "${next_port:-${PG_JOBS_SHARDS_PORT:-54700}}")
  fi
  bash "$here/cluster.sh" start "$dir" "$port" "$conf" >/dev/null
  next_port=$((port + 1))
  echo "$port"
}

case "${1:-}" in
  start)
    n=${2:?usage: scripts/shards.sh start N}
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 256 ] ||
      { echo "shards: N must be 1 to 256, got $n" >&2; exit 2; }
    if [ -f "$base/count" ] && [ "$(cat "$base/count")" != "$n" ]; then
      echo "shards: $base holds $(cat "$base/count") shards; scripts/shards.sh stop and remove it first" >&2
      exit 2
    fi
    # (the postgres user makes the clusters in it: a directory of mktemp -d is root's alone)
    mkdir -p "$base" && chmod a+rx "$base" && echo "$n" >"$base/count"
    conf=$(mktemp) && trap 'rm -f "$conf"' EXIT && chmod 644 "$conf"
    shards=() routed=()
    for ((i = 0; i < n; i++)); do
      printf 'pg_jobs.shard = %d\nmax_connections = 200\n' "$i" >"$conf"
      next_port=$(free_port "${next_port:-${PG_JOBS_SHARDS_PORT:-54700}}")
      port=$(start_cluster "$base/shard$i" "$conf")
      next_port=$((port + 1))
      as_pg "$PG_BIN/psql" -qAtX -h 127.0.0.1 -p "$port" -U postgres -d postgres \
        -c "create extension if not exists pg_jobs" >/dev/null
      shards+=("$(dsn_of "$port")")
      routed+=("$(routed_dsn "$port")")
    done
    : >"$conf"
    next_port=$(free_port "$next_port")
    port=$(start_cluster "$base/router" "$conf")
    # The router's shards, one connection string each, in shard order.
    list=$(printf "%s\n" "${routed[@]}" | sed "s/'/''/g; s/.*/'&'/" | paste -sd, -)
    as_pg "$PG_BIN/psql" -qAtX -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres \
      -v shards="array[$list]" -f - <"$here/../router/pg_jobs_router.sql" >/dev/null
    echo "router=$(dsn_of "$port")"
    for ((i = 0; i < n; i++)); do echo "shard$i=${shards[$i]}"; done
    ;;
  stop)
    for dir in "$base"/router "$base"/shard*; do
      [ -d "$dir" ] && bash "$here/cluster.sh" stop "$dir"
    done
    ;;
  *)
    echo "usage: $0 start N | stop" >&2
    exit 2
    ;;
esac
