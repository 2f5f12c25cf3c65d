"""Outcome counters (jobs.outcome_stats) and the signals to holders and watchers
(pg_jobs_cancel, pg_jobs_dead), src/commit/outcomes.rs.

The shared cluster preloads pg_jobs, so the counters are kept; its per-test databases have no
sweeper, so their signals are sent by the settling transaction itself. The relayed signals are
tested on the launcher's cluster, where every database has a sweeper. Without preload the view
has no rows (pg_test/sql/outcomes.sql). Each test says how it was checked to fail without its
guard.
"""

import json
import threading
import uuid

import psycopg
import pytest

from polling import one
from test_launcher import make_db, server  # noqa: F401  (the launcher's cluster)
from test_relay import sweeper_pid

COUNTERS = ("completed", "retried", "dead", "failed", "cancelled", "timed_out", "lease_lapsed")
WAIT = 5  # seconds at most for a notification that must come


def counts(dsn, queue="default"):
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(f"select {', '.join(COUNTERS)} from jobs.outcome_stats where queue = %s",
                           (queue,)).fetchone()
    return dict(zip(COUNTERS, row or (0,) * len(COUNTERS), strict=True))


def only(**wanted):
    return {c: wanted.get(c, 0) for c in COUNTERS}


def claim(conn, lease="30 seconds", n=1):
    return conn.execute("select id, claim from jobs.claim('w', lease => %s, max_jobs => %s)",
                        (lease, n)).fetchall()


@pytest.mark.library(reason='no outcome counters; a death signalled per job')
def test_each_way_a_job_ends_is_counted_once_under_its_outcome(dsn):
    """Every statement that settles a job counts it: complete, complete_many, fail (retried,
    dead, failed), cancel, the claim's burial and lapse, the sweep's lapse and timeout.
    Checked to fail without its guard: with the call taken out of any one of them, that
    outcome stays 0."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("insert into jobs.job_types (name, max_attempts, backoff_base, jitter, dead_letter)"
                     " values ('two', 2, '0', 0, true), ('once', 1, '0', 0, false),"
                     " ('slow', 2, '0', 0, true)")
        conn.execute("update jobs.job_types set timeout = '10 seconds' where name = 'slow'")

        conn.execute("select jobs.enqueue('plain')")
        (job, tok), = claim(conn)
        assert conn.execute("select jobs.complete(%s, %s)", (job, tok)).fetchone()[0]
        conn.execute("select jobs.enqueue('plain') from generate_series(1, 3)")
        held = claim(conn, n=3)
        conn.execute("select * from jobs.complete_many(%s, %s)", ([h[0] for h in held], [h[1] for h in held]))
        assert counts(dsn) == only(completed=4)

        conn.execute("select jobs.enqueue('two')")
        (job, tok), = claim(conn)
        assert conn.execute("select jobs.fail(%s, %s, 'x', now())", (job, tok)).fetchone()[0] == "retried"
        (job, tok), = claim(conn)
        assert conn.execute("select jobs.fail(%s, %s, 'x')", (job, tok)).fetchone()[0] == "dead"
        conn.execute("select jobs.enqueue('once')")
        (job, tok), = claim(conn)
        assert conn.execute("select jobs.fail(%s, %s, 'x')", (job, tok)).fetchone()[0] == "failed"
        assert counts(dsn) == only(completed=4, retried=1, dead=1, failed=1)

        # A lapse claimed again, then buried by the claim on the final attempt.
        conn.execute("select jobs.enqueue('two')")
        claim(conn, lease="1 second")
        conn.execute("set pg_jobs.clock_offset = '2s'")
        assert len(claim(conn, lease="1 second")) == 1
        conn.execute("set pg_jobs.clock_offset = '4s'")
        assert claim(conn) == []
        assert counts(dsn) == only(completed=4, retried=1, dead=2, failed=1, lease_lapsed=2)

        # The sweep: a lapse (runs again), a timeout (retried), then a timeout on the final
        # attempt (dead).
        conn.execute("reset pg_jobs.clock_offset")
        conn.execute("select jobs.enqueue('two')")
        claim(conn, lease="1 second")
        conn.execute("set pg_jobs.clock_offset = '2s'")
        conn.execute("select * from jobs.sweep()")
        assert counts(dsn) == only(completed=4, retried=1, dead=2, failed=1, lease_lapsed=3)
        conn.execute("select jobs.enqueue('slow', queue => 'slow')")
        conn.execute("select jobs.claim('w', array['slow'], lease => '1 hour')")
        conn.execute("set pg_jobs.clock_offset = '13s'")
        conn.execute("select * from jobs.sweep()")
        assert counts(dsn, "slow") == only(retried=1, timed_out=1)
        conn.execute("set pg_jobs.clock_offset = '14s'")
        assert len(conn.execute("select jobs.claim('w', array['slow'], lease => '1 hour')").fetchall()) == 1
        conn.execute("set pg_jobs.clock_offset = '30s'")
        conn.execute("select * from jobs.sweep()")
        assert counts(dsn, "slow") == only(retried=1, timed_out=2, dead=1)
        assert counts(dsn) == only(completed=4, retried=1, dead=2, failed=1, lease_lapsed=3)

        conn.execute("reset pg_jobs.clock_offset")
        job = conn.execute("select id from jobs.enqueue('plain')").fetchone()[0]
        assert conn.execute("select jobs.cancel(%s)", (job,)).fetchone()[0]
        assert counts(dsn)["cancelled"] == 1


@pytest.mark.library(reason='no outcome counters; a death signalled per job')
def test_what_rolls_back_is_not_counted(dsn):
    """A settle in a transaction that rolls back, or under a savepoint rolled back, counts
    nothing; the rest of the transaction counts. Checked to fail without its guard: counted
    at the call (not at the commit), the rolled-back completion was counted; without the
    subtransaction callback, the one under the savepoint was."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select jobs.enqueue('plain') from generate_series(1, 3)")
        held = claim(conn, n=3)
        with pytest.raises(psycopg.errors.RaiseException):
            with conn.transaction():
                conn.execute("select jobs.complete(%s, %s)", held[0])
                conn.execute("do $$ begin raise exception 'undo'; end $$")
        with conn.transaction():
            conn.execute("select jobs.complete(%s, %s)", held[1])
            with pytest.raises(psycopg.errors.RaiseException):
                with conn.transaction():  # a savepoint
                    conn.execute("select jobs.complete(%s, %s)", held[2])
                    conn.execute("do $$ begin raise exception 'undo'; end $$")
        assert counts(dsn) == only(completed=1)


