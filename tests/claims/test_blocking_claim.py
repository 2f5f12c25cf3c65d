"""The blocking claim, jobs.claim(..., wait => ...), on the preloaded test cluster: woken from
shared memory at the commit that makes work, never before it, and otherwise at its deadline.

How the guard was checked: with jobs._signal_work made a no-op, the first test's waiter slept
to its 60 s deadline and the test failed at its 30 s bound. The window between a claim's look
and its sleep (why the counters are read before the look) is too narrow to hit on purpose;
`test_a_commit_between_the_look_and_the_sleep_is_not_missed` only exercises it by volume
(with jobs._signal_work replaced by a no-op and a second between enqueues, it failed at its
10 s of a claim asleep beside a ready job).
Every wait polls with a deadline; none asserts how fast anything was.
"""

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

import psycopg
import pytest

from clusters import own_cluster
from polling import ASLEEP

BOUND = 30  # seconds: a waiter woken by its commit returns well within this; its deadline is 60


def waiting_claims(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(f"select count(*) from pg_stat_activity where {ASLEEP}"
                            " and query like '%jobs.claim(%wait%'").fetchone()[0]


def until_waiting(dsn, n=1):
    deadline = time.monotonic() + BOUND
    while waiting_claims(dsn) < n:
        assert time.monotonic() < deadline, "the claim never went to sleep"
        time.sleep(0.02)


def asleep_or_done(dsn, sql):
    """A Waiter of one blocking claim, started, once its claim sleeps or has returned."""
    waiter = Waiter(dsn, sql)
    waiter.start()
    deadline = time.monotonic() + BOUND
    while waiter.is_alive() and waiting_claims(dsn) == 0:
        assert time.monotonic() < deadline, "the claim neither returned nor slept"
        time.sleep(0.02)
    return waiter


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


def test_a_waiting_claim_buries_a_lapsed_final_attempt_and_takes_the_ready_job_behind_it(dsn):
    """A claim of one job whose first candidate is a lapsed lease on its final attempt buries
    it and hands out the ready job behind it. Checked to fail without the guard: when a burial
    took the batch's slot (before 0.1.1's fix), the look answered nothing, no commit came to
    wake the claim, and it slept to its 60 s deadline (the test failed at its 30 s bound)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select jobs.enqueue('last_try', max_attempts => 1, priority => 9)")
        conn.execute("select count(*) from jobs.claim('gone')")
        conn.execute("update jobs.jobs set lease_expires_at = now() - interval '1 second', "
                     "lease_scan_at = now() - interval '1 second' where state = 'running'")
        conn.execute("select jobs.enqueue('behind')")
    waiter = Waiter(dsn, "select name from jobs.claim('w', array['default'], 1, wait => '60 s')")
    waiter.start()
    waiter.join(BOUND)
    assert not waiter.is_alive() and waiter.error is None and waiter.rows == [("behind",)]
    with psycopg.connect(dsn) as conn:
        assert conn.execute("select state::text from jobs.jobs where name = 'last_try'").fetchone()[0] == "dead"


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


def wake_up_state(conn):
    """What a missed wake-up looked like, for its failure message: the race queue's counter,
    its ready jobs and whether another transaction holds each, and every other busy backend."""
    seen = conn.execute("select jobs._work_seen(array['race'])").fetchone()[0]
    with conn.transaction():
        free = {r[0] for r in conn.execute("select name from jobs.jobs where queue = 'race' and state = 'ready'"
                                           " for update skip locked")}
        ready = [r[0] for r in conn.execute("select name from jobs.jobs where queue = 'race' and state = 'ready'")]
        raise psycopg.Rollback()
    busy = conn.execute("select pid, backend_xid, wait_event_type, wait_event, state,"
                        " round(extract(epoch from now() - state_change)::numeric, 1), left(query, 90)"
                        " from pg_stat_activity where pid <> pg_backend_pid() and state is distinct from 'idle'"
                        " and backend_type = 'client backend' or backend_type like 'pg_jobs%'").fetchall()
    return (f"counter {seen}; ready {[(n, 'free' if n in free else 'held by another transaction') for n in ready]}\n"
            + "\n".join(str(b) for b in busy))


def test_a_commit_between_the_look_and_the_sleep_is_not_missed(dsn):
    """Many claims wait while jobs are enqueued one by one: every job is claimed, none lost
    in the window between a claim's look and its sleep. The claims take an hour's lease: with
    the default 30 seconds, a machine stalled that long between two enqueues (fsyncs behind a
    build's writes) lets a later waiter claim an earlier job again, rightly, at attempt 2.

    A missed wake-up is told apart from a slow machine by what it looks like, not by a time:
    a claim asleep while a job of its queue stays ready (seen for 10 s on end; a commit's
    wake-up follows its rows' visibility at once). A stall only slows the claims down."""
    waiters = [Waiter(dsn, "select name, attempt from jobs.claim(%s, array['race'], lease => '1 hour',"
                           " wait => '1 hour')", (f"w{n}",))
               for n in range(8)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("insert into jobs.queues (queue) values ('race')")
        for w in waiters:
            w.start()
        for n in range(8):
            conn.execute("select jobs.enqueue(%s, queue => 'race')", (f"job{n}",))
        deadline, missed_since = time.monotonic() + 600, None
        while any(w.is_alive() for w in waiters):
            assert time.monotonic() < deadline, "the claims never ended"
            asleep = conn.execute(
                f"select exists (select from pg_stat_activity where {ASLEEP} and datname = current_database()"
                " and query like '%jobs.claim(%race%')"
                " and exists (select from jobs.jobs where queue = 'race' and state = 'ready')").fetchone()[0]
            missed_since = (missed_since or time.monotonic()) if asleep else None
            assert missed_since is None or time.monotonic() - missed_since < 10, \
                f"a waiter missed its wake-up: asleep while a job of its queue is ready\n{wake_up_state(conn)}"
            time.sleep(0.2)
    assert all(w.error is None for w in waiters), [w.error for w in waiters]
    assert sorted(r for w in waiters for r in w.rows) == [(f"job{n}", 1) for n in range(8)]


def test_a_look_that_found_nothing_hides_no_job_from_another_claim(dsn):
    """After a look that claimed nothing, a waiting claim asks what limits held back
    (jobs._held_back) in the look's subtransaction, rolled back after. What it reads stays
    free meanwhile: another claim looking at that moment takes the job rather than skip it and
    sleep beside it, since the job's commit moved no counter after that claim read them. Here
    the question is held open in a transaction, as a busy machine holds it for an instant.

    Checked: with _held_back locking what it read (FOR UPDATE SKIP LOCKED, as it once did), the
    waiter slept through the rollback and this failed at its 30 s bound; so did 1 run in about
    250 of the test above, run two at a time."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select jobs.enqueue('plain', queue => 'hidden')")
    with psycopg.connect(dsn) as other:
        other.execute("select * from jobs._held_back(array['hidden'], null, now())")
        waiter = asleep_or_done(dsn, "select name from jobs.claim('w', array['hidden'], wait => '60 s')")
        other.rollback()
    waiter.join(BOUND)
    assert not waiter.is_alive() and waiter.error is None and waiter.rows == [("plain",)]


@pytest.mark.parametrize("path", ["one_statement", "with_a_lapsed_lease"])
def test_a_claim_that_locked_more_than_it_moved_wakes_the_claims_that_skipped_them(dsn, path):
    """A claim locks up to max_jobs ready, due and lapsed jobs each and moves the first
    max_jobs of them; the others stay locked until it commits. A waiting claim that looked
    meanwhile skipped them and slept: the first claim's commit wakes it. Both of the claim's
    paths: its one statement, and the statements after it (a lapsed lease among the
    candidates). Checked: without the wake-up in either path the waiter slept through the
    commit and this failed at its 30 s bound."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select jobs.enqueue('second', queue => 'overlocked', run_at => now() + interval '200 ms')")
        if path == "one_statement":
            conn.execute("select jobs.enqueue('first', queue => 'overlocked', priority => 10)")
        else:
            conn.execute("select jobs.enqueue('first', queue => 'overlocked', priority => 10, max_attempts => 5)")
            conn.execute("select count(*) from jobs.claim('gone', array['overlocked'], lease => '100 ms')")
        time.sleep(0.4)  # 'second' is due (still delayed), and the lapsed lease's has lapsed
    with psycopg.connect(dsn) as claimer:
        assert claimer.execute("select name from jobs.claim('a', array['overlocked'])").fetchall() == [("first",)]
        waiter = asleep_or_done(dsn, "select name from jobs.claim('w', array['overlocked'], wait => '60 s')")
        claimer.commit()
    waiter.join(BOUND)
    assert not waiter.is_alive() and waiter.error is None and waiter.rows == [("second",)]


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


def vacuum_leaves_dead(conn, table):
    """VACUUM VERBOSE the table: how many of its dead rows it could not remove yet."""
    said = []
    conn.add_notice_handler(lambda n: said.append(n.message_primary))
    conn.execute(f"vacuum (verbose) {table}")
    line = next(m for m in said if "dead but not yet removable" in m)
    return int(line.split(" are dead but not yet removable")[0].rsplit(" ", 1)[1])


@pytest.mark.library(reason="its waiting claim holds its statement's snapshot")
def test_a_waiting_claim_does_not_hold_back_vacuum(dsn):
    """While `select ... from jobs.claim(..., wait => ...)` sleeps, its backend has no xmin,
    so rows that die meanwhile are removed by a vacuum; woken, the claim looks with a new
    snapshot and claims. Checked to fail without its guard: with release_xmin_if_unused
    returning at once, the waiting backend's backend_xmin stayed set."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table churn as select g as n from generate_series(1, 100) g")
        waiter = Waiter(dsn, "select name from jobs.claim('w', array['idle'], wait => '60 s')")
        waiter.start()
        until_waiting(dsn)
        assert conn.execute("select backend_xmin from pg_stat_activity where pid = %s",
                            (waiter.pid,)).fetchone()[0] is None
        conn.execute("update churn set n = n + 1")
        assert vacuum_leaves_dead(conn, "churn") == 0
        conn.execute("select jobs.enqueue('go', queue => 'idle')")
    waiter.join(BOUND)
    assert waiter.error is None and waiter.rows == [("go",)]


def test_a_waiting_claim_inside_a_transaction_keeps_its_snapshot(dsn):
    """Inside BEGIN, a snapshot older than the wait may be used again after it (an open
    cursor, the next statement of a REPEATABLE READ transaction): the claim keeps its xmin."""
    waiter = Waiter(dsn, "select name from jobs.claim('w', array['idle'], wait => '2 s')", setup=["begin"])
    waiter.start()
    until_waiting(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("select backend_xmin from pg_stat_activity where pid = %s",
                            (waiter.pid,)).fetchone()[0] is not None
    waiter.join(BOUND)
    assert waiter.error is None and waiter.rows == []


@pytest.mark.parametrize("level", ["repeatable read", "serializable"])
def test_a_waiting_claim_needs_read_committed(dsn, level):
    """Its snapshot would never see new work: refused, and nothing is claimed."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        job = conn.execute("select id from jobs.enqueue('ready_now', queue => 'rr')").fetchone()[0]
        conn.execute(f"begin isolation level {level}")
        with pytest.raises(psycopg.Error, match="wait needs READ COMMITTED") as refused:
            conn.execute("select * from jobs.claim('w', array['rr'], wait => '1 s')")
        assert refused.value.sqlstate == "PJ008"
        assert "claim without wait" in refused.value.diag.message_hint
        conn.execute("rollback")
        assert conn.execute("select state::text, attempt from jobs.jobs where id = %s", (job,)).fetchone() == ("ready", 0)


# Each source of work wakes a waiting claim of its queue. `setup` leaves one job of the queue
# not claimable before the claim waits (parked, paused, dead, delayed, or held by another
# claim); `made`, from another connection, makes it claimable (or, for a lease, nothing does:
# the waiter must wake by itself when it expires). The waiter must come back with the job long
# before its 60 s deadline.
HELD = ["select jobs.enqueue('evt', queue => 'src')", "select count(*) from jobs.claim('x', array['src'])"]
ON_HELD = "from jobs.jobs where queue = 'src' and state = 'running'"
SOURCES = {
    "publish": (HELD + ["select jobs.await_event(id, claim, 'paid', 'k') " + ON_HELD],
                "select jobs.publish('paid', '{}', key => 'k')"),
    "requeue": (HELD + ["select jobs.fail(id, claim, 'no', retryable => false) " + ON_HELD],
                "select jobs.requeue(id) from jobs.jobs where queue = 'src' and state = 'dead'"),
    "promote": (["select jobs.enqueue('evt', queue => 'src', run_at => now() + interval '1 day')"],
                "select jobs.promote(id) from jobs.jobs where queue = 'src' and state = 'delayed'"),
    "resume_queue": (["select jobs.enqueue('evt', queue => 'src')", "select jobs.pause_queue('src')"],
                     "select jobs.resume_queue('src')"),
    "a retry (fail)": (HELD, "select jobs.fail(id, claim, 'again', retry_at => now() + interval '500 ms') " + ON_HELD),
    "a snooze": (HELD, "select jobs.snooze(id, claim, now() + interval '500 ms') " + ON_HELD),
    "an event wait's timeout": (HELD, "select jobs.await_event(id, claim, 'never', timeout => '500 ms') " + ON_HELD),
    "a lease expiring": (["select jobs.enqueue('evt', queue => 'src')",
                          "select count(*) from jobs.claim('x', array['src'], lease => '1 s')"], "select 1"),
}


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_every_source_of_work_wakes_a_waiting_claim(dsn, source):
    setup, made = SOURCES[source]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in setup:
            conn.execute(statement)
    waiter = Waiter(dsn, "select name from jobs.claim('w', array['src'], wait => '60 s')")
    waiter.start()
    until_waiting(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(made)
    waiter.join(BOUND)
    assert not waiter.is_alive(), f"not woken by {source}"
    assert waiter.error is None and waiter.rows == [("evt",)]


def test_a_shutdown_during_a_wait_ends_it_and_leaves_nothing_claimed():
    """A fast shutdown while a claim waits ends the wait at once (the claim's connection is
    terminated), and after the restart nothing is claimed or locked."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cluster = os.path.join(root, "scripts/cluster.sh")
    scratch = tempfile.mkdtemp(prefix="pg_jobs-shutdown.")  # the postgres user must reach it
    os.chmod(scratch, 0o777)
    directory = os.path.join(scratch, "data")
    port = os.environ.get("PG_JOBS_SHUTDOWN_PORT", "54425")
    server = subprocess.run(["bash", cluster, "start", directory, port], check=True, capture_output=True,
                            text=True).stdout.strip()
    try:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute("create extension pg_jobs")
            conn.execute("select jobs.enqueue('held', queue => 'other')")
        waiter = Waiter(server, "select name from jobs.claim('w', array['default'], wait => '60 s')")
        waiter.start()
        until_waiting(server)
        bin_dir = os.environ.get("PG_JOBS_PG_BIN", "/usr/lib/postgresql/15/bin")
        subprocess.run(["runuser", "-u", "postgres", "--", f"{bin_dir}/pg_ctl", "-D", directory, "-m", "fast",
                        "-w", "-t", "30", "stop"], check=True, capture_output=True)
        waiter.join(BOUND)
        assert not waiter.is_alive() and waiter.error is not None
        subprocess.run(["bash", cluster, "start", directory, port], check=True, capture_output=True)
        with psycopg.connect(server, autocommit=True) as conn:
            assert conn.execute("select count(*) from jobs.jobs where state = 'running'").fetchone()[0] == 0
            assert conn.execute("select count(*) from pg_locks where locktype = 'tuple'").fetchone()[0] == 0
            assert conn.execute("select count(*) from jobs.claim('w2', array['other'])").fetchone()[0] == 1
    finally:
        subprocess.run(["bash", cluster, "stop", directory], capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.parametrize("backtrace", ["1", "full"])
def test_a_cancelled_wait_tells_no_backtrace_whatever_rust_backtrace_says(backtrace):
    """With RUST_BACKTRACE=1 or full in the server's environment, a waiting claim ended by
    statement_timeout answers 57014 with no Rust backtrace in its DETAIL, and the server log
    has no frame of one: per cancelled wait, one error report. Checked to fail without the
    guard (RUST_LIB_BACKTRACE set in _PG_init): the DETAIL held 37 frames, logged at every
    cancel."""
    port = int(os.environ.get("PG_JOBS_BACKTRACE_PORT", "54419"))
    with own_cluster("pg_jobs-backtrace.", port, "", env={"RUST_BACKTRACE": backtrace}) as s:
        with psycopg.connect(s["dsn"], autocommit=True) as conn:
            conn.execute("create extension pg_jobs")
            conn.execute("set statement_timeout = '300ms'")
            for _ in range(2):
                with pytest.raises(psycopg.errors.QueryCanceled) as cancelled:
                    conn.execute("select * from jobs.claim('w', wait => '10 s')")
                assert not cancelled.value.diag.message_detail, cancelled.value.diag.message_detail
        with open(os.path.join(s["dir"], "log")) as log:
            text = log.read()
        assert text.count("canceling statement due to statement timeout") == 2
        assert "std::" not in text
        # From the first cancel on, the log holds one error report per cancelled wait: its
        # ERROR line with PostgreSQL's own CONTEXT and STATEMENT, nothing of pg_jobs's.
        first = text.rindex("\n", 0, text.index("canceling statement due to statement timeout")) + 1
        entries = re.findall(r"^\S+ \S+ UTC \[\d+\] (\w+):", text[first:], re.M)
        assert entries == ["ERROR", "CONTEXT", "STATEMENT"] * 2, entries
