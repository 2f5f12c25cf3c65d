"""The Python library's tests: a database per test, with pg_jobs, on the server PG_JOBS_DSN
names (a superuser's connection string)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests"))
from clusters import database  # noqa: E402 (the repository's test helpers)


@pytest.fixture
def dsn() -> Iterator[str]:
    server = os.environ.get("PG_JOBS_DSN")
    if not server:
        pytest.fail("PG_JOBS_DSN is not set: run the tests through scripts/test.sh")
    with database(server, "py_", "create table sent (address text not null)") as (_, dsn):
        yield dsn
