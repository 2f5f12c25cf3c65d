#!/usr/bin/env bash
# Runs every test of pg_jobs, as root on Debian 12: lints, the in-server tests (cargo pgrx
# test), the pg_regress golden files, the isolation specs, the packaged tarball installed and
# tested, the upgrade from every earlier release, and the tests from outside the server
# (pytest against throwaway clusters, on that install), all on PostgreSQL 15, and the
# libraries' tests and conformance runs; the SQL-only edition (scripts/test-sql-only.sh);
# beside those, the in-server tests, the golden files, the isolation specs, the package, the
# upgrades and the tests that can differ by release on 16, 17 and 18 (scripts/test-releases.sh).
#   scripts/test.sh --quick   a first check in a few minutes once built: the golden files and
#                             isolation specs, and a drain of 10,000 jobs by 8 workers; it
#                             installs only what those need
#   scripts/test.sh --reserve-ports   also reserve the test ports machine-wide (below)
# Installs what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

# The servers the tests start listen on ports 54380-54499, inside Linux's ephemeral range, so a
# client connection elsewhere can hold one as its local port for a while (every start retries a
# bind that failed). --reserve-ports (or PG_JOBS_RESERVE_PORTS=1, as CI sets) reserves them in
# /proc/sys/net/ipv4/ip_local_reserved_ports until reboot; nothing outside the clone changes
# otherwise.
quick=0
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    --reserve-ports) export PG_JOBS_RESERVE_PORTS=1 ;;
    *) echo "usage: scripts/test.sh [--quick] [--reserve-ports]" >&2; exit 2 ;;
  esac
done
if [ "${PG_JOBS_RESERVE_PORTS:-}" = 1 ] && [ -w /proc/sys/net/ipv4/ip_local_reserved_ports ] &&
   ! grep -q "54380-54499" /proc/sys/net/ipv4/ip_local_reserved_ports; then
  echo "test: reserving ports 54380-54499 in /proc/sys/net/ipv4/ip_local_reserved_ports (until reboot)"
fi

if [ $quick = 1 ]; then
  bash scripts/setup.sh --quick
  echo "== quick check: pg_regress and isolation specs, then a drain (tests/claims/test_drain.py)"
  bash scripts/test-sql.sh
  dir=$(mktemp -d /tmp/pg_jobs-quick.XXXXXX)
  trap 'bash scripts/cluster.sh stop "$dir"; rm -rf "$dir"' EXIT
  PG_JOBS_DSN=$(bash scripts/cluster.sh start "$dir" "${PG_JOBS_E2E_PORT:-$(free_port 54392)}" tests/cluster.conf)
  export PG_JOBS_DSN
  .venv/bin/python -m pytest -q tests/claims/test_drain.py
  echo "quick check passed; bash scripts/test.sh runs every test"
  exit 0
fi
bash scripts/setup.sh

echo "== cargo fmt, clippy (the extension, pgjobs and the Rust example), pgjobs built for its tests; gofmt, go vet (the Go example); ruff (the Python), mypy (its library); eslint, tsc and typedoc (the Node.js)"
.venv/bin/python -m ruff check tests cli/tests examples bench scripts clients sql-only
(cd examples/node && npx --no-install eslint .)
(cd clients/node && npx --no-install eslint . && npx --no-install tsc --noEmit -p tsconfig.test.json)
# The generated API reference (clients/node/docs/api) is current: typedoc writes what is committed.
(cd clients/node && npx --no-install typedoc --logLevel Warn && git diff --exit-code -- docs/api)
(cd clients/python && ../../.venv/bin/mypy src)
cargo fmt --check
cargo clippy --features "pg15 pg_test" --all-targets -- -D warnings
cargo clippy --quiet -p pgjobs --all-targets -- -D warnings
cargo build --quiet -p pgjobs  # target/debug/pgjobs, for cli/tests/test_cli.py
cargo test --quiet -p pgjobs
cargo fmt --check --manifest-path examples/rust/Cargo.toml
cargo clippy --quiet --release --locked --manifest-path examples/rust/Cargo.toml -- -D warnings
test -z "$(gofmt -l examples/go)"
(cd examples/go && GO111MODULE=off GOPATH=/usr/share/gocode go vet .)
bash scripts/build-examples.sh

echo "== in-server tests (cargo pgrx test; it installs a debug build into $("$PG_CONFIG" --pkglibdir),"
echo "   which the package step below replaces with the release build)"
pgdata=/tmp/pg_jobs-pgrx-test
cargo pgrx test pg15 --runas postgres --pgdata "$pgdata"

echo "== pg_regress and isolation specs"
bash scripts/test-sql.sh

echo "== package: build the tarball, install it in place of the build, run the SQL tests on it"
bash scripts/package.sh --check

echo "== upgrades: every earlier release, filled, ALTER EXTENSION UPDATE, checked (on the package)"
bash scripts/upgrade-check.sh

