#!/usr/bin/env bash
# A throwaway PostgreSQL cluster with pg_jobs preloaded, run as the postgres user: 15, or the
# release PG_JOBS_PG names (scripts/lib.sh).
#   scripts/cluster.sh start DIR PORT [CONF]
#                                       initdb (once, appending the file CONF to postgresql.conf)
#                                       and start; prints the connection string
#   scripts/cluster.sh stop DIR         stop it (fast)
# It listens on 127.0.0.1 and a socket in DIR, trusts local connections, and writes DIR/log.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

case "${1:-}" in
  start)
    dir=$2 port=$3
    if [ ! -f "$dir/PG_VERSION" ]; then
      mkdir -p "$dir" && chown postgres: "$dir"
      as_pg "$PG_BIN/initdb" -D "$dir" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
      cat >> "$dir/postgresql.conf" <<CONF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
shared_preload_libraries = 'pg_jobs'
max_connections = 100
CONF
      if [ -n "${4:-}" ]; then cat "$4" >> "$dir/postgresql.conf"; fi
    fi
    # The test ports lie in Linux's ephemeral range (32768-60999), so a client connection
    # elsewhere can hold one as its local port for a while, and the server cannot bind it (a
    # failover test once failed so). The test command reserves them (PG_JOBS_RESERVE_PORTS=1,
    # until reboot); every start retries a bind that failed.
    reserved=/proc/sys/net/ipv4/ip_local_reserved_ports
    if [ "${PG_JOBS_RESERVE_PORTS:-}" = 1 ] && [ -w "$reserved" ] && ! grep -q "54380-54499" "$reserved"; then
      current=$(cat "$reserved")
      echo "${current:+$current,}54380-54499" >"$reserved" 2>/dev/null || true
    fi
    tries=0
    until as_pg "$PG_BIN/pg_ctl" -D "$dir" -l "$dir/log" -w start >/dev/null; do
      tries=$((tries + 1))
      if [ "$tries" -ge 10 ] || ! tail -5 "$dir/log" | grep -q "Address already in use"; then
        tail -20 "$dir/log" >&2
        # Who holds the port, when another socket does (ss, from iproute2).
        if command -v ss >/dev/null; then ss -tanp 2>/dev/null | grep -E "[:.]$port[[:space:]]" >&2 || true; fi
        exit 1
      fi
      sleep 1
    done
    echo "host=127.0.0.1 port=$port user=postgres dbname=postgres"
    ;;
  stop)
    dir=$2
    # Fast, and immediate if a fast stop has not finished in 30 s: never leave a server behind.
    if [ -f "$dir/postmaster.pid" ]; then
      as_pg "$PG_BIN/pg_ctl" -D "$dir" -m fast -w -t 30 stop >/dev/null 2>&1 ||
        as_pg "$PG_BIN/pg_ctl" -D "$dir" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    ;;
  *)
    echo "usage: $0 start DIR PORT | stop DIR" >&2
    exit 2
    ;;
esac
