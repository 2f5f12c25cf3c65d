"""The SQL-only edition's cron (sql-only/src/cron.sql, PL/pgSQL) answers as the extension's
(src/functions/cron.rs) does: the same refusal, word for word, for every expression, and the same
slots, next slot and latest slot in every zone, around daylight-saving changes included. Both
run in one database: the PL/pgSQL functions loaded into a schema of their own beside the
extension's. How the test was checked: it failed with the PL/pgSQL parser's `7 is Sunday too`
dropped (`0 0 * * 7`), and with the search's daylight-saving window (180 minutes) set to 0
(a slot in the second pass of an hour a fall-back repeats, in America/New_York)."""

import datetime as dt
import pathlib

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# (held beside the extension's functions, in one database)
pytestmark = pytest.mark.library

SOURCE = pathlib.Path(__file__).resolve().parents[2] / "sql-only" / "src" / "cron.sql"
ZONES = ["UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Antarctica/Troll",
         "Asia/Kolkata", "Pacific/Chatham", "America/Santiago"]
EXPRESSIONS = [
    "* * * * *", "*/15 9-17 * jan,JUL mon-fri", "0 0 * * 7", "0 0 29 2 *", "0 0 29 2 1", "30 2 * * *",
    "0 1-3 * * *", "59 23 31 12 *", "5/20 * * * *", "0 0 1,15 * 3", "@daily", "@Hourly", " @weekly ",
    "0 0 30 2 *", "0 0 31 4 *", "15,45 */2 * * sun,SAT", "0 12 * * 0-7", "0 0 * * */2", "7-59/13 1 * * *",
    "+5 +1 +01 +1 +0", "0 0 1 1 *", "0\t0  *\n* *",
]
REFUSED = [
    "", " ", "* * * *", "* * * * * *", "0 25 * * *", "0 0 * foo *", "0 0 * * 8", "*/0 * * * *",
    "5-1 * * * *", "@often", '@"quoted"\\', "0 0 0 * *", "0 0 * 13 *", "60 * * * *", "- * * * *",
    "1-2-3 * * * *", "*/ * * * *", "/5 * * * *", ",1 * * * *", "1, * * * *", "4294967296 * * * *",
    "*/4294967296 * * * *", "*/4294967295 * * * *", "0 0 * * mon-sun", "0 0 * JANUARY *", "a\x01b * * * *",
    "@", "0 0 * * sun-", "++1 * * * *", "* * * * * # comment",
]


@pytest.fixture
def conn(dsn):
    text = SOURCE.read_text().replace("jobs.", "sqlonly.")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create schema sqlonly")
        conn.execute(text)
        conn.execute("set timezone = 'UTC'")
        yield conn


def answers(conn, schema, sql, args):
    """The answer, or the refusal's SQLSTATE and message."""
    try:
        return ("ok", conn.execute(sql.replace("S.", f"{schema}."), args).fetchone()[0])
    except psycopg.Error as err:
        return ("error", err.sqlstate, str(err).split("\n")[0])


def same(conn, sql, *args):
    assert answers(conn, "sqlonly", sql, args) == answers(conn, "jobs", sql, args), (sql, args)


@pytest.mark.parametrize("cron", EXPRESSIONS + REFUSED)
def test_the_same_problem_for_each_expression(conn, cron):
    same(conn, "select S._cron_problem(%s)", cron)


