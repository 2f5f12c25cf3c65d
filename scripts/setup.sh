#!/usr/bin/env bash
# Installs everything pg_jobs needs to build, test and run on Debian 12, as root, and installs
# the extension into the system's PostgreSQL 15 (or, with PG_JOBS_PG=16, 17 or 18, into that
# release under /opt/pg_jobs-pg/N, scripts/pg-servers.sh). Safe to re-run: what is there is
# reused. It says what it changes before it changes it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
PGRX_VERSION=0.18.0

packages=(postgresql-15 postgresql-server-dev-15 libclang-dev clang sudo pkg-config python3 python3-venv
          golang-go golang-github-lib-pq-dev)  # the last two: the Go example worker, from Debian
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Node.js for the example worker in examples/node: the machine's own, else Debian's.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: apt-get update, then apt-get install ${missing[*]} (apt may upgrade packages they"
  echo "       depend on, e.g. an installed postgresql-15 to the archive's version of the headers)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ "$(cargo pgrx --version 2>/dev/null | awk '{print $2}')" != "$PGRX_VERSION" ]; then
  echo "setup: installing cargo-pgrx $PGRX_VERSION (a few minutes, once)"
  cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
fi
if ! grep -q "pg15" "${PGRX_HOME:-$HOME/.pgrx}/config.toml" 2>/dev/null; then
  echo "setup: cargo pgrx init --pg15 (writes ~/.pgrx/config.toml)"
  cargo pgrx init --pg15 /usr/lib/postgresql/15/bin/pg_config
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: a Python virtual environment for the tests in .venv"
  python3 -m venv .venv
fi
if ! .venv/bin/python -c 'import psycopg, pytest, hypothesis' 2>/dev/null; then
  echo "setup: pip install psycopg, pytest and hypothesis into .venv"
  .venv/bin/pip install --quiet --disable-pip-version-check 'psycopg[binary]>=3.1,<3.3' 'pytest>=7,<9' \
    'hypothesis>=6,<7'
fi

if [ ! -d examples/node/node_modules ]; then
  echo "setup: npm ci in examples/node (its node_modules)"
  (cd examples/node && npm ci --no-audit --no-fund --silent)
fi

# Another release (PG_JOBS_PG=16, 17 or 18): its server under /opt/pg_jobs-pg/N.
if [ "$PG_MAJOR" != 15 ]; then
  bash scripts/pg-servers.sh "$PG_MAJOR"
  pgrx_knows_release "$PG_MAJOR"
fi

echo "setup: building (release) and installing pg_jobs into $("$PG_CONFIG" --pkglibdir)"
log=$(mktemp /tmp/pg_jobs-install.XXXXXX)
# shellcheck disable=SC2046  # pg_features is a list of words
if ! cargo pgrx install --release $(pg_features) --pg-config "$PG_CONFIG" >"$log" 2>&1; then
  cat "$log"
  exit 1
fi
rm -f "$log"
