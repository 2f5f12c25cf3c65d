"""Throwaway clusters for the tests that need one of their own (scripts/cluster.sh: pg_jobs
preloaded, run as the postgres user)."""

import contextlib
import os
import subprocess
import tempfile

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
