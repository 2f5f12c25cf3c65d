"""Helpers for tests that wait on the server: one value, and waiting for one value."""

import time

import psycopg

# A pg_stat_activity row asleep in a waiting claim (or jobs.wait_for_job): the extension's wait
# (a wait event of type Extension), or the SQL-only edition's poll (pg_sleep, docs/EDITIONS.md).
ASLEEP = "(wait_event_type = 'Extension' or wait_event = 'PgSleep')"


def one(dsn, sql, args=None):
    """The first column of the first row; None when there is no row, or for a statement that
    returns none."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, args)
        row = cur.fetchone() if cur.description else None
        return None if row is None else row[0]


def eventually(dsn, sql, wanted, timeout):
    """Polls sql until it answers wanted; fails after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = one(dsn, sql)
        if got == wanted:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{sql!r} answered {got!r}, not {wanted!r}, for {timeout} s")
        time.sleep(0.05)
