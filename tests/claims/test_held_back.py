"""A waiting claim whose candidates a limit holds back (concurrency, a concurrency key, a rate):
it lets go of them and sleeps until a slot of that limit can have freed, instead of answering
nothing at once (which made every worker on a full limit claim in a loop). Also the wait
without preload, which polls.

How the guards were checked: at 551070c (the claim answered as soon as its look found only
held-back candidates) the first three tests failed at "answered nothing" within milliseconds;
with the look not rolled back before the sleep (its candidates and the limit's lock slot kept),
the second waiter of `test_two_waiters_on_one_full_limit_both_sleep` waited on that lock
(wait_event_type Lock) and the test failed at its bound; with the slots' wake-up
(jobs._slot_freed) made a no-op, the waiter of the first test slept to its 60 s deadline and
the test failed at its bound. Without preload the wait slept to its deadline at 551070c (no
poll), and `test_without_preload_a_waiting_claim_polls` failed at its bound. Every wait polls
with a bound; none asserts how fast anything was.
"""

import os
import threading
import time

import psycopg
import pytest

from clusters import own_cluster
from polling import ASLEEP
from test_blocking_claim import BOUND, Waiter, until_waiting

PORT = int(os.environ.get("PG_JOBS_NOPRELOAD_PORT", "54418"))


