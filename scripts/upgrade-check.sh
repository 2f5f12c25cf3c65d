#!/usr/bin/env bash
# Upgrade check. From 0.1.0 on, each release's install script is kept in sql/released/ and
# each release has sql/pg_jobs--A--B.sql. For every earlier release, on a throwaway cluster:
#   1. install it as that release installed it, and fill it with a job in every state
#      (pg_test/upgrade/fill.sql, which uses only that release's API);
#   2. ALTER EXTENSION pg_jobs UPDATE, and check the version is the current one and that no
#      row of any table changed (pg_test/upgrade/digest.sql);
#   3. check the upgraded database defines exactly what a fresh install of the current
#      version does, object for object (pg_test/upgrade/fingerprint.sql);
#   4. pg_dump it and restore the dump into a new database: every row comes back (and a fair
#      queue's index is made again);
#   5. use it: claims taken before the upgrade settle with their tokens, steps, claims,
#      idempotency keys and event waits work (pg_test/upgrade/use.sql);
#   6. a role granted jobs.grant_worker before the upgrade still enqueues and claims (and may
#      read its jobs' state) after it,
#      and one granted jobs.grant_admin still grants and reads the tables.
# Needs the current build installed (scripts/setup.sh). Exits non-zero on any difference.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

# The releases' scripts are as they were released; the one to this version is made by the
# build (build.rs, scripts/upgrade-script.py) that installed it.
bash scripts/check-released.sh
ext_dir="$("$PG_CONFIG" --sharedir)/extension"
current=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
if [ ! -f "$ext_dir/pg_jobs--$current.sql" ]; then
  echo "upgrade-check: pg_jobs $current is not installed; run scripts/setup.sh" >&2
  exit 1
fi
work=$(mktemp -d /tmp/pg_jobs-upgrade.XXXXXX)
chmod 755 "$work"
trap 'bash scripts/cluster.sh stop "$work/data" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
dsn=$(bash scripts/cluster.sh start "$work/data" "${PG_JOBS_UPGRADE_PORT:-54398}")
sql() { local db=$1; shift; "$PG_BIN/psql" "$dsn dbname=$db" -X -q -A -t -v ON_ERROR_STOP=1 "$@"; }
fail() { echo "upgrade-check: FAILED: $*" >&2; exit 1; }

sql postgres -c "create database fresh"
sql fresh -c "create extension pg_jobs"
sql fresh -f pg_test/upgrade/fingerprint.sql >"$work/fresh.txt"

checked=0
for script in sql/released/pg_jobs--*.sql; do
  old=$(basename "$script" .sql)
  old=${old#pg_jobs--}
  [ "$old" = "$current" ] && continue
  echo "upgrade-check: $old -> $current"
  install -m 644 "$script" "$ext_dir/"
  db="from_${old//./_}"
  sql postgres -c "create database $db"
  sql "$db" -c "create extension pg_jobs version '$old'" -f pg_test/upgrade/fill.sql >/dev/null
  sql "$db" -f pg_test/upgrade/digest.sql >"$work/before.txt"

  sql "$db" -c "alter extension pg_jobs update"
  got=$(sql "$db" -c "select extversion from pg_extension where extname = 'pg_jobs'")
  [ "$got" = "$current" ] || fail "ALTER EXTENSION UPDATE from $old left version $got, not $current"
  sql "$db" -f pg_test/upgrade/digest.sql >"$work/after.txt"
  diff -u "$work/before.txt" "$work/after.txt" || fail "the upgrade from $old changed rows (above)"
  echo "  rows unchanged: $(tr '\n' ';' <"$work/after.txt")"

  sql "$db" -f pg_test/upgrade/fingerprint.sql >"$work/upgraded.txt"
  diff -u "$work/fresh.txt" "$work/upgraded.txt" ||
    fail "upgraded from $old differs from a fresh install of $current (above: - fresh, + upgraded)"
  echo "  defines what a fresh install does ($(grep -c "" "$work/fresh.txt") lines of pg_test/upgrade/fingerprint.sql)"

  "$PG_BIN/pg_dump" "$dsn dbname=$db" -Fc -f "$work/dump"
  sql postgres -c "create database restored_$db"
  "$PG_BIN/pg_restore" --exit-on-error -d "$dsn dbname=restored_$db" "$work/dump"
  sql "restored_$db" -f pg_test/upgrade/digest.sql >"$work/restored.txt"
  diff -u "$work/after.txt" "$work/restored.txt" || fail "pg_dump and pg_restore lost rows (above)"
  echo "  pg_dump and pg_restore carry every row"

  # A fair queue's index is made by the trigger of its row, not by the install: a restore, which
  # writes the row again, makes it again.
  sql "restored_$db" -c "select jobs.set_fairness('fair_restored', 'tenant')
                         from jobs.enqueue('j', queue => 'fair_restored', tenant_id => 't')" >/dev/null
  "$PG_BIN/pg_dump" "$dsn dbname=restored_$db" -Fc -f "$work/dump_fair"
  sql postgres -c "create database fair_$db"
  "$PG_BIN/pg_restore" --exit-on-error -d "$dsn dbname=fair_$db" "$work/dump_fair"
  [ "$(sql "fair_$db" -c "select count(*) from jobs.claim('w', array['fair_restored'])
                          where to_regclass('jobs_data.jobs_fair_idx') is not null")" = 1 ] ||
    fail "a restore of a fair queue did not make jobs_fair_idx again, or its job was not claimed"
  echo "  a restored fair queue has its index again, and its job is claimed"

  sql "$db" -f pg_test/upgrade/use.sql | sed 's/^/  /'

  # Roles granted before the upgrade keep what they were granted, also where a function's
  # arguments changed (and it was replaced): a worker still claims, a producer still enqueues.
  sql postgres -c "create database roles_$db"
  sql "roles_$db" -c "create extension pg_jobs version '$old'" \
    -c "create role upgrade_worker_$db" -c "select jobs.grant_worker('upgrade_worker_$db')" \
    -c "alter extension pg_jobs update" -c "set role upgrade_worker_$db" \
    -c "select jobs.enqueue('x') is not null" -c "select count(*) from jobs.claim('w')" \
    -c "select count(*) from jobs.complete_and_claim('{}', '{}', 'w')" \
    -c "select jobs.fail(id, claim, 'boom') from jobs.claim('w')" \
    -c "select count(*) from jobs.get_jobs('{}')" >/dev/null ||
    fail "a role granted jobs.grant_worker before the upgrade from $old cannot enqueue, claim, fail or read its jobs after it"
  echo "  a worker role granted before the upgrade enqueues, claims, completes and claims, fails, and reads its jobs' state after it"
  # An admin keeps every function, the grants too (they were dropped and made again: their
  # answer changed from void to text).
  sql postgres -c "create database admins_$db"
  sql "admins_$db" -c "create extension pg_jobs version '$old'" \
    -c "create role upgrade_admin_$db" -c "create role upgrade_other_$db" \
    -c "select jobs.grant_admin('upgrade_admin_$db')" -c "alter extension pg_jobs update" \
    -c "set role upgrade_admin_$db" -c "select jobs.grant_producer('upgrade_other_$db')" \
    -c "select count(*) from jobs.jobs" >/dev/null ||
    fail "a role granted jobs.grant_admin before the upgrade from $old cannot grant or read after it"
  echo "  an admin role granted before the upgrade grants and reads the tables after it"
  checked=$((checked + 1))
done
[ "$checked" -gt 0 ] || fail "no earlier release in sql/released/"
echo "upgrade-check: $checked upgrade path(s) to $current checked"
