# Sourced by every script in scripts/: the PATH they rely on (cargo, and runuser in /usr/sbin,
# whatever PATH the caller had) and the paths of the PostgreSQL release in use.
export PATH="$HOME/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}"
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
export PG_JOBS_PG_BIN=$PG_BIN  # for the tests from outside (tests/test_failover.py, test_chaos.py)

# Runs a command as the postgres user: PostgreSQL refuses to run as root.
as_pg() { runuser -u postgres -- "$@"; }
