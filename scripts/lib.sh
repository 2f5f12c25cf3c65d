# Sourced by every script in scripts/: the PATH they rely on (cargo, and runuser in /usr/sbin,
# whatever PATH the caller had) and the PostgreSQL 15 paths.
export PATH="$HOME/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}"
# A UTF-8 locale even where the caller has none (CI may run with an empty environment).
export LANG="${LANG:-C.UTF-8}"
PG_BIN=/usr/lib/postgresql/15/bin
PG_CONFIG=$PG_BIN/pg_config

# Runs a command as the postgres user: PostgreSQL refuses to run as root.
as_pg() { runuser -u postgres -- "$@"; }
