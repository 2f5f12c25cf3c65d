#!/usr/bin/env bash
# Installs everything pg_jobs needs to build, test and run on Debian 12, as root, and installs
# the extension into the system's PostgreSQL 15 (or, with PG_JOBS_PG=16, 17 or 18, into that
# release under /opt/pg_jobs-pg/N, scripts/pg-servers.sh). Safe to re-run: what is there is
# reused. It says what it changes before it changes it.
#   scripts/setup.sh          everything the test command needs
#   scripts/setup.sh --demo   only what the demo needs: PostgreSQL 15 and its headers, clang,
#                             cargo-pgrx, a venv with psycopg and the Python library, the build
#   scripts/setup.sh --quick  what the demo needs, and pytest (scripts/test.sh --quick)
#   scripts/setup.sh --deb FILE   the demo's needs from a release's .deb, nothing compiled:
#                             PostgreSQL 15, the .deb installed with apt, a venv with psycopg
#                             and the Python library
set -euo pipefail
demo=0  # 1: the demo's needs only (--demo, --quick, --deb)
quick=0
deb=""
case "${1:-}" in
  --demo) demo=1 ;;
  --quick) demo=1 quick=1 ;;
  --deb) demo=1 deb=$(realpath "${2:?--deb needs the .deb file}") ;;
esac
cd "$(dirname "$0")/.."
. scripts/lib.sh
PGRX_VERSION=0.18.0

