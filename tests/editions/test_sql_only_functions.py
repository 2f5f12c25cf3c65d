"""The SQL-only edition's versions of the extension's other functions in Rust (sql-only/src/
errors.sql, signals.sql, config.sql), beside the extension's in one database, answer and refuse
as those do where the editions do not differ by design (docs/EDITIONS.md): the documented
errors, an unknown outcome, a setting that is not a retention, the payload limit and the clock
with no setting moved. How it was checked: it failed with one error code's meaning changed,
and with _outcome's check of the outcome dropped."""

import pathlib

import psycopg
import pytest

# (held beside the extension's functions, in one database)
pytestmark = pytest.mark.library

SOURCES = pathlib.Path(__file__).resolve().parents[2] / "sql-only" / "src"


@pytest.fixture
def conn(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create schema sqlonly")
        for name in ("errors.sql", "signals.sql", "config.sql"):
            text = (SOURCES / name).read_text().replace("create function jobs.", "create function sqlonly.")
            text = text.replace("function jobs.clock()", "function sqlonly.clock()")  # (as jobs_config._make_clock makes it)
            # (an extension's script alone may call it: the pg_tle form keeps it, scripts/sql-only.py)
            text = "\n".join(line for line in text.splitlines() if "pg_extension_config_dump" not in line)
            conn.execute(text)
        yield conn


def rows(conn, sql):
    return conn.execute(sql).fetchall()


def refusal(conn, sql):
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(sql)
    return caught.value.sqlstate, str(caught.value).split("\n")[0].replace("sqlonly.", "jobs.")


def test_the_documented_errors_are_the_extensions(conn):
    assert rows(conn, "select * from sqlonly.error_codes()") == rows(conn, "select * from jobs.error_codes()")


def test_an_unknown_outcome_is_refused_as_the_extension_refuses_it(conn):
    assert refusal(conn, "select sqlonly._outcome('q', 'exploded')") == \
        refusal(conn, "select jobs._outcome('q', 'exploded')")
    assert rows(conn, "select sqlonly._outcome('q', 'completed')") == [(True,)]


def test_a_setting_that_is_not_a_retention_is_refused_as_the_extension_refuses_it(conn):
    theirs = refusal(conn, "select jobs._retention('pg_jobs.clock_offset', null)")
    ours = refusal(conn, "select sqlonly._retention('pg_jobs.clock_offset', null)")
    assert ours == theirs


def test_the_defaults_are_the_extensions(conn):
    assert rows(conn, "select sqlonly._max_payload_size(), sqlonly._retention('pg_jobs.completed_retention', null), "
                      "sqlonly._retention('pg_jobs.dead_retention', null)") == \
        rows(conn, "select jobs._max_payload_size(), jobs._retention('pg_jobs.completed_retention', null), "
                   "jobs._retention('pg_jobs.dead_retention', null)")
    assert rows(conn, "select abs(extract(epoch from sqlonly.clock() - jobs.clock())) < 5") == [(True,)]
