#!/usr/bin/env bash
# A PostgreSQL server to keep working on after the demo: pg_jobs preloaded, every database
# swept, data kept in /var/lib/pg_jobs-dev (PG_JOBS_DEV_DIR) across restarts, listening on
# 127.0.0.1 and its own socket directory, trusting local connections (a development server:
# do not expose it). Builds and installs pg_jobs first when it is missing (scripts/setup.sh).
#   scripts/dev-server.sh start   start it (made the first time) on a free port; prints how to connect
#   scripts/dev-server.sh stop    stop it (its data stays)
#   scripts/dev-server.sh status  whether it runs, and how to connect
# PG_JOBS_DEV_PORT picks the port (default: the first free one from 54440); PG_JOBS_PG=16, 17
# or 18 runs that release instead of 15.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

dir=${PG_JOBS_DEV_DIR:-/var/lib/pg_jobs-dev${PG_JOBS_PG:+-$PG_JOBS_PG}}

port_of() {
  sed -n 's/^port = \([0-9]*\)$/\1/p' "$dir/postgresql.conf" | tail -1
}

say_how() {
  local port
  port=$(port_of)
  echo "dev-server: PostgreSQL $PG_MAJOR with pg_jobs preloaded, data in $dir, port $port"
  echo "  connect:  psql \"host=127.0.0.1 port=$port user=postgres dbname=postgres\""
  echo "  then:     create extension pg_jobs;   (once per database)"
  echo "  URL:      postgresql://postgres@127.0.0.1:$port/postgres"
  echo "  stop:     bash scripts/dev-server.sh stop   (the data stays; start brings it back)"
}

case "${1:-}" in
  start)
    if [ ! -f "$("$PG_CONFIG" --pkglibdir)/pg_jobs.so" ]; then
      bash scripts/setup.sh
    fi
    if [ -f "$dir/postmaster.pid" ] && as_pg "$PG_BIN/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
      say_how
      exit 0
    fi
    if [ -f "$dir/PG_VERSION" ]; then port=$(port_of); else port=${PG_JOBS_DEV_PORT:-$(free_port 54440)}; fi
    bash scripts/cluster.sh start "$dir" "$port" >/dev/null
    say_how
    ;;
  stop)
    bash scripts/cluster.sh stop "$dir"
    echo "dev-server: stopped; its data stays in $dir"
    ;;
  status)
    if [ -f "$dir/postmaster.pid" ] && as_pg "$PG_BIN/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
      say_how
    else
      echo "dev-server: not running (bash scripts/dev-server.sh start)"
      exit 3
    fi
    ;;
  *)
    echo "usage: $0 start | stop | status" >&2
    exit 2
    ;;
esac
