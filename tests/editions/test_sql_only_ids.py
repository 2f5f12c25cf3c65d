"""The SQL-only edition's claim tokens and job ids (sql-only/src/ids.sql, PL/pgSQL) keep the
guarantees of the extension's (src/functions/tokens.rs, src/functions/ids.rs), beside which they run in one
database: a token follows the clock's milliseconds and is greater than the token before it
(one ahead of the clock, one of 0.1.0, one from the future of its high bits), with 23 random
low bits; ids are UUIDv7 with the time of their making, strictly increasing on a connection
(10,000 in one statement, and across statements), each with random bits of its own, and on a
shard ending with its number. How the
test was checked: it failed with the token's `+ 1` dropped, and with the id's counter not
carried from one call to the next."""

import pathlib
import time
import uuid

import psycopg
import pytest

# (held beside the extension's functions, in one database)
pytestmark = pytest.mark.library

SOURCE = pathlib.Path(__file__).resolve().parents[2] / "sql-only" / "src" / "ids.sql"
LOW = 1 << 23


@pytest.fixture
def conn(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create schema sqlonly")
        # (the edition's shard number, jobs_config's row in sql-only/src/config.sql: none here)
        conn.execute("create table sqlonly.shard (value int)")
        conn.execute("create function sqlonly._shard() returns int language sql stable "
                     "as 'select value from sqlonly.shard'")
        conn.execute(SOURCE.read_text().replace("jobs.", "sqlonly."))
        yield conn


def one(conn, sql, *args):
    return conn.execute(sql, args).fetchone()[0]


@pytest.mark.parametrize("previous", [0, (7 << 32) | 0xFFFF_FFFF, -5])
def test_a_token_follows_the_clock_as_the_extensions_does(conn, previous):
    ours, theirs = one(conn, "select array[sqlonly._next_claim(%s), jobs._next_claim(%s)]", previous, previous)
    assert ours > previous
    assert abs((ours >> 23) - (theirs >> 23)) <= 5  # the same millisecond, or a few apart
    millis = int((time.time() - 1704067200) * 1000)  # since 2024-01-01 UTC
    assert abs((ours >> 23) - millis) < 60_000


def test_a_token_ahead_of_the_clock_is_followed_by_the_next_millisecond(conn):
    ahead = ((int((time.time() - 1704067200) * 1000) + 3_600_000) << 23) | 12345  # an hour ahead
    ours, theirs = one(conn, "select array[sqlonly._next_claim(%s), jobs._next_claim(%s)]", ahead, ahead)
    assert ours >> 23 == theirs >> 23 == (ahead >> 23) + 1


def test_tokens_run_out_as_the_extensions_do(conn):
    last = ((1 << 40) - 1) << 23
    errors = []
    for schema in ("sqlonly", "jobs"):
        with pytest.raises(psycopg.Error) as caught:
            one(conn, f"select {schema}._next_claim(%s)", last)
        errors.append((caught.value.sqlstate, str(caught.value).split("\n")[0]))
    assert errors[0] == errors[1]


def test_a_tokens_low_bits_are_random(conn):
    tokens = [r[0] for r in conn.execute("select sqlonly._next_claim(0) from generate_series(1, 2000)")]
    lows = {t % LOW for t in tokens}
    assert len(lows) > 1990  # 2,000 draws from 8M values: a repeat or two at most
    assert max(lows) > LOW * 3 // 4 and min(lows) < LOW // 4


def test_ids_are_uuidv7_increasing_on_a_connection(conn):
    before = int(time.time() * 1000)
    ids = [r[0] for r in conn.execute("select sqlonly._uuid_v7() from generate_series(1, 10000)")]
    ids += [one(conn, "select sqlonly._uuid_v7()") for _ in range(200)]
    after = int(time.time() * 1000)
    assert all(a < b for a, b in zip(ids, ids[1:], strict=False)), "not strictly increasing"
    for i in ids[:5] + ids[-5:]:
        assert i.version == 7 and i.variant == uuid.RFC_4122
        assert before - 1000 <= i.int >> 80 <= after + 1000
    assert len({i.int & ((1 << 62) - 1) for i in ids}) == len(ids)  # random bits of their own
    theirs = one(conn, "select jobs._uuid_v7()")
    assert abs((theirs.int >> 80) - (ids[-1].int >> 80)) < 60_000


def test_on_a_shard_an_id_ends_with_its_number_as_the_extensions_do(conn):
    conn.execute("insert into sqlonly.shard values (9)")
    ids = [r[0] for r in conn.execute("select sqlonly._uuid_v7() from generate_series(1, 1000)")]
    assert {i.bytes[15] for i in ids} == {9}
    assert all(a < b for a, b in zip(ids, ids[1:], strict=False)), "not strictly increasing"
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 for i in ids)
