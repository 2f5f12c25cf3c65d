"""Workers through PgBouncer in transaction pooling (Debian's pgbouncer, started here) drain a
queue with the blocking claim: no LISTEN, which transaction pooling cannot carry, and no
polling loop of their own. Jobs enqueued while the workers wait reach them at their commit.

The workers' connections disable psycopg's server-side prepared statements, as any client of
a transaction-pooling PgBouncer 1.18 must (a prepared statement lives in one server session).
"""

import os
import threading
import time

import psycopg
import pytest
from clusters import pgbouncer
from polling import ASLEEP

PORT = int(os.environ.get("PG_JOBS_PGBOUNCER_PORT", "54426"))
DEADLINE = 60


@pytest.fixture
def bouncer(dsn):
    """Workers and producers through one PgBouncer, in pools apart (docs/OPERATIONS.md)."""
    with pgbouncer(dsn, {"workers": 4, "producers": 2}, PORT) as through:
        yield through


def asleep_in_claims(dsn, n):
    """Waits until n claims sleep in the server (polling.ASLEEP)."""
    deadline = time.monotonic() + DEADLINE
    with psycopg.connect(dsn, autocommit=True) as conn:
        while conn.execute(f"select count(*) from pg_stat_activity where {ASLEEP} "
                           "and query like '%jobs.claim%'").fetchone()[0] < n:
            assert time.monotonic() < deadline, f"{n} claims never slept"
            time.sleep(0.05)


def waiting_claim(through, wait, ended):
    """A thread that claims one job through `through`, waiting up to `wait`; appends to `ended`
    the server's clock when the claim ended and how many jobs it got."""
    def run():
        with psycopg.connect(through, autocommit=True, prepare_threshold=None) as conn:
            # The materialized claim runs to its end before the clock is read.
            ended.append(conn.execute(
                "with c as materialized (select * from jobs.claim('waiter', max_jobs => 1, wait => %s::interval))"
                " select clock_timestamp(), count(*) from c", (wait,)).fetchone())
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_producers_in_a_pool_of_their_own_are_not_held_by_waiting_claims(dsn):
    """The set-up docs/OPERATIONS.md ("Wake-ups") documents: the workers' pool is taken whole
    by two waiting claims, and a producer's enqueue through the same PgBouncer, in a pool of its
    own, wakes one of them at its commit. (Checked with both entries in one pool: the claims
    end with nothing at their wait, and the test fails.)"""
    with pgbouncer(dsn, {"workers": 2, "producers": 2}, PORT) as through:
        ended = []
        threads = [waiting_claim(through["workers"], "20 s", ended) for _ in range(2)]
        asleep_in_claims(dsn, 2)
        with psycopg.connect(through["producers"], autocommit=True, prepare_threshold=None) as producer:
            producer.execute("select jobs.enqueue('bounced')")
        # One claim wakes at that commit and takes the job; the other sleeps on until the next.
        # Had the producer been held until the waits ended, both would have ended with nothing.
        with psycopg.connect(through["producers"], autocommit=True, prepare_threshold=None) as producer:
            producer.execute("select jobs.enqueue('bounced')")
        for t in threads:
            t.join(DEADLINE)
        assert sorted(got for _, got in ended) == [1, 1]


def test_in_one_shared_pool_waiting_claims_hold_a_producer_until_a_wait_ends(dsn):
    """Why the pools are kept apart: with every server connection of a pool held by waiting
    claims, a producer in that pool starts its transaction only after a claim has ended (the
    server's clocks compared; the claims find nothing and end at their wait)."""
    with pgbouncer(dsn, {"shared": 2}, PORT) as through:
        ended = []
        threads = [waiting_claim(through["shared"], "2 s", ended) for _ in range(2)]
        asleep_in_claims(dsn, 2)
        with psycopg.connect(through["shared"], autocommit=True, prepare_threshold=None) as producer:
            started = producer.execute("select now() from jobs.enqueue('held')").fetchone()[0]
        for t in threads:
            t.join(DEADLINE)
        assert len(ended) == 2
        assert started >= min(at for at, _ in ended)


def test_workers_through_pgbouncer_drain_a_queue_with_the_blocking_claim(dsn, bouncer):
    done = []
    stop = threading.Event()

    def worker(n):
        with psycopg.connect(bouncer["workers"], autocommit=True, prepare_threshold=None) as conn:
            while not stop.is_set():
                rows = conn.execute("select id, claim from jobs.claim(%s, max_jobs => 5, wait => '1 s')",
                                    (f"bounced-{n}",)).fetchall()
                for job_id, claim in rows:
                    if conn.execute("select jobs.complete(%s, %s)", (job_id, claim)).fetchone()[0]:
                        done.append(job_id)

    workers = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(4)]
    for w in workers:
        w.start()
    time.sleep(1)  # the workers are asleep in their claims: the queue is empty
    with psycopg.connect(bouncer["producers"], autocommit=True, prepare_threshold=None) as conn:
        for _ in range(10):
            conn.execute("""select count(*) from jobs.enqueue_batch(
                (select jsonb_agg(jsonb_build_object('name', 'bounced')) from generate_series(1, 20)))""")
            time.sleep(0.05)
    deadline = time.monotonic() + DEADLINE
    while len(done) < 200:
        assert time.monotonic() < deadline, f"{len(done)} of 200 jobs done through pgbouncer"
        time.sleep(0.05)
    stop.set()
    for w in workers:
        w.join(DEADLINE)
    assert len(done) == len(set(done)) == 200
    with psycopg.connect(dsn) as conn:
        assert conn.execute("select count(*) from jobs.jobs where state = 'completed'").fetchone()[0] == 200