dir=$(mktemp -d /tmp/pg_jobs-e2e.XXXXXX)
# PostgreSQL 16-18 (scripts/test-releases.sh: mostly builds, on their own ports) run beside the
# tests from outside on 15 and the libraries' (mostly waiting), niced so that the builds take
# the processor only when the tests leave it; their log is printed when they end.
# Then every artifact of a release, from those builds (scripts/release.sh --check).
echo "== PostgreSQL 16, 17 and 18 (scripts/test-releases.sh), then a release's artifacts (scripts/release.sh"
echo "   --check), in the background: their log follows the libraries'"
releases_log=$(mktemp /tmp/pg_jobs-releases.XXXXXX)
setsid nice -n 10 bash -c 'bash scripts/test-releases.sh && bash scripts/release.sh --check' >"$releases_log" 2>&1 & releases_run=$!
# The SQL-only edition (scripts/test-sql-only.sh: its file current, on a PostgreSQL 16 without
# pg_jobs and a 15 with pg_cron, mostly waiting for pg_cron's minute) beside them too.
echo "== the SQL-only edition (scripts/test-sql-only.sh), in the background: its log follows the libraries'"
sql_only_log=$(mktemp /tmp/pg_jobs-sql-only.XXXXXX)
setsid bash scripts/test-sql-only.sh >"$sql_only_log" 2>&1 & sql_only_run=$!
# (A command that fails in an EXIT trap under set -e becomes the script's exit status: the
# kill of a run that has already ended must not.)
trap 'kill -- "-$releases_run" "-$sql_only_run" 2>/dev/null || true; bash scripts/cluster.sh stop "$dir"; rm -rf "$dir" "$releases_log" "$sql_only_log"' EXIT

echo "== tests from outside the server (pytest)"
PG_JOBS_DSN=$(bash scripts/cluster.sh start "$dir" "${PG_JOBS_E2E_PORT:-54392}" tests/cluster.conf)
export PG_JOBS_DSN
.venv/bin/python -m pytest -q -rA tests cli/tests
echo "== the libraries (clients/node, clients/python): their tests, and the conformance suite with each"
echo "   one's worker (Node.js; Python with async and with plain handlers), side by side"
# Its report (TAP) is long and a failure's account sits where the failing file's tests ran:
# each "not ok" block is printed again at the end.
if ! (cd clients/node && PG_JOBS_DSN="postgres://postgres@127.0.0.1:${PG_JOBS_E2E_PORT:-54392}/postgres" npm test --silent) | tee "$dir/node-tests.log"; then
  echo "== clients/node's failing tests, again:"
  awk '/^ *not ok /{show=1; indent=match($0, /[^ ]/)} show{print} show && /^ *\.\.\.$/ && match($0, /[^ ]/) == indent + 2 {show=0}' "$dir/node-tests.log"
  exit 1
fi
.venv/bin/python -m pytest -q -rA clients/python/tests
conformance() {  # conformance NAME RESTART_PORT PGBOUNCER_PORT METRICS_PORT SHARD_PORT WORKER...
  local name=$1 restart=$2 bouncer=$3 metrics=$4 shard=$5; shift 5
  PG_JOBS_CONFORMANCE_RESTART_PORT=$restart PG_JOBS_CONFORMANCE_PGBOUNCER_PORT=$bouncer \
    PG_JOBS_CONFORMANCE_METRICS_PORT=$metrics PG_JOBS_CONFORMANCE_SHARD_PORT=$shard PG_JOBS_CONFORMANCE_WORKER="$*" \
    .venv/bin/python -m pytest -q -rA -p no:cacheprovider clients/conformance >"$dir/conformance-$name.log" 2>&1
}
conformance node 54431 54432 54479 54490 node clients/node/conformance/worker.mjs & node_run=$!
conformance python-async 54436 54437 54481 54492 .venv/bin/python clients/python/conformance/worker.py --handlers async & async_run=$!
conformance python-sync 54438 54439 54482 54494 .venv/bin/python clients/python/conformance/worker.py --handlers sync & sync_run=$!
failed=0
for run in node:$node_run python-async:$async_run python-sync:$sync_run; do
  if ! wait "${run#*:}"; then failed=1; fi
  echo "-- conformance, ${run%%:*}: $(tail -1 "$dir/conformance-${run%%:*}.log")"
done
if [ $failed = 1 ]; then cat "$dir"/conformance-*.log; exit 1; fi
bash scripts/cluster.sh stop "$dir"

echo "== the SQL-only edition (scripts/test-sql-only.sh): waiting for it to end"
sql_only_rc=0
wait "$sql_only_run" || sql_only_rc=$?
cat "$sql_only_log"
if [ $sql_only_rc != 0 ]; then echo "scripts/test-sql-only.sh failed (exit $sql_only_rc)" >&2; exit 1; fi

echo "== PostgreSQL 16, 17 and 18 (scripts/test-releases.sh) and the release: waiting for them to end"
releases_rc=0
wait "$releases_run" || releases_rc=$?
cat "$releases_log"
if [ $releases_rc != 0 ]; then echo "scripts/test-releases.sh or scripts/release.sh failed (exit $releases_rc)" >&2; exit 1; fi
