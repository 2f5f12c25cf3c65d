#!/usr/bin/env bash
# Installs everything pg_jobs needs to build, test and run on Debian 12, as root, and installs
# the extension into the system's PostgreSQL 15. Safe to re-run: what is there is reused.
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
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ "$(cargo pgrx --version 2>/dev/null | awk '{print $2}')" != "$PGRX_VERSION" ]; then
  echo "setup: installing cargo-pgrx $PGRX_VERSION (a few minutes, once)"
  cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
fi
if ! grep -q "pg15" "${PGRX_HOME:-$HOME/.pgrx}/config.toml" 2>/dev/null; then
  cargo pgrx init --pg15 "$PG_CONFIG"
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if ! .venv/bin/python -c 'import psycopg, pytest, hypothesis' 2>/dev/null; then
  .venv/bin/pip install --quiet --disable-pip-version-check 'psycopg[binary]>=3.1,<3.3' 'pytest>=7,<9' \
    'hypothesis>=6,<7'
fi

if [ ! -d examples/node/node_modules ]; then
  (cd examples/node && npm ci --no-audit --no-fund --silent)
fi

echo "setup: building (release) and installing pg_jobs into $("$PG_CONFIG" --pkglibdir)"
log=$(mktemp /tmp/pg_jobs-install.XXXXXX)
if ! cargo pgrx install --release --pg-config "$PG_CONFIG" >"$log" 2>&1; then
  cat "$log"
  exit 1
fi
rm -f "$log"
