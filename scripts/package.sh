#!/usr/bin/env bash
# Builds the installable artifact for one PostgreSQL release (PG_JOBS_PG, 15 by default; see
# scripts/lib.sh): target/pg_jobs-<version>-pg<N>-<arch>.tar.gz, made from `cargo pgrx
# package` (a release build), holding the extension's files and an install.sh that copies them
# into a PostgreSQL of that release (PG_CONFIG; it refuses another release's).
#   scripts/package.sh           build the tarball and print its path
#   scripts/package.sh --deb     also build target/postgresql-<N>-pg-jobs_<version>-1_<arch>.deb,
#                                for Debian 12's PostgreSQL packages (Debian's 15, or the
#                                PostgreSQL project's own repository's 15 to 18: the same paths,
#                                /usr/lib/postgresql/<N>/lib and /usr/share/postgresql/<N>/extension)
#   scripts/package.sh --check   also build the .deb and check both: install.sh refuses another
#                                release; on 15, pg_jobs uninstalled, the .deb installed with apt
#                                into that clean PostgreSQL and the extension created on a
#                                cluster, the demo run from it (scripts/demo.sh --deb), then the
#                                .deb removed (its files go with it); on 16 to
#                                18, whose servers here are not Debian packages, the .deb's files
#                                are checked to be the tarball's; then pg_jobs installed from the
#                                tarball and the SQL tests run against that install
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

if [ "${1:-}" = --deb ] || [ "${1:-}" = --check ]; then
  arch=$(dpkg --print-architecture)
  package=postgresql-$PG_MAJOR-pg-jobs
  deb="target/${package}_$version-1_$arch.deb"
  root=$(mktemp -d /tmp/pg_jobs-deb.XXXXXX)
  mkdir -p "$root/DEBIAN" "$root/usr/lib/postgresql/$PG_MAJOR/lib" "$root/usr/share/postgresql/$PG_MAJOR/extension" \
    "$root/usr/share/doc/$package"
  install -m 644 $(find "$stage" -path "*/extension/pg_jobs*" -type f) "$root/usr/share/postgresql/$PG_MAJOR/extension/"
  install -m 644 "$(find "$stage" -name pg_jobs.so -type f)" "$root/usr/lib/postgresql/$PG_MAJOR/lib/"
  printf 'pg_jobs %s\nLicense: PostgreSQL\nSource: the pg_jobs repository, built with scripts/package.sh --deb\n' \
    "$version" >"$root/usr/share/doc/$package/copyright"
  cat >"$root/DEBIAN/control" <<CONTROL
Package: $package
Version: $version-1
Architecture: $arch
Maintainer: pg_jobs maintainers <pg_jobs@localhost>
Depends: postgresql-$PG_MAJOR, libc6 (>= 2.34)
Section: database
Priority: optional
Installed-Size: $(du -sk "$root/usr" | cut -f1)
Description: durable job queue inside PostgreSQL $PG_MAJOR
 pg_jobs: CREATE EXTENSION pg_jobs gives a database a jobs schema whose SQL
 functions enqueue idempotently, claim under a lease with a fencing token,
 settle, retry, dead-letter, run fenced steps, events, schedules and limits.
 Its background worker needs shared_preload_libraries = 'pg_jobs' and a
 restart of the server; everything else works without it.
CONTROL
  chmod -R u=rwX,go=rX "$root"
  dpkg-deb --root-owner-group --build "$root" "$deb" >/dev/null
  rm -rf "$root"
  echo "$deb"
fi

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
  # The .deb holds the tarball's files under Debian's paths.
  debfiles=$(mktemp -d /tmp/pg_jobs-debfiles.XXXXXX)
  dpkg-deb -x "$deb" "$debfiles"
  for f in $(cd "$debfiles" && find usr -path "*/extension/pg_jobs*" -o -name pg_jobs.so | sort); do
    cmp "$debfiles/$f" "$(find "$unpacked" -name "$(basename "$f")" -type f)"
  done
  [ "$(find "$debfiles" -path "*/extension/pg_jobs*" | wc -l)" = "$(find "$unpacked" -path "*/extension/pg_jobs*" | wc -l)" ]
  rm -rf "$debfiles"
  if [ "$PG_MAJOR" = 15 ]; then
    # Debian's PostgreSQL 15: the .deb installed with apt where pg_jobs is not, the extension
    # created on a cluster of that install, then the .deb removed with its files.
    aptlog=$(mktemp /tmp/pg_jobs-deb-apt.XXXXXX)
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "./$deb" >"$aptlog" 2>&1 || { cat "$aptlog"; exit 1; }
    [ "$(dpkg-query -W -f '${Status}' postgresql-15-pg-jobs)" = "install ok installed" ]
    cluster=$(mktemp -d /tmp/pg_jobs-deb-cluster.XXXXXX)
    dsn=$(bash scripts/cluster.sh start "$cluster" "${PG_JOBS_DEB_PORT:-54401}")
    got=$("$PG_BIN/psql" "$dsn" -X -q -A -t -v ON_ERROR_STOP=1 -c "create extension pg_jobs" \
      -c "select extversion from pg_extension where extname = 'pg_jobs'" \
      -c "select count(*) from jobs.enqueue('x')" -c "select count(*) from jobs.claim('deb')" | tr '\n' ' ')
    bash scripts/cluster.sh stop "$cluster"
    rm -rf "$cluster"
    if [ "$got" != "$version 1 1 " ]; then echo "package: the .deb's pg_jobs answered '$got'" >&2; exit 1; fi
    # The demo from the .deb (scripts/demo.sh --deb): its set-up compiles nothing.
    demolog=$(mktemp /tmp/pg_jobs-deb-demo.XXXXXX)
    demo_started=$SECONDS
    if ! PG_JOBS_DEMO_PORT=$(free_port "${PG_JOBS_DEB_PORT:-54401}") PG_JOBS_SETUP_LOG=$demolog.setup \
         bash scripts/demo.sh --deb "$deb" >"$demolog" 2>&1; then
      cat "$demolog" >&2; exit 1
    fi
    grep -q "dead-lettered after its 2 attempts" "$demolog" || { cat "$demolog" >&2; exit 1; }
    if grep -q "cargo\|Compiling" "$demolog.setup"; then echo "package: the demo from the .deb compiled" >&2; exit 1; fi
    echo "package: the demo ran from $deb in $((SECONDS - demo_started)) s"
    rm -f "$demolog" "$demolog.setup"
    DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq postgresql-15-pg-jobs >"$aptlog" 2>&1 || { cat "$aptlog"; exit 1; }
    rm -f "$aptlog"
    if [ -e "$("$PG_CONFIG" --pkglibdir)/pg_jobs.so" ]; then echo "package: removing the .deb left pg_jobs.so" >&2; exit 1; fi
    echo "package: $deb installed with apt, the extension created and a job claimed, removed"
  fi
  sh "$unpacked/install.sh"
  rm -rf "$unpacked"
  bash scripts/test-sql.sh
fi
