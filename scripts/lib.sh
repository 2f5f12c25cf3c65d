# Sourced by every script in scripts/: the PATH they rely on (cargo, and runuser in /usr/sbin,
# whatever PATH the caller had) and the paths of the PostgreSQL release in use.
export PATH="$HOME/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}"
# Node.js (npm ci) trusts the system's certificates too, as curl and apt do: a registry
# reached through a proxy whose certificate only the system store has (CI may run with an
# empty environment, without the variable its machine sets).
if [ -z "${NODE_EXTRA_CA_CERTS:-}" ] && [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  export NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
fi
# A UTF-8 locale even where the caller has none (CI may run with an empty environment).
export LANG="${LANG:-C.UTF-8}"
# PG_JOBS_PG picks the PostgreSQL release (15, Debian's, by default; 16 to 18 from
# /opt/pg_jobs-pg/<N>).
PG_MAJOR=${PG_JOBS_PG:-15}
if [ "$PG_MAJOR" = 15 ]; then
  PG_BIN=/usr/lib/postgresql/15/bin
else
  PG_BIN=/opt/pg_jobs-pg/$PG_MAJOR/bin
fi
PG_CONFIG=$PG_BIN/pg_config
export PG_JOBS_PG_BIN=$PG_BIN  # for the tests from outside (tests/server/test_failover.py, test_chaos.py)

# cargo pgrx builds for a release through the pg_config listed for it in pgrx's configuration;
# lists release N there if it is not yet (the file is pgrx's own, under ~/.pgrx).
pgrx_knows_release() {
  local n=$1 bin=/opt/pg_jobs-pg/$1/bin config="${PGRX_HOME:-$HOME/.pgrx}/config.toml"
  [ "$n" = 15 ] && bin=/usr/lib/postgresql/15/bin
  grep -q "^pg$n = " "$config" 2>/dev/null && return
  echo "pgrx: listing PostgreSQL $n ($bin/pg_config) in $config"
  echo "pg$n = \"$bin/pg_config\"" >>"$config"
}

# The cargo features that build for the release in use.
pg_features() {
  if [ "$PG_MAJOR" = 15 ]; then echo ""; else echo "--no-default-features --features pg$PG_MAJOR"; fi
}

# Runs a command as the postgres user: PostgreSQL refuses to run as root.
as_pg() { runuser -u postgres -- "$@"; }

# regress_or_show LABEL RESULTS OUT COMMAND...: runs a pg_regress or pg_isolation_regress
# COMMAND whose output directory is OUT; on a difference prints regression.diffs, keeps the
# actual outputs in pg_test/results/RESULTS, and exits 1.
regress_or_show() {
  local label=$1 results=$2 out=$3; shift 3
  if ! "$@"; then
    cat "$out/regression.diffs" 2>/dev/null || true
    rm -rf "pg_test/results/$results" && mkdir -p pg_test/results
    cp -r "$out/results" "pg_test/results/$results" 2>/dev/null || true
    echo "$label differs; the actual outputs are in pg_test/results/$results" >&2
    exit 1
  fi
}

# Whether a TCP socket on this machine has port $1 as its local port (ss, from iproute2). ss
# filters by itself: `ss | grep -q` under `set -o pipefail` fails when grep stops reading
# before ss has written everything (SIGPIPE), which took a busy port for a free one. A socket
# in TIME-WAIT does not count: a server stopped a moment ago leaves its side of each closed
# connection so for a minute, and binds its port again past them (SO_REUSEADDR).
port_in_use() {
  [ -n "$(ss -Htan exclude time-wait "( sport = :$1 )" 2>/dev/null)" ]
}

# The first TCP port from $1 upward that no socket on this machine uses.
free_port() {
  local port=$1
  while port_in_use "$port"; do port=$((port + 1)); done
  echo "$port"
}
