"""Fixtures for tests from outside the server: a fresh database with pg_jobs per test."""

import os

import pytest
from clusters import database
from hypothesis import settings

# CI runs the randomized tests on a fixed sequence of examples, so a red run is reproducible
# and a green one is not luck; a local run draws fresh examples each time.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="session")
def server_dsn():
    dsn = os.environ.get("PG_JOBS_DSN")
    if not dsn:
        pytest.fail("PG_JOBS_DSN is not set: run these tests through scripts/test.sh")
    return dsn


@pytest.fixture
def dsn(server_dsn):
    """A connection string to a new database with the extension created, dropped afterwards."""
    with database(server_dsn, "t_") as (_, db_dsn):
        yield db_dsn
