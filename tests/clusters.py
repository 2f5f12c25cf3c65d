"""Throwaway clusters for the tests that need one of their own (scripts/cluster.sh: pg_jobs
preloaded, run as the postgres user)."""

import contextlib
import os
import subprocess
import tempfile
import uuid

import psycopg

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


@contextlib.contextmanager
def database(server_dsn, prefix, setup_sql=None):
    """A new database on the server of `server_dsn` (a superuser's), with pg_jobs created and
    `setup_sql` run, dropped afterwards (WITH FORCE): its name and connection string."""
    name = prefix + uuid.uuid4().hex[:12]
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f"create database {name}")
    dsn = f"{server_dsn} dbname={name}"
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("create extension pg_jobs")
            if setup_sql:
                conn.execute(setup_sql)
        yield name, dsn
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f"drop database {name} with (force)")
