#!/usr/bin/env bash
# Builds every artifact of a release into dist/, with a SHA256SUMS file:
#   pg_jobs-<v>-pg<N>-<arch>.tar.gz and postgresql-<N>-pg-jobs_<v>-1_<arch>.deb for each
#   PostgreSQL release (scripts/package.sh), pg_jobs-<v>.sql and pg_jobs-<v>.pg_tle.sql (the
#   SQL-only edition), pg_jobs_router-<v>.sql (the router over shards: router/),
#   pgjobs-<v>-<arch>-linux (the operators' command, a release build),
#   pg-jobs-<v>.tgz (the Node.js package, npm pack) and the Python sdist and wheel.
# It needs what scripts/setup.sh installs (cargo-pgrx, Node.js, the venv). The version is
# Cargo.toml's; every other manifest must say the same (--set-version writes it
# into all of them), and the script refuses otherwise.
#   scripts/release.sh                   every release, 15 to 18
#   scripts/release.sh --pg "15 18"      only these PostgreSQL releases
#   scripts/release.sh --check           then check dist/: the sums, each file there
#   scripts/release.sh --set-version X.Y.Z   write X.Y.Z into every manifest, build nothing
set -euo pipefail
cd "$(dirname "$0")/.."

releases="15 16 17 18"
check=0
while [ $# -gt 0 ]; do
  case "$1" in
    --pg) releases=$2; shift 2 ;;
    --check) check=1; shift ;;
    --set-version)
      new=${2:?--set-version needs a version}
      [[ $new =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "release: $new is not X.Y.Z" >&2; exit 2; }
      sed -i "0,/^version = \".*\"/s//version = \"$new\"/" Cargo.toml cli/Cargo.toml clients/python/pyproject.toml
      sed -i "s/^__version__ = \".*\"/__version__ = \"$new\"/" clients/python/src/pg_jobs/__init__.py
      (cd clients/node && npm version --no-git-tag-version --allow-same-version "$new" >/dev/null)
      echo "release: every manifest says $new; cargo and npm's lockfiles follow at the next build"
      exit 0 ;;
    *) echo "usage: scripts/release.sh [--pg \"15 16 17 18\"] [--check] | --set-version X.Y.Z" >&2; exit 2 ;;
  esac
done

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
declare -A versions=(
  [cli/Cargo.toml]=$(sed -n 's/^version = "\(.*\)"/\1/p' cli/Cargo.toml | head -1)
  [clients/node/package.json]=$(node -p "require('./clients/node/package.json').version")
  [clients/python/pyproject.toml]=$(sed -n 's/^version = "\(.*\)"/\1/p' clients/python/pyproject.toml | head -1)
  [clients/python/src/pg_jobs/__init__.py]=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' clients/python/src/pg_jobs/__init__.py)
)
for manifest in "${!versions[@]}"; do
  if [ "${versions[$manifest]}" != "$version" ]; then
    echo "release: $manifest says ${versions[$manifest]}, Cargo.toml $version: run scripts/release.sh --set-version $version" >&2
    exit 1
  fi
done

started=$SECONDS
say() { printf 'release: [%d:%02d] %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) "$*"; }
rm -rf dist
mkdir dist
arch=$(uname -m)

. scripts/lib.sh
for n in $releases; do
  # Nothing is installed into a server: the packages are built from the sources alone.
  say "PostgreSQL $n: the package (scripts/package.sh --deb)"
  [ "$n" = 15 ] || bash scripts/pg-servers.sh "$n" >/dev/null
  pgrx_knows_release "$n" >/dev/null
  PG_JOBS_PG=$n bash scripts/package.sh --deb >/dev/null
  cp "target/pg_jobs-$version-pg$n-$arch.tar.gz" target/postgresql-"$n"-pg-jobs_"$version"-1_*.deb dist/
done

say "the SQL-only edition (sql-only/pg_jobs.sql as committed, and its pg_tle form made from the same)"
# From the install script of a package just built (the same for every PostgreSQL release;
# PostgreSQL 15's, the release scripts/sql-only.py reads by default, when it was built).
install=$({ find target/release/pg_jobs-pg15 target/release/pg_jobs-pg* \
              -path "*/extension/pg_jobs--$version.sql" 2>/dev/null || true; } | head -1)
[ -n "$install" ] || { echo "release: no install script of pg_jobs $version under target/release" >&2; exit 1; }
python3 scripts/sql-only.py --check --from "$install"
python3 scripts/sql-only.py --from "$install"
cp sql-only/pg_jobs.sql "dist/pg_jobs-$version.sql"
cp sql-only/pg_jobs.pg_tle.sql "dist/pg_jobs-$version.pg_tle.sql"

say "the router over shards (router/pg_jobs_router.sql, as committed)"
cp router/pg_jobs_router.sql "dist/pg_jobs_router-$version.sql"

say "pgjobs (cargo build --release -p pgjobs)"
cargo build --quiet --release --locked -p pgjobs
cp target/release/pgjobs "dist/pgjobs-$version-$arch-linux"

# The libraries are packed from what HEAD holds, in a directory of their own (a build in the
# clone would replace clients/node/dist under tests that use it).
work=$(mktemp -d /tmp/pg_jobs-release.XXXXXX)
trap 'rm -rf "$work"' EXIT
git archive HEAD clients/node clients/python | tar -x -C "$work"
[ -d clients/node/node_modules ] || (cd clients/node && npm ci --ignore-scripts --no-audit --no-fund --silent)
ln -s "$PWD/clients/node/node_modules" "$work/clients/node/node_modules"

say "the Node.js package (npm pack: its prepack builds it)"
(cd "$work/clients/node" && npm pack --silent --pack-destination "$OLDPWD/dist" >/dev/null)

say "the Python sdist and wheel (python -m build)"
.venv/bin/python -c 'import build' 2>/dev/null ||
  .venv/bin/pip install --quiet --disable-pip-version-check 'build>=1,<2'
.venv/bin/python -m build --outdir dist "$work/clients/python" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }

(cd dist && sha256sum -- * >SHA256SUMS)
say "dist/ holds pg_jobs $version:"
(cd dist && ls -l --time-style=+ | tail -n +2 | awk '{print "  " $NF " (" $5 " bytes)"}')

if [ $check = 1 ]; then
  (cd dist && sha256sum --quiet -c SHA256SUMS)
  expected=("pg_jobs-$version.sql" "pg_jobs-$version.pg_tle.sql" "pg_jobs_router-$version.sql" "pgjobs-$version-$arch-linux"
            "pg-jobs-$version.tgz" "pg_jobs-$version.tar.gz" "pg_jobs-$version-py3-none-any.whl")
  for n in $releases; do expected+=("pg_jobs-$version-pg$n-$arch.tar.gz"); done
  for f in "${expected[@]}"; do [ -s "dist/$f" ] || { echo "release: dist/$f is missing" >&2; exit 1; }; done
  for n in $releases; do
    ls dist/postgresql-"$n"-pg-jobs_"$version"-1_*.deb >/dev/null || { echo "release: no .deb for $n" >&2; exit 1; }
  done
  [ "$("dist/pgjobs-$version-$arch-linux" --version)" = "pgjobs $version" ] ||
    { echo "release: pgjobs --version does not say $version" >&2; exit 1; }
  say "checked: every file there, its sum, pgjobs --version"
fi
