#!/usr/bin/env bash
# Builds the installable artifact: target/pg_jobs-<version>-pg15-<arch>.tar.gz, made from
# `cargo pgrx package` (a release build), holding the extension's files under their install
# paths and an install.sh that copies them into a PostgreSQL 15 (PG_CONFIG, default Debian's).
#   scripts/package.sh           build the tarball and print its path
#   scripts/package.sh --check   also uninstall pg_jobs, install it from the tarball, and run
#                                the SQL tests against that install
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
log=$(mktemp /tmp/pg_jobs-package.XXXXXX)
if ! cargo pgrx package --pg-config "$PG_CONFIG" >"$log" 2>&1; then
  cat "$log"
  exit 1
fi
rm -f "$log"
stage=target/release/pg_jobs-pg15
cat > "$stage/install.sh" <<'SH'
#!/bin/sh
# Installs pg_jobs into the PostgreSQL that PG_CONFIG names (default: Debian's PostgreSQL 15).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
pg_config=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
install -m 644 "$here"/usr/share/postgresql/15/extension/pg_jobs* "$("$pg_config" --sharedir)/extension/"
install -m 755 "$here"/usr/lib/postgresql/15/lib/pg_jobs.so "$("$pg_config" --pkglibdir)/"
echo "pg_jobs installed into $("$pg_config" --sharedir)/extension and $("$pg_config" --pkglibdir)"
SH
chmod +x "$stage/install.sh"
tarball="target/pg_jobs-$version-pg15-$(uname -m).tar.gz"
tar -czf "$tarball" -C "$stage" .
echo "$tarball"

if [ "${1:-}" = "--check" ]; then
  rm -f "$("$PG_CONFIG" --sharedir)"/extension/pg_jobs* "$("$PG_CONFIG" --pkglibdir)/pg_jobs.so"
  unpacked=$(mktemp -d /tmp/pg_jobs-unpacked.XXXXXX)
  tar -xzf "$tarball" -C "$unpacked"
  sh "$unpacked/install.sh"
  rm -rf "$unpacked"
  bash scripts/test-sql.sh
fi
