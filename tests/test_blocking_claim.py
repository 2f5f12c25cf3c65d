"""The blocking claim, jobs.claim(..., wait => ...), on the preloaded test cluster: woken from
shared memory at the commit that makes work, never before it, and otherwise at its deadline.

How the guard was checked: with jobs._signal_work made a no-op, the first test's waiter slept
to its 60 s deadline and the test failed at its 30 s bound. The window between a claim's look
and its sleep (why the counters are read before the look) is too narrow to hit on purpose;
`test_a_commit_between_the_look_and_the_sleep_is_not_missed` only exercises it by volume.
Every wait polls with a deadline; none asserts how fast anything was.
"""

import threading
import time

import psycopg
import pytest

BOUND = 30  # seconds: a waiter woken by its commit returns well within this; its deadline is 60


def waiting_claims(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("select count(*) from pg_stat_activity where wait_event_type = 'Extension'"
                            " and query like '%jobs.claim(%wait%'").fetchone()[0]


def until_waiting(dsn, n=1):
    deadline = time.monotonic() + BOUND
    while waiting_claims(dsn) < n:
        assert time.monotonic() < deadline, "the claim never went to sleep"
        time.sleep(0.02)


class Waiter(threading.Thread):
    """Runs one blocking claim on its own connection; keeps its rows or its error."""

    def __init__(self, dsn, sql, args=(), setup=()):
        super().__init__(daemon=True)
        self.dsn, self.sql, self.args, self.setup = dsn, sql, args, setup
        self.rows, self.error, self.pid = None, None, None

    def run(self):
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                self.pid = conn.info.backend_pid
                for statement in self.setup:
                    conn.execute(statement)
                self.rows = conn.execute(self.sql, self.args).fetchall()
        except psycopg.Error as exc:
            self.error = exc


def test_a_waiting_claim_is_woken_by_the_enqueues_commit_not_before_nor_by_another_queue(dsn):
    waiter = Waiter(dsn, "select name from jobs.claim('w', array['mail'], wait => '60 s')")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select jobs.enqueue('warm_up', queue => 'mail')")  # the queue exists
        conn.execute("select count(*) from jobs.claim('w0', array['mail'])")
    waiter.start()
    until_waiting(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:  # another queue's work: still asleep
        conn.execute("select jobs.enqueue('other', queue => 'reports')")
    time.sleep(0.5)
    assert waiter.is_alive(), "woken by another queue's enqueue, and claimed nothing"
    with psycopg.connect(dsn) as producer:
        producer.execute("select jobs.enqueue('send', queue => 'mail')")
        time.sleep(0.5)
        assert waiter.is_alive(), "woken before the commit"
        producer.commit()
    waiter.join(BOUND)
    assert not waiter.is_alive(), "not woken by the commit"
    assert waiter.error is None and waiter.rows == [("send",)]


def test_a_rolled_back_enqueue_wakes_nothing_and_the_deadline_ends_the_wait(dsn):
    waiter = Waiter(dsn, "select name from jobs.claim('w', array['default'], wait => '2 s')")
    waiter.start()
    until_waiting(dsn)
    with psycopg.connect(dsn) as producer:
        producer.execute("select jobs.enqueue('never')")
        producer.rollback()
    waiter.join(BOUND)
    assert waiter.error is None and waiter.rows == []


def test_a_delayed_job_is_claimed_when_it_comes_due(dsn):
    """Enqueued while the claim sleeps, due in a second: the claim learns of its due time
    at the enqueue's commit and takes it then, long before its own deadline."""
    waiter = Waiter(dsn, "select name from jobs.claim('w', array['default'], wait => '60 s')")
    waiter.start()
    until_waiting(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select jobs.enqueue('later', run_at => now() + interval '1 second')")
    waiter.join(BOUND)
    assert not waiter.is_alive() and waiter.rows == [("later",)]


def test_a_commit_between_the_look_and_the_sleep_is_not_missed(dsn):
    """Many claims wait while jobs are enqueued one by one: every job is claimed, none lost
    in the window between a claim's look and its sleep."""
    waiters = [Waiter(dsn, "select name from jobs.claim(%s, array['race'], wait => '60 s')", (f"w{n}",))
               for n in range(8)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("insert into jobs.queues (queue) values ('race')")
        for w in waiters:
            w.start()
        for n in range(8):
            conn.execute("select jobs.enqueue(%s, queue => 'race')", (f"job{n}",))
    for w in waiters:
        w.join(BOUND)
    assert all(not w.is_alive() for w in waiters), "a waiter missed its wake-up"
    assert sorted(r[0] for w in waiters for r in w.rows) == [f"job{n}" for n in range(8)]


@pytest.mark.parametrize("how", ["pg_cancel_backend", "statement_timeout"])
def test_a_waiting_claim_can_be_cancelled(dsn, how):
    sql = "select name from jobs.claim('w', array['default'], wait => '60 s')"
    waiter = Waiter(dsn, sql, setup=["set statement_timeout = '500ms'"] if how == "statement_timeout" else [])
    waiter.start()
    if how == "pg_cancel_backend":
        until_waiting(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("select pg_cancel_backend(%s)", (waiter.pid,)).fetchone()[0]
    waiter.join(BOUND)
    assert isinstance(waiter.error, psycopg.errors.QueryCanceled)


def test_wait_is_checked(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="jobs.claim: wait"):
            conn.execute("select * from jobs.claim('w', wait => '2 hours')")
        assert conn.execute("select count(*) from jobs.claim('w', wait => '0')").fetchone()[0] == 0