TOKENS = st.sampled_from(["*", "0", "1", "5", "7", "12", "15", "23", "29", "31", "59", "60", "-", "/", ",", "jan",
                          "FEB", "dec", "sun", "Mon", "sat", "@daily", "@yearly", "@x", " ", "  ", "+", "2/3",
                          "*/5", "1-5", "mon-fri", "\t"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(TOKENS, max_size=14).map("".join))
def test_the_same_problem_for_generated_text(conn, cron):
    same(conn, "select S._cron_problem(%s)", cron)


def instants():
    """Around the DST changes of 2025 and 2026 in the zones above, and anywhere in 1990-2060."""
    changes = [dt.datetime(2025, 3, 9, 7, tzinfo=dt.UTC), dt.datetime(2025, 11, 2, 6, tzinfo=dt.UTC),
               dt.datetime(2026, 3, 29, 1, tzinfo=dt.UTC), dt.datetime(2026, 10, 25, 1, tzinfo=dt.UTC),
               dt.datetime(2025, 4, 5, 15, tzinfo=dt.UTC), dt.datetime(2025, 10, 4, 16, tzinfo=dt.UTC),
               dt.datetime(2026, 4, 5, 3, tzinfo=dt.UTC)]
    near = st.builds(lambda c, m: c + dt.timedelta(minutes=m), st.sampled_from(changes),
                     st.integers(min_value=-600, max_value=600))
    anywhere = st.datetimes(min_value=dt.datetime(1990, 1, 1), max_value=dt.datetime(2060, 1, 1),
                            timezones=st.just(dt.UTC))
    return st.one_of(near, anywhere)


VALID = st.sampled_from([e for e in EXPRESSIONS if e not in ("0 0 30 2 *", "0 0 31 4 *")])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(VALID, st.sampled_from(ZONES), instants(), st.integers(min_value=0, max_value=3000), st.integers(1, 40))
def test_the_same_slots(conn, cron, zone, after, minutes, most):
    until = after + dt.timedelta(minutes=minutes)
    same(conn, "select S._cron_slots(%s, %s, %s, %s, %s)", cron, zone, after, until, most)
    same(conn, "select S._cron_slots(%s, %s, %s, 'infinity', %s)", cron, zone, after, most)
    same(conn, "select S._cron_next(%s, %s, %s)", cron, zone, after)
    same(conn, "select S._cron_latest(%s, %s, %s, %s)", cron, zone, after, until)


@pytest.mark.parametrize("sql", [
    "select S._cron_next('0 0 30 2 *', 'UTC', now())",                      # never comes
    "select S._cron_next('0 0 29 2 1', 'UTC', '2025-01-01')",               # Feb 29 on a Monday: 2044
    "select S._cron_slots('0 25 * * *', 'UTC', now(), now() + interval '1 day', 5)",  # refused
    "select S._cron_slots('0 25 * * *', 'UTC', now(), now() - interval '1 day', 5)",  # no search
    "select S._cron_next('* * * * *', 'Nowhere/City', now())",              # unknown zone
    "select S._cron_next('* * * * *', 'UTC', 'infinity')",
    "select S._cron_slots('* * * * *', 'UTC', '-infinity', 'infinity', 3)",
    "select S._cron_slots('* * * * *', 'UTC', now(), '-infinity', 3)",
    "select S._cron_slots('* * * * *', 'UTC', now(), now() + interval '1 hour', 0)",
    "select S._cron_latest('0 0 1 1 *', 'UTC', '1990-01-01', '2026-06-01')",
    "select S._cron_latest('0 0 1 1 *', 'UTC', '2026-06-01', '1990-01-01')",
    "select S._cron_latest('0 0 30 2 *', 'UTC', '2026-06-01', '2026-06-02')",
    "select S._cron_latest('0 0 1 1 *', 'UTC', '4713-01-01 BC', '2026-06-01')",
    "select S._cron_next('59 23 31 12 *', 'UTC', '294270-01-01')",          # near the end of time
    "select S._cron_slots('* * * * *', 'Australia/Lord_Howe', '2025-04-05 14:00+00', '2025-04-05 16:00+00', 200)",
    # after, in the first pass of an hour a fall-back repeats: the second pass's slots are later
    "select S._cron_next('* * * * *', 'America/New_York', '2025-11-02 05:45+00')",
    "select S._cron_next('30 1 * * *', 'America/New_York', '2025-11-02 05:40+00')",
    "select S._cron_slots('*/10 1 * * *', 'America/New_York', '2025-11-02 05:25+00', 'infinity', 12)",
    "select S._cron_next('15 1 * * *', 'Europe/London', '2025-10-26 00:30+00')",
    "select S._cron_slots('*/5 1 * * *', 'Australia/Lord_Howe', '2025-04-05 14:40+00', 'infinity', 20)",
    "select S._cron_latest('30 1 * * *', 'America/New_York', '2025-11-01 00:00+00', '2025-11-02 06:45+00')",
])
def test_the_same_edges(conn, sql):
    same(conn, sql)
