"""Fixtures for tests from outside the server: a fresh database with pg_jobs per test."""

import os
import uuid

import psycopg
import pytest
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
    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f"create database {name}")
    db_dsn = f"{server_dsn} dbname={name}"
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("create extension pg_jobs")
    yield db_dsn
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f"drop database {name} with (force)")
