"""Fixtures for tests from outside the server (tests/ and cli/tests/, each of whose conftest.py
loads them): a fresh database with pg_jobs per test.

With PG_JOBS_EDITION=sql (scripts/test-sql-only.sh) the database gets the SQL-only edition
(sql-only/pg_jobs.sql) instead of the extension (installed by the role PG_JOBS_SQL_INSTALLER
names, if set, made the database's owner: tests/clusters.py), and only the tests that run on such a
database alone (the `dsn` fixture) run, but those marked `library` (they need the shared library:
its background worker, shared memory, commit hooks); the others are skipped, and counted.
"""

import os

import pytest
from clusters import database
from hypothesis import settings

# CI runs the randomized tests on a fixed sequence of examples, so a red run is reproducible
# and a green one is not luck; a local run draws fresh examples each time.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


SQL_ONLY = os.environ.get("PG_JOBS_EDITION") == "sql"


def pytest_configure(config):
    config.addinivalue_line("markers", "library(reason=...): tests what the SQL-only edition does otherwise by design "
                                       "(docs/EDITIONS.md), or needs the extension's server; not run on the edition")


def pytest_collection_modifyitems(config, items):
    if not SQL_ONLY:
        return
    for item in items:
        marker = item.get_closest_marker("library")
        if marker:
            why = marker.kwargs.get("reason", "needs the shared library")
            item.add_marker(pytest.mark.skip(reason=f"SQL-only edition: {why}"))
        elif "dsn" not in item.fixturenames:
            item.add_marker(pytest.mark.skip(reason="SQL-only edition: needs a server of its own"))


def pytest_terminal_summary(terminalreporter):
    # (once, though two conftest files load this module)
    if SQL_ONLY and not getattr(terminalreporter.config, "_pg_jobs_summarized", False):
        terminalreporter.config._pg_jobs_summarized = True
        skipped = terminalreporter.stats.get("skipped", [])
        reasons = {}
        for report in skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            reasons[reason] = reasons.get(reason, 0) + 1
        for reason, count in sorted(reasons.items()):
            terminalreporter.write_line(f"skipped on the SQL-only edition: {count} ({reason})")


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
