#!/usr/bin/env bash
# Builds the installable artifact for one PostgreSQL release (PG_JOBS_PG, 15 by default; see
# scripts/lib.sh): target/pg_jobs-<version>-pg<N>-<arch>.tar.gz, made from `cargo pgrx
# package` (a release build), holding the extension's files and an install.sh that copies them
# into a PostgreSQL of that release (PG_CONFIG; it refuses another release's).
#   scripts/package.sh           build the tarball and print its path
#   scripts/package.sh --check   also check that install.sh refuses another release, uninstall
#                                pg_jobs, install it from the tarball, and run the SQL tests
#                                against that install
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
features=()
[ "$PG_MAJOR" = 15 ] || features=(--no-default-features --features "pg$PG_MAJOR")
log=$(mktemp /tmp/pg_jobs-package.XXXXXX)
if ! cargo pgrx package "${features[@]}" --pg-config "$PG_CONFIG" >"$log" 2>&1; then
  cat "$log"
  exit 1
fi
rm -f "$log"
stage=target/release/pg_jobs-pg$PG_MAJOR
cat > "$stage/install.sh" <<SH
#!/bin/sh
# Installs pg_jobs $version into the PostgreSQL $PG_MAJOR that PG_CONFIG names (default:
# $PG_CONFIG). A PostgreSQL of another release is refused: the library is built for $PG_MAJOR.
set -eu
here=\$(cd "\$(dirname "\$0")" && pwd)
pg_config=\${PG_CONFIG:-$PG_CONFIG}
release=\$("\$pg_config" --version | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
if [ "\$release" != "$PG_MAJOR" ]; then
  echo "install.sh: this is pg_jobs for PostgreSQL $PG_MAJOR, and \$pg_config is PostgreSQL \${release:-of no known release};" >&2
  echo "install.sh: use the pg_jobs-$version-pg\$release tarball, or set PG_CONFIG to a PostgreSQL $PG_MAJOR pg_config" >&2
  exit 1
fi
install -m 644 \$(find "\$here" -path "*/extension/pg_jobs*" -type f) "\$("\$pg_config" --sharedir)/extension/"
install -m 755 "\$(find "\$here" -name pg_jobs.so -type f)" "\$("\$pg_config" --pkglibdir)/"
echo "pg_jobs installed into \$("\$pg_config" --sharedir)/extension and \$("\$pg_config" --pkglibdir)"
SH
chmod +x "$stage/install.sh"
tarball="target/pg_jobs-$version-pg$PG_MAJOR-$(uname -m).tar.gz"
tar -czf "$tarball" -C "$stage" .
echo "$tarball"

if [ "${1:-}" = "--check" ]; then
  unpacked=$(mktemp -d /tmp/pg_jobs-unpacked.XXXXXX)
  tar -xzf "$tarball" -C "$unpacked"
  # A pg_config of another release is refused, and nothing is installed.
  printf '#!/bin/sh\necho "PostgreSQL 99.1"\n' >"$unpacked/other_pg_config"
  chmod +x "$unpacked/other_pg_config"
  if PG_CONFIG="$unpacked/other_pg_config" sh "$unpacked/install.sh" 2>"$unpacked/refusal"; then
    echo "package: install.sh accepted a PostgreSQL 99 pg_config" >&2
    exit 1
  fi
  grep -q "this is pg_jobs for PostgreSQL $PG_MAJOR" "$unpacked/refusal"
  rm -f "$("$PG_CONFIG" --sharedir)"/extension/pg_jobs* "$("$PG_CONFIG" --pkglibdir)/pg_jobs.so"
  sh "$unpacked/install.sh"
  rm -rf "$unpacked"
  bash scripts/test-sql.sh
fi