# Each step says what it does, with the time since setup started, and keeps its output in one
# log; a step that fails prints the end of the log.
LOG=${PG_JOBS_SETUP_LOG:-/tmp/pg_jobs-setup.log}
: >"$LOG"
# The Debian packages this script has installed, one per line, kept in the clone across runs
# (the demo lists them in its closing lines).
INSTALLED=.setup-installed
started=$SECONDS
say() { printf 'setup: [%d:%02d] %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) "$*"; }
# step COMMAND...: runs it with its output in the log; every 30 s while it runs, a line says
# it still does and what it is at (the log's last line: the crate compiling, the package
# unpacking), so a long build is never silent.
step() {
  "$@" >>"$LOG" 2>&1 &
  local pid=$! rc=0 waited=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    waited=$((waited + 1))
    if [ $((waited % 30)) = 0 ] && kill -0 "$pid" 2>/dev/null; then
      say "  still at it: $(tail -n 1 "$LOG" | tr -d '\r' | sed 's/^ *//' | cut -c1-90)"
    fi
  done
  wait "$pid" || rc=$?
  if [ "$rc" != 0 ]; then
    say "failed: $*; the end of $LOG:"
    tail -40 "$LOG"
    exit 1
  fi
}

packages=(postgresql-15 python3 python3-venv
          iproute2  # ss: which ports are free (scripts/lib.sh), absent from minimal Debian images
          patch)  # scripts/test-sql-only.sh: the edition's differences to the expected outputs
[ -n "$deb" ] || packages+=(postgresql-server-dev-15 libclang-dev clang pkg-config)  # the build
if [ $demo = 0 ]; then
  packages+=(sudo  # cargo pgrx test --runas
             libssl-dev  # pgjobs (cli/): TLS through OpenSSL
             golang-go golang-github-lib-pq-dev  # the Go example worker, from Debian
             pgbouncer  # tests/server/test_pgbouncer.py: the blocking claim through transaction pooling
             postgresql-15-cron  # sql-only/tests/test_pg_cron.py: the SQL-only edition swept by pg_cron
             postgresql-15-plproxy  # scripts/shards.sh, tests/shards: the router (router/pg_jobs_router.sql)
             postgresql-15-auto-failover  # tests/server/test_auto_failover.py: failover by pg_auto_failover
             # tests/shipping/test_languages.py: docs/LANGUAGES.md's Java, Go, Ruby and Perl programs
             default-jdk-headless libpostgresql-jdbc-java golang-github-jackc-pgx-v4-dev ruby-pg libdbd-pg-perl
             chromium chromium-driver  # cli/tests/test_ui.py: the dashboard in a headless browser (Selenium)
             openssl)  # cli/tests/test_cli.py: a self-signed certificate for the TLS test
fi
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Node.js for the example worker in examples/node: the machine's own, else Debian's.
[ $demo = 1 ] || command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
  printf '%s\n' "${missing[@]}" >>"$INSTALLED"
  say "apt-get update, then apt-get install ${missing[*]} (apt may upgrade packages they"
  say "  depend on, e.g. an installed postgresql-15 to the archive's version of the headers)"
  step apt-get update -qq
  step env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

if [ -n "$deb" ]; then
  say "apt-get install $deb (pg_jobs for PostgreSQL 15, nothing to compile)"
  step env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb"
fi
if [ -z "$deb" ] && [ "$(cargo pgrx --version 2>/dev/null | awk '{print $2}')" != "$PGRX_VERSION" ]; then
  say "building and installing cargo-pgrx $PGRX_VERSION into ${CARGO_HOME:-~/.cargo}/bin (5 to 10 minutes, once)"
  step cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
fi
if [ -z "$deb" ] && ! grep -q "pg15" "${PGRX_HOME:-$HOME/.pgrx}/config.toml" 2>/dev/null; then
  say "cargo pgrx init --pg15 (writes ~/.pgrx/config.toml)"
  step cargo pgrx init --pg15 /usr/lib/postgresql/15/bin/pg_config
fi

if [ ! -x .venv/bin/python ]; then
  say "a Python virtual environment for the tests and the demo in .venv"
  step python3 -m venv .venv
fi
if [ $demo = 1 ]; then
  if ! .venv/bin/python -c 'import psycopg' 2>/dev/null; then
    say "pip install psycopg into .venv"
    step .venv/bin/pip install --quiet --disable-pip-version-check 'psycopg[binary]>=3.1,<3.3'
  fi
  if [ $quick = 1 ] && ! .venv/bin/python -c 'import pytest' 2>/dev/null; then
    say "pip install pytest into .venv"
    step .venv/bin/pip install --quiet --disable-pip-version-check 'pytest>=7,<9'
  fi
elif ! .venv/bin/python -c 'import psycopg, pytest, hypothesis, mypy, prometheus_client, sqlalchemy, greenlet, django, django_tasks, asyncpg, opentelemetry.sdk, selenium, build' 2>/dev/null ||
   ! .venv/bin/python -m ruff --version >/dev/null 2>&1; then
  say "pip install psycopg, pytest, hypothesis, ruff, mypy, prometheus-client, SQLAlchemy, Django, asyncpg, OpenTelemetry, Selenium and build into .venv"
  step .venv/bin/pip install --quiet --disable-pip-version-check 'psycopg[binary]>=3.1,<3.3' 'pytest>=7,<9' \
    'hypothesis>=6,<7' 'ruff>=0.6,<1' 'mypy>=1.10,<2' 'prometheus-client>=0.17,<1' 'sqlalchemy[asyncio]>=2,<3' \
    'django>=5.2,<5.3' 'django-tasks>=0.12,<0.13' 'asyncpg>=0.29,<1' 'opentelemetry-api>=1.20,<2' \
    'opentelemetry-sdk>=1.20,<2' 'selenium>=4.20,<5' 'build>=1,<2'
fi
if ! .venv/bin/python -c 'import pg_jobs' 2>/dev/null; then
  say "pip install -e clients/python (the Python library, for its tests and the conformance suite)"
  step .venv/bin/pip install --quiet --disable-pip-version-check --no-deps -e ./clients/python
fi

if [ $demo = 0 ] && [ ! -d examples/node/node_modules ]; then
  say "npm ci in examples/node (its node_modules)"
  step bash -c "cd examples/node && npm ci --no-audit --no-fund --silent"
fi
if [ $demo = 0 ] && [ ! -d clients/node/node_modules ]; then
  say "npm ci in clients/node (the Node.js library's build and lint tools)"
  step bash -c "cd clients/node && npm ci --ignore-scripts --no-audit --no-fund --silent"
fi

# Another release (PG_JOBS_PG=16, 17 or 18): its server under /opt/pg_jobs-pg/N.
if [ "$PG_MAJOR" != 15 ]; then
  say "PostgreSQL $PG_MAJOR under /opt/pg_jobs-pg/$PG_MAJOR (scripts/pg-servers.sh)"
  step bash scripts/pg-servers.sh "$PG_MAJOR"
  step pgrx_knows_release "$PG_MAJOR"
fi

if [ -z "$deb" ]; then
  say "building pg_jobs (release) and installing it into $("$PG_CONFIG" --pkglibdir) (minutes the first time)"
  # shellcheck disable=SC2046  # pg_features is a list of words
  step cargo pgrx install --release $(pg_features) --pg-config "$PG_CONFIG"
fi
say "done (the output of every step is in $LOG)"
