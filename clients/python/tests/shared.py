"""What the library's test files share: the sample project (tests/sample), its jobs,
and a count."""

from __future__ import annotations

import os
import sys

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
