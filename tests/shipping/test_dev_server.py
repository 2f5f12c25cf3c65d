"""scripts/dev-server.sh: a server to keep after the demo. It starts preloaded on the port it
prints, with the connection it prints; its data outlives a stop and a start; status says
whether it runs."""

import os
import re
import shutil
import subprocess
import tempfile

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PORT = os.environ.get("PG_JOBS_DEV_TEST_PORT", "54434")


def dev_server(command, directory):
    env = {**os.environ, "PG_JOBS_DEV_DIR": directory, "PG_JOBS_DEV_PORT": PORT}
    return subprocess.run(["bash", os.path.join(ROOT, "scripts/dev-server.sh"), command],
                          capture_output=True, text=True, env=env)


def test_the_dev_server_keeps_its_data_and_says_how_to_connect():
    parent = tempfile.mkdtemp(prefix="pg_jobs-dev.")
    os.chmod(parent, 0o755)  # the server runs as postgres
    directory = parent + "/data"
    try:
        started = dev_server("start", directory)
        assert started.returncode == 0, started.stderr
        dsn = re.search(r'psql "([^"]+)"', started.stdout).group(1)
        assert f"port={PORT}" in dsn
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("show shared_preload_libraries").fetchone()[0] == "pg_jobs"
            conn.execute("create extension pg_jobs")
            conn.execute("select jobs.enqueue('kept')")
        assert dev_server("status", directory).returncode == 0
        assert dev_server("stop", directory).returncode == 0
        assert dev_server("status", directory).returncode == 3
        again = dev_server("start", directory)
        assert again.returncode == 0, again.stderr
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("select count(*) from jobs.jobs where name = 'kept'").fetchone()[0] == 1
    finally:
        dev_server("stop", directory)
        shutil.rmtree(parent, ignore_errors=True)
