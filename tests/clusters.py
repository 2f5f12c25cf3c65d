"""Throwaway clusters for the tests that need one of their own (scripts/cluster.sh: pg_jobs
preloaded, run as the postgres user)."""

import contextlib
import os
import pathlib
import shutil
import subprocess
import tempfile
import time
import uuid

import psycopg
import psycopg.sql

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cluster(*args, env=None):
    """scripts/cluster.sh with these arguments (and these environment variables added for
    the server); its output (start: the connection string)."""
    out = subprocess.run(["bash", os.path.join(ROOT, "scripts/cluster.sh"), *args],
                         check=True, capture_output=True, text=True, env={**os.environ, **(env or {})})
    return out.stdout.strip()


@contextlib.contextmanager
def own_cluster(prefix, port, conf, env=None):
    """A new cluster on this port with `conf` appended to its postgresql.conf (and `env` in
    its server's environment), stopped and removed afterwards: {"dsn": ..., "dir": ...}."""
    directory = tempfile.mkdtemp(prefix=prefix)
    path = directory + ".conf"
    with open(path, "w") as f:
        f.write(conf)
    dsn = cluster("start", directory, str(port), path, env=env)
    os.remove(path)
    try:
        yield {"dsn": dsn, "dir": directory}
    finally:
        cluster("stop", directory)
        subprocess.run(["rm", "-rf", directory], check=False)


def install(conn):
    """pg_jobs into the database of `conn` (a superuser's): the extension, or with
    PG_JOBS_EDITION=sql the SQL-only edition, swept once as pg_cron would (so that a claim does
    not warn). With PG_JOBS_SQL_INSTALLER too, the edition is installed and swept by that role,
    made the database's owner, as on a managed service whose owner is no superuser."""
    if os.environ.get("PG_JOBS_EDITION") == "sql":
        installer = os.environ.get("PG_JOBS_SQL_INSTALLER")
        if installer:
            conn.execute(psycopg.sql.SQL("alter database {} owner to {}").format(
                psycopg.sql.Identifier(conn.info.dbname), psycopg.sql.Identifier(installer)))
            conn.execute(psycopg.sql.SQL("set role {}").format(psycopg.sql.Identifier(installer)))
        conn.execute(pathlib.Path(ROOT, "sql-only", "pg_jobs.sql").read_text())
        conn.execute("select count(*) from jobs.sweep()")
        conn.execute("reset role")
    else:
        conn.execute("create extension pg_jobs")


@contextlib.contextmanager
def database(server_dsn, prefix, setup_sql=None):
    """A new database on the server of `server_dsn` (a superuser's), with pg_jobs installed and
    `setup_sql` run, dropped afterwards (WITH FORCE): its name and connection string."""
    name = prefix + uuid.uuid4().hex[:12]
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f"create database {name}")
    dsn = f"{server_dsn} dbname={name}"
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            install(conn)
            if setup_sql:
                conn.execute(setup_sql)
        yield name, dsn
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f"drop database {name} with (force)")


@contextlib.contextmanager
def pgbouncer(dsn, pools, port):
    """Debian's PgBouncer in transaction pooling on `port`, in front of the database of `dsn`,
    with one database entry per item of `pools` ({alias: pool size}), each its own pool of
    server connections to that database: {alias: connection string through PgBouncer}."""
    assert os.path.exists("/usr/sbin/pgbouncer"), "pgbouncer is missing: run scripts/setup.sh"
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="pg_jobs-pgbouncer."))  # postgres reads it
    os.chmod(tmp_path, 0o777)
    (tmp_path / "users.txt").write_text('"postgres" ""\n')
    databases = "".join(f"{alias} = host={params['host']} port={params['port']} dbname={params['dbname']} "
                        f"pool_size={size}\n" for alias, size in pools.items())
    (tmp_path / "pgbouncer.ini").write_text(f"""[databases]
{databases}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {tmp_path}/users.txt
pool_mode = transaction
max_client_conn = 100
ignore_startup_parameters = extra_float_digits
logfile = {tmp_path}/pgbouncer.log
pidfile = {tmp_path}/pgbouncer.pid
""")
    for f in tmp_path.iterdir():
        os.chmod(f, 0o644)
    subprocess.run(["runuser", "-u", "postgres", "--", "/usr/sbin/pgbouncer", "-d", str(tmp_path / "pgbouncer.ini")],
                   check=True)
    through = {alias: f"host=127.0.0.1 port={port} user=postgres dbname={alias}" for alias in pools}
    deadline = time.monotonic() + 60
    while True:
        try:
            # Its own pid file, so that another PgBouncer left on the port is not taken for it.
            assert (tmp_path / "pgbouncer.pid").exists(), "pgbouncer is not running"
            psycopg.connect(next(iter(through.values())), prepare_threshold=None).close()
            break
        except (psycopg.OperationalError, AssertionError):
            log = tmp_path / "pgbouncer.log"
            assert time.monotonic() < deadline, f"pgbouncer did not start: {log.read_text() if log.exists() else ''}"
            time.sleep(0.1)
    try:
        yield through
    finally:
        pid = (tmp_path / "pgbouncer.pid").read_text().strip()
        subprocess.run(["kill", pid], check=False)
        time.sleep(0.2)
        shutil.rmtree(tmp_path, ignore_errors=True)
