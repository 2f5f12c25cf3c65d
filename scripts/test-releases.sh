#!/usr/bin/env bash
# pg_jobs on PostgreSQL 16, 17 and 18 (15 is the default that scripts/test.sh tests in full).
# For each: the server (scripts/pg-servers.sh); on 18 the in-server tests (cargo pgrx test); the
# tarball built for it, refusing another release and installed from it, with the pg_regress
# golden files and the isolation specs run on that install (scripts/package.sh --check); the
# upgrade from every earlier release of pg_jobs (scripts/upgrade-check.sh); and, on a
# preloaded cluster of that release, the tests from outside that can differ by release: on 18
# those of the code built per release (the background worker and its launcher, shared memory:
# wake-ups, outcome counters, the relay; the blocking claim and its statement check; durability;
# vacuum), of replication, of plans, of sizes (TOAST), of families and of hostile roles and
# tenants (RELEASE_TESTS); on 16 and 17 those of the background worker and of hostile roles
# (tests/server/test_sweeper.py, tests/security/test_security.py).
# The tests of SQL behaviour run on every release as golden files and isolation specs; the
# clients' (examples, docs, the demo, load, chaos, the model) and the conformance suite, which
# cannot differ by release, on 15.
#   scripts/test-releases.sh [N...]     (default: 16 17 18)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

RELEASE_TESTS=(tests/server/test_sweeper.py tests/security/test_security.py tests/server/test_launcher.py
  tests/claims/test_blocking_claim.py tests/claims/test_wakeups.py tests/claims/test_held_back.py tests/claims/test_relay.py
  tests/jobs/test_outcomes.py tests/claims/test_async_claims.py tests/claims/test_complete_and_claim.py
  tests/server/test_failover.py tests/claims/test_plans.py tests/security/test_tenant_isolation.py tests/jobs/test_timeouts.py
  tests/security/test_tenant_admin.py tests/jobs/test_wait_for_job.py tests/security/test_bindings.py tests/jobs/test_sizes.py
  tests/jobs/test_children.py)

# The ports of the tests that start servers of their own, apart from those of the run on 15,
# so that scripts/test.sh can run both side by side.
export PG_JOBS_FAILOVER_PORT=54460 PG_JOBS_NOPRELOAD_PORT=54462 PG_JOBS_BACKTRACE_PORT=54463 \
  PG_JOBS_SHUTDOWN_PORT=54464 PG_JOBS_LAUNCHER_PORT=54465 PG_JOBS_CRASH_PORT=54466

releases=("$@")
[ $# -gt 0 ] || releases=(16 17 18)

bash scripts/pg-servers.sh "${releases[@]}"
for n in 15 "${releases[@]}"; do
  pgrx_knows_release "$n"
done

for n in "${releases[@]}"; do
  echo "== PostgreSQL $n: package, golden files and isolation specs, upgrade, the background worker (18: in-server tests first)"
  export PG_JOBS_PG=$n
  . scripts/lib.sh
  # On 18, the in-server tests (a debug build, which the package check then replaces): they
  # test what Rust answers to SQL, which has no code of its own per release; the code that
  # differs by release (src/background/vacuum.rs, src/background/launcher.rs) is the background worker's, tested
  # from outside on each release below. Then, on each, the tarball for this release,
  # installed from it; its SQL tests; the upgrade from every earlier release of pg_jobs.
  if [ "$n" = 18 ]; then
    echo "(cargo pgrx test installs a debug build into $("$PG_CONFIG" --pkglibdir); the package check replaces it)"
    cargo pgrx test "pg$n" --no-default-features --runas postgres --pgdata "/tmp/pg_jobs-pgrx-test-$n"
  fi
  PG_JOBS_TEST_PORT=$((54405 + n - 16)) bash scripts/package.sh --check
  PG_JOBS_UPGRADE_PORT=$((54408 + n - 16)) bash scripts/upgrade-check.sh
  dir=$(mktemp -d /tmp/pg_jobs-e2e-pg$n.XXXXXX)
  trap 'bash scripts/cluster.sh stop "$dir"; rm -rf "$dir"' EXIT
  PG_JOBS_DSN=$(bash scripts/cluster.sh start "$dir" $((54402 + n - 16)) tests/cluster.conf)
  export PG_JOBS_DSN
  # On 18, the newest, the tests that can differ by release; on 16 and 17 those of the
  # background worker and of hostile roles.
  if [ "$n" = 18 ]; then
    .venv/bin/python -m pytest -q -rA -p no:cacheprovider "${RELEASE_TESTS[@]}"
  else
    .venv/bin/python -m pytest -q -rA -p no:cacheprovider tests/server/test_sweeper.py tests/security/test_security.py
  fi
  bash scripts/cluster.sh stop "$dir"
  rm -rf "$dir"
  trap - EXIT
done
