"""pg_jobs.completed_retention = 0: completing deletes the job instead of keeping it.

The setting is reloadable only (ALTER SYSTEM and a reload), so these tests set it for the
whole cluster and reset it afterwards. Races are driven with two connections: one holds a
transaction open while the other runs into it in a thread, and every wait polls with a deadline.
"""

import os
import threading
import time

import psycopg
import psycopg.sql
import pytest

DEADLINE = 20  # seconds


def set_retention(server_dsn, value, dsn):
    installer = os.environ.get("PG_JOBS_SQL_INSTALLER")
    if os.environ.get("PG_JOBS_EDITION") == "sql" and installer:
        # The SQL-only edition installed by a role that is no superuser may not read the
        # server's configuration files: its owner sets retentions in jobs_config.settings.
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("set role {}").format(psycopg.sql.Identifier(installer)))
            conn.execute("delete from jobs_config.settings where name = 'completed_retention'")
            if value is not None:
                conn.execute("insert into jobs_config.settings (name, value) "
                             "values ('completed_retention', extract(epoch from %s::interval))", (value,))
        return
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        if os.environ.get("PG_JOBS_EDITION") == "sql":
            # No library defines the setting: ALTER SYSTEM takes it once the session has it.
            conn.execute("select set_config('pg_jobs.completed_retention', '7d', false)")
        if value is None:
            conn.execute("alter system reset pg_jobs.completed_retention")
        else:
            conn.execute(f"alter system set pg_jobs.completed_retention = '{value}'")
        conn.execute("select pg_reload_conf()")
    # (reset: the default, or, on the SQL-only edition, no setting of that name at all)
    wanted = ("7d", None, "") if value is None else (value,)
    deadline = time.monotonic() + DEADLINE
    while True:  # the reload reaches new sessions once the postmaster has read the file
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            if conn.execute("select current_setting('pg_jobs.completed_retention', true)").fetchone()[0] in wanted:
                return
        assert time.monotonic() < deadline, "the reload did not take"
        time.sleep(0.05)


@pytest.fixture
def db(server_dsn, dsn):
    set_retention(server_dsn, "0", dsn)
    try:
        yield dsn
    finally:
        set_retention(server_dsn, None, dsn)


def connect(dsn):
    return psycopg.connect(dsn, autocommit=True)


def counts(conn):
    return conn.execute("select (select count(*) from jobs.jobs), (select count(*) from jobs.steps)").fetchone()


def blocked_or_done(conn, pid, thread):
    """Waits until the thread is done or the backend pid waits on a lock; answers which."""
    deadline = time.monotonic() + DEADLINE
    while thread.is_alive():
        waiting = conn.execute("select wait_event_type = 'Lock' from pg_stat_activity where pid = %s",
                               (pid,)).fetchone()[0]
        if waiting:
            return "blocked"
        assert time.monotonic() < deadline, "the other session neither finished nor waited"
        time.sleep(0.02)
    return "done"


def test_complete_and_complete_many_delete_the_jobs_and_the_runs_steps(db):
    with connect(db) as conn:
        conn.execute("select jobs.enqueue('one')")
        conn.execute("select jobs.enqueue_batch('[{\"name\": \"two\"}, {\"name\": \"three\"}]')")
        held = conn.execute("select id, claim from jobs.claim('w', max_jobs => 3) order by name").fetchall()
        for job_id, claim in held:
            conn.execute("select jobs.save_step(%s, %s, 'fetched', '1')", (job_id, claim))
        assert counts(conn) == (3, 3)

        (first_id, first_claim), rest = held[0], held[1:]
        assert conn.execute("select jobs.complete(%s, %s, '{\"kept\": false}')",
                            (first_id, first_claim)).fetchone()[0] is True
        assert counts(conn) == (2, 2)

        ids, claims = [r[0] for r in rest], [r[1] for r in rest]
        landed = conn.execute("select id, landed from jobs.complete_many(%s, %s)", (ids, claims)).fetchall()
        assert landed == [(ids[0], True), (ids[1], True)]
        assert counts(conn) == (0, 0)

        # Settling again finds nothing to hold: refused, as for any lost claim.
        assert conn.execute("select jobs.complete(%s, %s)", (first_id, first_claim)).fetchone()[0] is False
        again = conn.execute("select landed from jobs.complete_many(%s, %s)", (ids, claims)).fetchall()
        assert again == [(False,), (False,)]


def test_a_lost_claim_deletes_nothing_and_failures_are_kept(db):
    with connect(db) as conn:
        conn.execute("select jobs.enqueue('lapses')")
        conn.execute("select jobs.enqueue('fails', max_attempts => 1)")
        old = dict(conn.execute("select name, claim from jobs.claim('w', max_jobs => 2, lease => '1 minute')")
                   .fetchall())
        ids = dict(conn.execute("select name, id from jobs.jobs").fetchall())
        assert conn.execute("select jobs.fail(%s, %s, 'boom')", (ids["fails"], old["fails"])).fetchone()[0] == "dead"

        conn.execute("set pg_jobs.clock_offset = '2min'")  # the lease lapses
        new = conn.execute("select claim from jobs.claim('w2')").fetchone()[0]
        assert new > old["lapses"]
        assert conn.execute("select jobs.complete(%s, %s)", (ids["lapses"], old["lapses"])).fetchone()[0] is False
        landed = conn.execute("select landed from jobs.complete_many(%s, %s)",
                              ([ids["lapses"]], [old["lapses"]])).fetchone()[0]
        assert landed is False
        states = dict(conn.execute("select name, state::text from jobs.jobs").fetchall())
        assert states == {"lapses": "running", "fails": "dead"}  # dead letters follow dead_retention

        assert conn.execute("select jobs.complete(%s, %s)", (ids["lapses"], new)).fetchone()[0] is True
        assert conn.execute("select name from jobs.jobs").fetchall() == [("fails",)]


