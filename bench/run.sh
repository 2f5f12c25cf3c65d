#!/usr/bin/env bash
# Runs every benchmark of docs/BENCHMARKS.md in one go, on a throwaway cluster, and exits
# non-zero when a target is missed. Arguments go to bench/run.py (--reps, --jobs, --seconds,
# --churn-minutes, ...); `bash bench/run.sh --quick` is a smaller run of the same shape.
#   bash bench/run.sh [--pg N] [--quick] [run.py's arguments]
#       against PostgreSQL N (15, the default, Debian's; 16, 17 or 18 from /opt/pg_jobs-pg/N)
#   bash bench/run.sh --releases 15,18 [run.py's arguments, e.g. --clients 4 --reps 3]
#       the drains of pg_jobs and of the plain queue on each release, one cluster per
#       release, interleaved in one run (bench/results/results-releases.json; the table is printed)
#   bash bench/run.sh --wakeups [bench/wakeups.py's arguments, e.g. --seconds 15 --jobs 10000]
#       what waking workers costs the application's commit, and the wake latency of a blocking
#       claim, LISTEN and polling (bench/results/results-wakeups.json; the tables are printed)
set -euo pipefail
cd "$(dirname "$0")/.."
command=(bash bench/run.sh "$@")

releases=""
wakeups=""
case "${1:-}" in
  --pg) export PG_JOBS_PG=$2; shift 2 ;;
  --releases) releases=$2; shift 2 ;;
  --wakeups) wakeups=1; shift ;;
esac
. scripts/lib.sh

args=("$@")
if [ "${1:-}" = "--quick" ]; then
  args=(--reps 3 --jobs 20000 --jobs-per-batch-job 2000 --seconds 5 --ceiling-seconds 3
        --big 1000000 --churn-minutes 3 --churn-rate 300 "${@:2}")
fi

conf=$(mktemp /tmp/pg_jobs-bench-conf.XXXXXX)
cat > "$conf" <<CONF
shared_buffers = 1GB
max_wal_size = 8GB
checkpoint_timeout = 30min
pg_jobs.database_name = 'bench'
CONF
dirs=()
stop_all() {
  local d n
  for d in "${dirs[@]}"; do
    n=${d#/tmp/pg_jobs-bench-pg}
    PG_JOBS_PG=${n%%.*} bash scripts/cluster.sh stop "$d"
    rm -rf "$d"
  done
  rm -f "$conf"
}
trap stop_all EXIT
# start N PORT: builds and installs pg_jobs for PostgreSQL N, starts a cluster of it with a
# database "bench", and sets DSN to that database's connection string.
start() {
  PG_JOBS_PG=$1 bash scripts/setup.sh >&2
  local dir
  dir=$(mktemp -d "/tmp/pg_jobs-bench-pg$1.XXXXXX")
  dirs+=("$dir")
  DSN=$(PG_JOBS_PG=$1 bash scripts/cluster.sh start "$dir" "$2" "$conf")
  psql "$DSN" -X -q -c "create database bench"
  DSN=${DSN/dbname=postgres/dbname=bench}
}

if [ -n "$wakeups" ]; then
  sed -i '/pg_jobs.database_name/d' "$conf"  # every database swept: a sweeper beside each case
  start "$PG_MAJOR" "${PG_JOBS_BENCH_PORT:-54410}"
  psql "$DSN" -X -q -c "create database bench_notify" -c "create database bench_silent"
  PG_JOBS_PG_BIN=$PG_BIN .venv/bin/python bench/wakeups.py --dsn "$DSN" \
    --in-transaction-dsn "${DSN/dbname=bench/dbname=bench_notify}" \
    --silent-dsn "${DSN/dbname=bench/dbname=bench_silent}" --command "${command[*]}" "$@"
elif [ -n "$releases" ]; then
  specs=()
  port=${PG_JOBS_BENCH_PORT:-54410}
  for n in ${releases//,/ }; do
    start "$n" "$port"
    specs+=(--release "$n:$DSN")
    port=$((port + 1))
  done
  .venv/bin/python bench/run.py "${specs[@]}" --command "${command[*]}" \
    --out bench/results/results-releases.json --report /dev/null "${args[@]}"
else
  start "$PG_MAJOR" "${PG_JOBS_BENCH_PORT:-54410}"
  .venv/bin/python bench/run.py --dsn "$DSN" --command "${command[*]}" \
    --out bench/results/results.json --report bench/results/report.md "${args[@]}"
fi
