"""The `pg-jobs` command and the README's quick start, as a user runs them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from typing import Any

import pytest



from shared import SAMPLE, count, killed_unless_exited, stopped


def pg_jobs_command(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "pg_jobs.cli", *args], cwd=SAMPLE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_the_command_runs_a_module_and_exits_0_on_sigterm_with_no_traceback(dsn: str) -> None:
    enqueued = pg_jobs_command("enqueue", "send_email", '{"to": "cli@example.com"}', "--dsn", dsn)
    out, err = enqueued.communicate(timeout=30)
    assert enqueued.returncode == 0, err
    worker = pg_jobs_command("worker", "--dsn", dsn, "--concurrency", "2", "--shutdown-grace", "5", "myapp_jobs")
    with killed_unless_exited(worker):
        deadline = time.monotonic() + 30
        while count(dsn, "select count(*) from sent") == 0:
            assert time.monotonic() < deadline and worker.poll() is None, worker.stderr.read() if worker.stderr else ""
            time.sleep(0.1)
        err = stopped(worker)
    assert worker.returncode == 0, err
    assert "Traceback" not in err
    assert "pg_jobs worker started: queues=default concurrency=2 jobs=send_email,send_email_async,flaky" in err


@pytest.mark.parametrize("args, says", [
    (["worker", "no_such_module"], "cannot import 'no_such_module'"),
    (["worker", "--dsn", "not a dsn", "myapp_jobs"], "--dsn is not a connection string"),
    (["enqueue", "send_email", "{not json", "--dsn", "host=127.0.0.1"], "PAYLOAD is not JSON"),
])
def test_a_bad_module_dsn_or_payload_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    run = pg_jobs_command(*args)
    out, err = run.communicate(timeout=30)
    assert run.returncode == 2
    assert len(err.strip().splitlines()) == 1 and says in err, err


def test_the_readmes_quick_start_runs(dsn: str, tmp_path: Any) -> None:
    """README.md's quick start as a reader runs it: the jobs module as myapp/jobs.py, the
    enqueue beside it (on this test's database), then `pg-jobs worker myapp.jobs` works the job
    and exits 0 at SIGTERM."""
    readme = open(os.path.join(os.path.dirname(__file__), "..", "README.md")).read()
    jobs_py, enqueue_py = re.findall(r"```python run\n(.*?)```", readme, re.S)[:2]
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "jobs.py").write_text(jobs_py)
    (tmp_path / "enqueue.py").write_text(enqueue_py.replace('"dbname=app"', repr(dsn)))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    subprocess.run([sys.executable, "enqueue.py"], cwd=tmp_path, env=env, check=True, timeout=60)
    cli = os.path.join(os.path.dirname(sys.executable), "pg-jobs")
    worker = subprocess.Popen([cli, "worker", "--dsn", dsn, "myapp.jobs"], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with killed_unless_exited(worker):
        deadline = time.monotonic() + 30
        while count(dsn, "select count(*) from sent") == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        err = stopped(worker)
    assert worker.returncode == 0, err
    assert count(dsn, "select count(*) from sent where address = 'ada@example.com'") == 1, err
