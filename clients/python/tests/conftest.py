"""The Python library's tests: a database per test, with pg_jobs, on the server PG_JOBS_DSN
names (a superuser's connection string)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest


@pytest.fixture
def dsn() -> Iterator[str]:
    server = os.environ.get("PG_JOBS_DSN")
    if not server:
        pytest.fail("PG_JOBS_DSN is not set: run the tests through scripts/test.sh")
    name = "py_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"create database {name}")
    dsn = f"{server} dbname={name}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create extension pg_jobs")
        conn.execute("create table sent (address text not null)")
    yield dsn
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"drop database {name} with (force)")