@pytest.mark.library(reason='no outcome counters; a death signalled per job')
def test_concurrent_settles_are_all_counted_and_per_database(dsn, server_dsn):
    """Four connections complete 200 jobs each at once: 800 counted, none lost to a race
    (each commit adds with an atomic increment), and another database's counters are its own.
    Checked to fail without its guard: with a load and a store in place of fetch_add, the
    count came out short."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select jobs.enqueue('plain') from generate_series(1, 800)")
    errors = []

    def work():
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                for _ in range(200):
                    (job, tok), = claim(conn)
                    assert conn.execute("select jobs.complete(%s, %s)", (job, tok)).fetchone()[0]
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert counts(dsn) == only(completed=800)
    # A queue of another database is counted apart (the table is server-wide).
    name = dsn.rsplit("dbname=", 1)[1] + "_other"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f"create database {name}")
    try:
        other = f"{server_dsn} dbname={name}"
        one(other, "create extension pg_jobs")
        assert counts(other) == only()
        assert one(other, "select count(*) from jobs.outcome_stats") == 0
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f"drop database {name} with (force)")


@pytest.mark.library(reason='no outcome counters; a death signalled per job')
def test_a_monitor_reads_the_counters_and_nothing_else(dsn):
    """jobs.grant_monitor lets a role read jobs.outcome_stats; it cannot count an outcome
    itself (jobs._outcome is not granted)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("drop role if exists outcome_monitor")
        conn.execute("create role outcome_monitor")
        try:
            conn.execute("select jobs.grant_monitor('outcome_monitor')")
            conn.execute("select jobs.enqueue('plain')")
            (job, tok), = claim(conn)
            conn.execute("select jobs.complete(%s, %s)", (job, tok))
            conn.execute("set role outcome_monitor")
            assert conn.execute("select completed from jobs.outcome_stats").fetchone()[0] == 1
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("select jobs._outcome('default', 'completed')")
            conn.execute("reset role")
            assert counts(dsn) == only(completed=1)
        finally:
            conn.execute("reset role")
            conn.execute("drop owned by outcome_monitor")
            conn.execute("drop role outcome_monitor")


def notes(conn, timeout, count=10_000):
    """The notifications that come within timeout seconds: (channel, payload, pid)."""
    return [(n.channel, n.payload, n.pid) for n in conn.notifies(timeout=timeout, stop_after=count)]


def test_cancelling_a_running_job_signals_its_holder_at_the_commit(dsn):
    """Without a sweeper in the database, the cancelling transaction signals at its commit:
    pg_jobs_cancel with the id of the running job cancelled, nothing for a ready one (whose
    cancel passes the state the row had when the UPDATE took it), nothing for a cancel rolled
    back."""
    with psycopg.connect(dsn, autocommit=True) as listen, psycopg.connect(dsn, autocommit=True) as conn:
        listen.execute("listen pg_jobs_cancel")
        running = conn.execute("select id from jobs.enqueue('plain')").fetchone()[0]
        claim(conn)
        ready = conn.execute("select id from jobs.enqueue('plain')").fetchone()[0]
        with conn.transaction():
            conn.execute("select jobs.cancel(%s)", (running,))
            conn.execute("select jobs.cancel(%s)", (ready,))
        undone = conn.execute("select id from jobs.enqueue('plain')").fetchone()[0]
        claim(conn)
        with pytest.raises(psycopg.errors.RaiseException):
            with conn.transaction():
                conn.execute("select jobs.cancel(%s)", (undone,))
                conn.execute("do $$ begin raise exception 'undo'; end $$")
        assert [(c, p) for c, p, _ in notes(listen, 1)] == [("pg_jobs_cancel", str(running))]