def test_a_runs_steps_stay_until_its_last_job_completes(db):
    with connect(db) as conn:
        run = conn.execute("select (jobs.enqueue('first')).id").fetchone()[0]
        job_id, claim = conn.execute("select id, claim from jobs.claim('w')").fetchone()
        conn.execute("select jobs.save_step(%s, %s, 'charged', '\"ok\"')", (job_id, claim))
        conn.execute("select jobs.enqueue('second', run_id => %s)", (run,))
        assert conn.execute("select jobs.complete(%s, %s)", (job_id, claim)).fetchone()[0] is True
        assert counts(conn) == (1, 1)  # the second job of the run will want the step

        second_id, second_claim = conn.execute("select id, claim from jobs.claim('w')").fetchone()
        assert conn.execute("select output from jobs.get_step(%s, 'charged')", (run,)).fetchone()[0] == "ok"
        assert conn.execute("select jobs.complete(%s, %s)", (second_id, second_claim)).fetchone()[0] is True
        assert counts(conn) == (0, 0)


def test_the_last_two_jobs_of_a_run_completing_at_once_leave_no_steps(db):
    """Each of two transactions deletes one of a run's last two jobs. Without the lock on the
    run's steps, each still sees the other's job and leaves the steps behind forever."""
    with connect(db) as conn:
        run = conn.execute("select (jobs.enqueue('a')).id").fetchone()[0]
        conn.execute("select jobs.enqueue('b', run_id => %s)", (run,))
        held = dict(conn.execute("select name, (id, claim) from jobs.claim('w', max_jobs => 2)").fetchall())
        job_a, claim_a = held["a"]
        conn.execute("select jobs.save_step(%s, %s, 'step', '1')", (job_a, claim_a))

    first, second, watcher = connect(db), connect(db), connect(db)
    try:
        first.execute("begin")
        assert first.execute("select jobs.complete(%s, %s)", held["a"]).fetchone()[0] is True
        pid = second.execute("select pg_backend_pid()").fetchone()[0]
        result = {}

        def complete_b():
            with second.transaction():
                result["b"] = second.execute("select jobs.complete(%s, %s)", held["b"]).fetchone()[0]

        thread = threading.Thread(target=complete_b)
        thread.start()
        assert blocked_or_done(watcher, pid, thread) == "blocked"
        first.execute("commit")
        thread.join(DEADLINE)
        assert not thread.is_alive() and result["b"] is True
        assert counts(watcher) == (0, 0)
    finally:
        for conn in (first, second, watcher):
            conn.close()


def test_a_completion_that_waits_on_a_cancel_deletes_nothing(db):
    with connect(db) as conn:
        conn.execute("select jobs.enqueue('cancelled')")
        job_id, claim = conn.execute("select id, claim from jobs.claim('w')").fetchone()

    operator, worker, watcher = connect(db), connect(db), connect(db)
    try:
        operator.execute("begin")
        assert operator.execute("select jobs.cancel(%s)", (job_id,)).fetchone()[0] is True
        pid = worker.execute("select pg_backend_pid()").fetchone()[0]
        result = {}

        def complete():
            result["landed"] = worker.execute("select landed from jobs.complete_many(%s, %s)",
                                              ([job_id], [claim])).fetchone()[0]

        thread = threading.Thread(target=complete)
        thread.start()
        assert blocked_or_done(watcher, pid, thread) == "blocked"  # on the cancel's row lock
        operator.execute("commit")
        thread.join(DEADLINE)
        assert not thread.is_alive() and result["landed"] is False
        assert watcher.execute("select state::text from jobs.jobs").fetchall() == [("cancelled",)]
    finally:
        for conn in (operator, worker, watcher):
            conn.close()


def test_a_completion_that_keeps_no_history_deletes_the_jobs_attempts(db):
    """The rows of jobs.attempts go with their job when completing deletes it, by complete and
    by complete_many. Checked by taking the attempts' delete out of jobs.complete: one row
    stays behind."""
    with connect(db) as conn:
        conn.execute("select jobs.enqueue_batch('[{\"name\": \"a\"}, {\"name\": \"b\"}, {\"name\": \"c\"}]')")
        for job_id, claim in conn.execute("select id, claim from jobs.claim('w', max_jobs => 3)").fetchall():
            assert conn.execute("select jobs.fail(%s, %s, 'once', retry_at => now())", (job_id, claim)).fetchone()[0] == "retried"
        assert conn.execute("select count(*) from jobs.attempts").fetchone()[0] == 3
        held = conn.execute("select id, claim from jobs.claim('w', max_jobs => 3) order by name").fetchall()
        assert conn.execute("select jobs.complete(%s, %s)", held[0]).fetchone()[0] is True
        assert conn.execute("select count(*) from jobs.complete_many(%s, %s) where landed",
                            ([h[0] for h in held[1:]], [h[1] for h in held[1:]])).fetchone()[0] == 2
        assert counts(conn)[0] == 0
        assert conn.execute("select count(*) from jobs.attempts").fetchone()[0] == 0
