"""What the library's test files share: the sample project (tests/sample), its jobs,
and a count."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg

SAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sample")
sys.path.insert(0, SAMPLE)
import myapp_jobs  # noqa: E402 (the sample project)

JOBS = [myapp_jobs.send_email, myapp_jobs.send_email_async, myapp_jobs.flaky]


def count(dsn: str, sql: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql).fetchone()
        assert row is not None
        return int(row[0])


@contextlib.contextmanager
def killed_unless_exited(process: subprocess.Popen[Any]) -> Iterator[subprocess.Popen[Any]]:
    """The process, killed when the block leaves (an assertion failing, say) before it exited."""
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()


def stopped(process: subprocess.Popen[Any]) -> str:
    """SIGTERM, then what the process wrote to stderr once it has exited (30 s at most)."""
    process.send_signal(signal.SIGTERM)
    return str(process.communicate(timeout=30)[1])