@pytest.mark.library(reason='no outcome counters; a death signalled per job')
def test_jobs_that_die_are_signalled_once_per_queue_and_transaction(dsn):
    """pg_jobs_dead: a job failed on its final attempt names its queue and id; five buried by
    one claim come as one signal with their count (a signal per job would send five)."""
    with psycopg.connect(dsn, autocommit=True) as listen, psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("insert into jobs.job_types (name, max_attempts) values ('once', 1)")
        listen.execute("listen pg_jobs_dead")
        job = conn.execute("select id from jobs.enqueue('once')").fetchone()[0]
        (_, tok), = claim(conn)
        assert conn.execute("select jobs.fail(%s, %s, 'x')", (job, tok)).fetchone()[0] == "dead"
        got = notes(listen, 1)
        assert [(c, json.loads(p)) for c, p, _ in got] == [
            ("pg_jobs_dead", {"queue": "default", "count": 1, "id": str(job)})]
        conn.execute("select jobs.enqueue('once') from generate_series(1, 5)")
        assert len(claim(conn, lease="1 second", n=5)) == 5
        conn.execute("set pg_jobs.clock_offset = '2s'")
        assert claim(conn, n=5) == []  # buried, all five
        got = notes(listen, 1)
        assert [(c, json.loads(p)) for c, p, _ in got] == [("pg_jobs_dead", {"queue": "default", "count": 5})]


def test_signals_are_relayed_by_the_sweeper(make_db):  # noqa: F811
    """With a sweeper in the database, the signals come from it, not from the settling
    transaction (which takes no notification lock at its commit), and only for what committed.
    Checked to fail without its guard: with the transaction notifying for itself, the signals
    came from the canceller's pid."""
    _, dsn = make_db()
    relay = sweeper_pid(dsn)
    with psycopg.connect(dsn, autocommit=True) as listen, psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("insert into jobs.job_types (name, max_attempts) values ('once', 1)")
        listen.execute("listen pg_jobs_cancel")
        listen.execute("listen pg_jobs_dead")
        running = conn.execute("select id from jobs.enqueue('plain')").fetchone()[0]
        claim(conn)
        conn.execute("select jobs.cancel(%s)", (running,))
        undone = conn.execute("select id from jobs.enqueue('plain')").fetchone()[0]
        claim(conn)
        with pytest.raises(psycopg.errors.RaiseException):
            with conn.transaction():
                conn.execute("select jobs.cancel(%s)", (undone,))
                conn.execute("do $$ begin raise exception 'undo'; end $$")
        dead = conn.execute("select id from jobs.enqueue('once')").fetchone()[0]
        (_, tok), = claim(conn)
        conn.execute("select jobs.fail(%s, %s, 'x')", (dead, tok))
        got = sorted(notes(listen, 2))
        assert got == [("pg_jobs_cancel", str(running), relay),
                       ("pg_jobs_dead", json.dumps({"count": 1, "id": str(dead), "queue": "default"},
                                                   separators=(",", ":")), relay)]


@pytest.mark.library(reason='no outcome counters; a death signalled per job')
def test_a_database_takes_at_most_its_share_of_the_counters(dsn, server_dsn):
    """A database whose jobs end in 200 queues takes 128 counter slots, the rest of its queues
    counted in its own row whose queue is NULL; another database still gets a row per queue.
    Checked to fail without the guard: at 551070c 1,100 queues made in one database took the
    whole server's 1,024 slots, and every other database's new queues were counted together
    in one NULL row."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("""select count(*) from jobs.enqueue_batch(
                          (select jsonb_agg(jsonb_build_object('name', 'n', 'queue', 'share_' || g))
                           from generate_series(1, 200) as g))""")
        conn.execute("update jobs_data.jobs set state = 'running', claim = 7, lease_expires_at = now() + interval '1 hour'")
        conn.execute("select count(*) from jobs.complete_many(array(select id from jobs_data.jobs order by id),"
                     " array(select 7::bigint from jobs_data.jobs))")
        named, unnamed, total = conn.execute(
            "select count(*) filter (where queue is not null), sum(completed) filter (where queue is null),"
            " sum(completed) from jobs.outcome_stats").fetchone()
    assert (named, unnamed, total) == (128, 72, 200)
    other = "t_share_" + uuid.uuid4().hex[:8]
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f"create database {other}")
    try:
        with psycopg.connect(f"{server_dsn} dbname={other}", autocommit=True) as conn:
            conn.execute("create extension pg_jobs")
            conn.execute("select jobs.enqueue('n', queue => 'mine')")
            job_id, claim = conn.execute("select id, claim from jobs.claim('w', array['mine'])").fetchone()
            conn.execute("select jobs.complete(%s, %s)", (job_id, claim))
            assert conn.execute("select queue, completed from jobs.outcome_stats").fetchall() == [("mine", 1)]
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f"drop database {other} with (force)")