def claims_asleep(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(f"select count(*) filter (where {ASLEEP}),"
                            " count(*) filter (where wait_event_type = 'Lock')"
                            " from pg_stat_activity where query like '%jobs.claim(%wait%'").fetchone()


def looks_of(dsn):
    """How many times jobs._held_back ran (track_functions is on in the waiters' sessions)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select coalesce(sum(calls), 0) from pg_stat_user_functions"
                           " where schemaname = 'jobs' and funcname = '_held_back'").fetchone()
    return int(row[0])


TRACK = ("set track_functions = 'pl'",)


def held_waiter(dsn, sql):
    waiter = Waiter(dsn, sql, setup=TRACK)
    waiter.start()
    return waiter


@pytest.mark.library(reason='its waits poll')
def test_a_waiting_claim_on_a_full_concurrency_limit_sleeps_until_the_slot_frees(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("insert into jobs.job_types (name, concurrency) values ('solo', 1)")
        conn.execute("select jobs.enqueue('solo', '{\"n\": 1}')")
        conn.execute("select jobs.enqueue('solo', '{\"n\": 2}')")
        holder = conn.execute("select id, claim from jobs.claim('holder')").fetchone()
    waiter = held_waiter(dsn, "select payload->>'n' from jobs.claim('w', wait => '60 s')")
    until_waiting(dsn)
    time.sleep(1)
    assert waiter.is_alive(), f"answered nothing while the limit was full: {waiter.rows} {waiter.error}"
    assert claims_asleep(dsn) == (1, 0)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("select jobs.complete(%s, %s)", holder).fetchone()[0]
    waiter.join(BOUND)
    assert not waiter.is_alive(), "not woken when the slot freed"
    assert waiter.error is None and waiter.rows == [("2",)]
    # A second of a full limit cost a bounded number of looks, not a loop (the statistics of
    # the waiter's session are flushed when it ends).
    deadline = time.monotonic() + BOUND
    while looks_of(dsn) == 0:
        assert time.monotonic() < deadline, "the waiter's function statistics never arrived"
        time.sleep(0.1)
    assert looks_of(dsn) <= 4


def test_a_waiting_claim_on_a_full_concurrency_key_takes_another_key_and_then_its_own(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select jobs.enqueue('sync', '{\"n\": 1}', concurrency_key => 'acct-1')")
        conn.execute("select jobs.enqueue('sync', '{\"n\": 2}', concurrency_key => 'acct-1')")
        holder = conn.execute("select id, claim from jobs.claim('holder')").fetchone()
    waiter = held_waiter(dsn, "select payload->>'n' from jobs.claim('w', wait => '60 s')")
    until_waiting(dsn)
    assert waiter.is_alive()
    with psycopg.connect(dsn, autocommit=True) as conn:  # the key's job fails, retried in an hour
        assert conn.execute("select jobs.fail(%s, %s, 'boom', retry_at => now() + interval '1 hour')",
                            holder).fetchone()[0] == "retried"
    waiter.join(BOUND)
    assert not waiter.is_alive(), "not woken when the key's job stopped running"
    assert waiter.error is None and waiter.rows == [("2",)]


def test_a_waiting_claim_on_a_full_rate_limit_returns_when_the_window_opens(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("insert into jobs.job_types (name, rate_limit, rate_period)"
                     " values ('call_api', 1, '2 seconds')")
        conn.execute("select jobs.enqueue('call_api', '{\"n\": 1}')")
        conn.execute("select jobs.enqueue('call_api', '{\"n\": 2}')")
        assert conn.execute("select count(*) from jobs.claim('holder')").fetchone()[0] == 1
    started = time.monotonic()
    waiter = held_waiter(dsn, "select payload->>'n' from jobs.claim('w', wait => '60 s')")
    until_waiting(dsn)
    waiter.join(BOUND)
    assert not waiter.is_alive(), "not woken when the rate window opened"
    assert waiter.error is None and waiter.rows == [("2",)]
    assert time.monotonic() - started < BOUND


def test_two_waiters_on_one_full_limit_both_sleep_and_neither_holds_the_candidates(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("insert into jobs.job_types (name, concurrency) values ('solo', 1)")
        for n in range(3):
            conn.execute("select jobs.enqueue('solo', %s)", (psycopg.types.json.Jsonb({"n": n}),))
        holder = conn.execute("select id, claim from jobs.claim('holder')").fetchone()
    waiters = [held_waiter(dsn, "select payload->>'n' from jobs.claim('w', wait => '60 s')")
               for _ in range(2)]
    deadline = time.monotonic() + BOUND
    while claims_asleep(dsn) != (2, 0):
        assert time.monotonic() < deadline, f"not both asleep: {claims_asleep(dsn)} (asleep, on a lock)"
        time.sleep(0.05)
    with psycopg.connect(dsn, autocommit=True) as conn:
        # The held-back jobs are not locked by the sleepers: a plain look finds them free.
        assert conn.execute("select count(*) from (select 1 from jobs_data.jobs where state = 'ready'"
                            " for update skip locked) as free").fetchone()[0] == 2
        assert conn.execute("select jobs.complete(%s, %s)", holder).fetchone()[0]
    # One of them takes the freed slot; the other goes back to sleep until its deadline.
    deadline = time.monotonic() + BOUND
    while all(w.is_alive() for w in waiters):
        assert time.monotonic() < deadline, "neither woke when the slot freed"
        time.sleep(0.05)
    done = [w for w in waiters if not w.is_alive()]
    # (Either held-back job: two claimers racing for one slot each lock a candidate first.)
    assert len(done) == 1 and done[0].error is None and done[0].rows in ([("1",)], [("2",)])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select pg_cancel_backend(%s)", ([w for w in waiters if w.is_alive()][0].pid,))


def test_without_preload_a_waiting_claim_polls(dsn):
    with own_cluster("pg_jobs-nopreload.", PORT, "shared_preload_libraries = ''\n") as s:
        with psycopg.connect(s["dsn"], autocommit=True) as conn:
            assert conn.execute("show shared_preload_libraries").fetchone()[0] == ""
            conn.execute("create extension pg_jobs")
            conn.execute("select jobs.enqueue('warm_up')")  # the queue exists
            conn.execute("select count(*) from jobs.claim('w0')")
        waiter = Waiter(s["dsn"], "select name from jobs.claim('w', wait => '60 s')")
        waiter.start()
        until_waiting(s["dsn"])
        with psycopg.connect(s["dsn"], autocommit=True) as conn:
            conn.execute("select jobs.enqueue('send')")
        waiter.join(BOUND)
        assert not waiter.is_alive(), "the wait without preload did not poll"
        assert waiter.error is None and waiter.rows == [("send",)]


def test_a_waiting_claim_that_buries_a_lapsed_final_attempt_keeps_the_burial(dsn):
    """A look that buried something and claimed nothing is not rolled back with the sleep."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select jobs.enqueue('crashy', max_attempts => 1)")
        conn.execute("select count(*) from jobs.claim('gone', lease => '1 second')")
    time.sleep(1.2)
    result = {}

    def claim():
        with psycopg.connect(dsn, autocommit=True) as conn:
            result["rows"] = conn.execute("select count(*) from jobs.claim('w', wait => '1 s')").fetchone()

    thread = threading.Thread(target=claim, daemon=True)
    thread.start()
    thread.join(BOUND)
    assert result["rows"] == (0,)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("select state from jobs.jobs where name = 'crashy'").fetchone()[0] == "dead"
