"""A router and three shards (scripts/shards.sh), started once for the tests of this folder and
stopped after them: {"router": DSN, "shards": [DSN, ...], "dir": ...}."""

import os
import subprocess
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PORT = os.environ.get("PG_JOBS_SHARDS_PORT", "54450")  # and the next three


def shards_sh(*args, env):
    run = subprocess.run(["bash", os.path.join(ROOT, "scripts/shards.sh"), *args],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0, f"scripts/shards.sh {' '.join(args)}: {run.stderr}"
    return run.stdout


@pytest.fixture(scope="session")
def shards():
    directory = tempfile.mkdtemp(prefix="pg_jobs-shards-")
    env = {**os.environ, "PG_JOBS_SHARDS_DIR": directory, "PG_JOBS_SHARDS_PORT": PORT}
    try:
        lines = dict(line.split("=", 1) for line in shards_sh("start", "3", env=env).splitlines())
        yield {"router": lines["router"], "shards": [lines[f"shard{i}"] for i in range(3)], "dir": directory}
    finally:
        shards_sh("stop", env=env)
        subprocess.run(["rm", "-rf", directory], check=False)
