#!/usr/bin/env bash
# Runs every benchmark of docs/BENCHMARKS.md in one go, on a throwaway cluster, and exits
# non-zero when a target is missed. Arguments go to bench/run.py (--reps, --jobs, --seconds,
# --churn-minutes, ...); `bash bench/run.sh --quick` is a smaller run of the same shape.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
bash scripts/setup.sh

args=("$@")
if [ "${1:-}" = "--quick" ]; then
  args=(--reps 3 --jobs 20000 --jobs-per-batch-job 2000 --seconds 5 --ceiling-seconds 3
        --big 1000000 --churn-minutes 3 --churn-rate 300 "${@:2}")
fi

dir=$(mktemp -d /tmp/pg_jobs-bench.XXXXXX)
trap 'bash scripts/cluster.sh stop "$dir"; rm -rf "$dir"' EXIT
conf=$(mktemp /tmp/pg_jobs-bench-conf.XXXXXX)
cat > "$conf" <<CONF
shared_buffers = 1GB
max_wal_size = 8GB
checkpoint_timeout = 30min
pg_jobs.database_name = 'bench'
CONF
dsn=$(bash scripts/cluster.sh start "$dir" "${PG_JOBS_BENCH_PORT:-54410}" "$conf")
rm -f "$conf"
psql "$dsn" -X -q -c "create database bench"
.venv/bin/python bench/run.py --dsn "${dsn/dbname=postgres/dbname=bench}" \
  --command "bash bench/run.sh $*" --out docs/bench-results.json --report docs/bench-report.md "${args[@]}"
