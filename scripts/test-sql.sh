#!/usr/bin/env bash
# The SQL-level tests against the installed extension, each in a temporary instance run as
# postgres: pg_regress golden files (pg_test/sql, pg_test/expected) and isolation specs
# (pg_test/isolation). On a difference it prints regression.diffs and fails.
#   scripts/test-sql.sh [all|regress|isolation]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
PGXS_TEST=$("$PG_CONFIG" --pkglibdir)/pgxs/src/test
work=$(mktemp -d /tmp/pg_jobs-sqltest.XXXXXX)
cp -r pg_test "$work/"
chown -R postgres: "$work"
trap 'rm -rf "$work"' EXIT

run() {  # run NAME TOOL INPUTDIR TESTS...
  local name=$1 tool=$2 input=$3; shift 3
  regress_or_show "test-sql: $name" "$name" "$work/$name-out" \
    as_pg "$tool" --temp-instance="$work/$name-instance" \
      --bindir="$PG_BIN" --port="${PG_JOBS_TEST_PORT:-54391}" \
      --inputdir="$input" --outputdir="$work/$name-out" --load-extension=pg_jobs \
      --dbname=pg_jobs_regress "$@"
}

what=${1:-all}
if [ "$what" != isolation ]; then
  mapfile -t regress < <(cd pg_test/sql && ls *.sql | sed 's/\.sql$//')
  run regress "$PGXS_TEST/regress/pg_regress" "$work/pg_test" "${regress[@]}"
fi
if [ "$what" != regress ]; then
  mapfile -t specs < <(cd pg_test/isolation/specs && ls *.spec | sed 's/\.spec$//')
  run isolation "$PGXS_TEST/isolation/pg_isolation_regress" "$work/pg_test/isolation" "${specs[@]}"
fi
