"""Every example worker in examples/, run as a real process against the test cluster.

Each must: work a mixed batch to the end (each job's write landing exactly once, failures
retried and then dead-lettered with their error text); wake on new work rather than at its
poll (in a blocking claim); exit on a SIGTERM
that comes while it claims, not sleep its poll first; and, on SIGTERM while it holds a job,
finish that job (heartbeating past its lease) and exit 0.
"""

import os
import shutil
import signal
import subprocess
import sys
import time

import psycopg
import pytest
from polling import ASLEEP

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKERS = {
    "python": [sys.executable, os.path.join(ROOT, "examples/python/worker.py")],
    "node": ["node", os.path.join(ROOT, "examples/node/worker.js")],
    "rust": [os.path.join(ROOT, "examples/rust/target/release/pg_jobs_worker_example")],
    "go": [os.path.join(ROOT, "examples/go/pg_jobs_worker")],
}
DEADLINE = 30
# The heartbeat connection: the examples' own name, or the Node.js library's.
HEARTBEAT = ("select count(*) from pg_stat_activity"
             " where (application_name = 'pg_jobs heartbeat' or application_name like 'pg-jobs heartbeat %')")


def start(kind, dsn, *extra):
    if kind == "node" and not (shutil.which("node") and os.path.isdir(os.path.join(ROOT, "examples/node/node_modules"))):
        pytest.fail("node or examples/node/node_modules is missing: run scripts/setup.sh")
    if kind in ("rust", "go") and not os.path.exists(WORKERS[kind][0]):
        pytest.fail(f"{WORKERS[kind][0]} is missing: run scripts/build-examples.sh")
    url = "postgresql://postgres@127.0.0.1:{port}/{dbname}".format(
        **dict(part.split("=", 1) for part in dsn.split()))
    # node-postgres takes a URL; lib/pq asks for TLS unless told not to.
    target = {"node": url, "go": dsn + " sslmode=disable"}.get(kind, dsn)
    return subprocess.Popen(WORKERS[kind] + ["--dsn", target, "--quiet", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(dsn, sql, wanted):
    deadline = time.monotonic() + DEADLINE
    while True:
        with psycopg.connect(dsn, autocommit=True) as conn:
            got = conn.execute(sql).fetchone()[0]
        if got == wanted:
            return
        assert time.monotonic() < deadline, f"{sql!r} answered {got!r}, not {wanted!r}"
        time.sleep(0.05)


@pytest.fixture
def example_db(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table example_log (job_id uuid not null, worker text not null, payload jsonb)")
        conn.execute("insert into jobs.job_types (name, max_attempts, backoff_base, jitter) values ('fail', 2, '10 ms', 0)")
    return dsn


@pytest.mark.parametrize("kind", sorted(WORKERS))
def test_the_worker_works_a_mixed_batch_to_the_end(example_db, kind):
    with psycopg.connect(example_db, autocommit=True) as conn:
        conn.execute("""select count(*) from jobs.enqueue_batch(
            (select jsonb_agg(jsonb_build_object('name', 'record', 'payload', jsonb_build_object('n', g)))
             from generate_series(1, 50) g))""")
        conn.execute("""select jobs.enqueue('fail', '{"message": "disk full"}')""")
    worker = start(kind, example_db, "--until-empty", "--poll", "0.1", "--batch", "7")
    out, err = worker.communicate(timeout=DEADLINE)
    assert worker.returncode == 0, err
    with psycopg.connect(example_db) as conn:
        logged = conn.execute("select count(*), count(distinct job_id) from example_log").fetchone()
        states = dict(conn.execute("select name, state::text from jobs.jobs group by 1, 2"))
        error = conn.execute("select last_error from jobs.jobs where name = 'fail'").fetchone()[0]
    assert logged == (50, 50)
    assert states == {"record": "completed", "fail": "dead"}
    assert "disk full" in error


@pytest.mark.parametrize("kind", sorted(WORKERS))
def test_the_worker_wakes_on_new_work_not_its_poll(example_db, kind):
    worker = start(kind, example_db, "--poll", "600")
    try:
        time.sleep(1)  # let it find the queue empty and go to sleep in its claim
        with psycopg.connect(example_db, autocommit=True) as conn:
            conn.execute("select jobs.enqueue('record', '{}')")
        wait_for(example_db, "select count(*) from example_log", 1)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=DEADLINE)


@pytest.mark.parametrize("kind", sorted(WORKERS))
def test_a_sigterm_during_a_waiting_claim_ends_it(example_db, kind):
    """The signal lands while the worker's claim sleeps in the server for work (for up to 600 s):
    the worker cancels it and exits at once, holding nothing."""
    worker = start(kind, example_db, "--poll", "600")
    try:
        # (one claim for the whole batch in the examples; one per slot in the Node.js library)
        wait_for(example_db, "select count(*) > 0 from pg_stat_activity"
                             f" where {ASLEEP} and query like '%jobs.claim(%'", True)
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=DEADLINE)
        assert worker.returncode == 0, err
        wait_for(example_db, "select count(*) from pg_stat_activity where query like '%jobs.claim(%'"
                             " and pid <> pg_backend_pid()", 0)
    finally:
        if worker.poll() is None:
            worker.kill()


@pytest.mark.parametrize("kind", sorted(WORKERS))
def test_sigterm_finishes_the_held_job_and_exits_zero(example_db, kind):
    with psycopg.connect(example_db, autocommit=True) as conn:
        job_id = conn.execute("""select id from jobs.enqueue('sleep', '{"seconds": 2}')""").fetchone()[0]
    worker = start(kind, example_db, "--lease", "1", "--poll", "0.1")
    wait_for(example_db, f"select state::text from jobs.jobs where id = '{job_id}'", "running")
    worker.send_signal(signal.SIGTERM)
    out, err = worker.communicate(timeout=DEADLINE)
    assert worker.returncode == 0, err
    with psycopg.connect(example_db) as conn:
        state, attempt = conn.execute("select state::text, attempt from jobs.jobs where id = %s", (job_id,)).fetchone()
    # The 2 s job outlived its 1 s lease only because the worker heartbeated it.
    assert (state, attempt) == ("completed", 1)


# The lessons of the seeds, for every worker.
FIXED = sorted(WORKERS)


@pytest.mark.parametrize("kind", FIXED)
def test_a_slow_job_does_not_hold_back_the_quick_ones(example_db, kind):
    """A 20 s job claimed first, then 20 quick ones: they all complete while it still runs.
    A worker that runs its claimed batch one job at a time, and claims again only after the
    whole batch, finished none of them until the slow one ended."""
    with psycopg.connect(example_db, autocommit=True) as conn:
        slow = conn.execute("""select id from jobs.enqueue('sleep', '{"seconds": 20}', priority => 9)""").fetchone()[0]
        conn.execute("""select count(*) from jobs.enqueue_batch(
            (select jsonb_agg(jsonb_build_object('name', 'record')) from generate_series(1, 20)))""")
    worker = start(kind, example_db, "--batch", "5", "--poll", "0.1")
    try:
        wait_for(example_db, "select count(*) from example_log", 20)
        with psycopg.connect(example_db) as conn:
            assert conn.execute("select state::text from jobs.jobs where id = %s", (slow,)).fetchone()[0] == "running"
    finally:
        worker.kill()
        worker.wait(timeout=DEADLINE)


@pytest.mark.parametrize("kind", FIXED)
def test_an_unknown_job_name_is_snoozed_without_using_an_attempt(example_db, kind):
    """A job whose name this worker has no handler for (producers deployed first) is parked
    for later, not failed: its attempts are kept. Failing it burned one per claim."""
    with psycopg.connect(example_db, autocommit=True) as conn:
        job_id = conn.execute("select id from jobs.enqueue('shipped_tomorrow')").fetchone()[0]
    worker = start(kind, example_db, "--poll", "0.1")
    try:
        wait_for(example_db, f"select state::text from jobs.jobs where id = '{job_id}'", "suspended")
        with psycopg.connect(example_db) as conn:
            attempt, error = conn.execute("select attempt, last_error from jobs.jobs where id = %s", (job_id,)).fetchone()
        assert (attempt, error) == (0, None)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=DEADLINE)


@pytest.mark.parametrize("kind", FIXED)
def test_a_killed_heartbeat_connection_is_made_again(example_db, kind):
    """The heartbeat connection is terminated while a 5 s job runs under a 2 s lease. The
    worker makes it again and beats again at once, keeping the lease: the job completes on its
    first attempt. A heartbeat thread that died on the error let the lease lapse, and the job
    ran twice. (With a 1 s lease and the beat tried again only at the next tick, a loaded
    machine now and then let the lease lapse while the connection was made again.)"""
    with psycopg.connect(example_db, autocommit=True) as conn:
        job_id = conn.execute("""select id from jobs.enqueue('sleep', '{"seconds": 5}')""").fetchone()[0]
    worker = start(kind, example_db, "--lease", "2", "--poll", "0.1")
    try:
        wait_for(example_db, f"select state::text from jobs.jobs where id = '{job_id}'", "running")
        wait_for(example_db, HEARTBEAT, 1)
        with psycopg.connect(example_db, autocommit=True) as conn:
            conn.execute("select pg_terminate_backend(pid) from pg_stat_activity"
                         " where (application_name = 'pg_jobs heartbeat' or application_name like 'pg-jobs heartbeat %')")
        wait_for(example_db, f"select state::text from jobs.jobs where id = '{job_id}'", "completed")
        with psycopg.connect(example_db) as conn:
            assert conn.execute("select attempt from jobs.jobs where id = %s", (job_id,)).fetchone()[0] == 1
            assert conn.execute("select count(*) from example_log").fetchone()[0] == 1
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=DEADLINE)


@pytest.mark.parametrize("kind", FIXED)
def test_a_cancelled_jobs_handler_is_stopped(example_db, kind):
    """A 60 s job is cancelled while it runs: the next heartbeat answers NULL, the worker
    stops the handler, and a SIGTERM then exits at once (the worker finishes what it holds,
    and holds nothing). A worker that ignored the NULL ran the handler to its end, and the
    SIGTERM waited for it."""
    with psycopg.connect(example_db, autocommit=True) as conn:
        job_id = conn.execute("""select id from jobs.enqueue('sleep', '{"seconds": 60}')""").fetchone()[0]
    worker = start(kind, example_db, "--lease", "1", "--poll", "0.1")
    try:
        wait_for(example_db, f"select state::text from jobs.jobs where id = '{job_id}'", "running")
        with psycopg.connect(example_db, autocommit=True) as conn:
            assert conn.execute("select jobs.cancel(%s)", (job_id,)).fetchone()[0]
        time.sleep(1)  # three heartbeat intervals
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=DEADLINE)
        assert worker.returncode == 0, err
        with psycopg.connect(example_db) as conn:
            assert conn.execute("select count(*) from example_log").fetchone()[0] == 0
    finally:
        if worker.poll() is None:
            worker.kill()


@pytest.mark.parametrize("kind", FIXED)
def test_a_cancelled_jobs_handler_stops_at_the_signal_not_the_next_heartbeat(example_db, kind):
    """Under a 60 s lease the next heartbeat is 20 s away; a 60 s job is cancelled while it
    runs, and its worker, told on pg_jobs_cancel, beats it at once, gets NULL and stops the
    handler: a SIGTERM a second later exits at once (the worker holds nothing). Checked to
    fail without its guard: with the LISTEN taken out of the workers, the SIGTERM waited for
    the handler (the 10 s bound below passed)."""
    with psycopg.connect(example_db, autocommit=True) as conn:
        job_id = conn.execute("""select id from jobs.enqueue('sleep', '{"seconds": 60}')""").fetchone()[0]
    worker = start(kind, example_db, "--lease", "60", "--poll", "0.1")
    try:
        wait_for(example_db, f"select state::text from jobs.jobs where id = '{job_id}'", "running")
        time.sleep(0.5)  # its LISTEN connection, made at its start, is listening
        with psycopg.connect(example_db, autocommit=True) as conn:
            assert conn.execute("select jobs.cancel(%s)", (job_id,)).fetchone()[0]
        time.sleep(1)
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=10)
        assert worker.returncode == 0, err
        with psycopg.connect(example_db) as conn:
            assert conn.execute("select count(*) from example_log").fetchone()[0] == 0
    finally:
        if worker.poll() is None:
            worker.kill()


@pytest.mark.parametrize("kind", FIXED)
def test_a_handler_is_stopped_at_its_attempts_deadline(example_db, kind):
    """A 60 s job whose type times out after 2 s, under a 60 s lease (the next heartbeat 20 s
    away): the worker stops the handler at the deadline the claim answered, so a SIGTERM at
    3 s exits at once, and nothing of the job lands. Checked to fail without its guard: with
    the deadline ignored, the handler ran until the heartbeat at 20 s answered NULL, past the
    10 s bound below."""
    with psycopg.connect(example_db, autocommit=True) as conn:
        conn.execute("insert into jobs.job_types (name, timeout) values ('sleep', '2 seconds')")
        job_id = conn.execute("""select id from jobs.enqueue('sleep', '{"seconds": 60}')""").fetchone()[0]
    worker = start(kind, example_db, "--lease", "60", "--poll", "0.1")
    try:
        wait_for(example_db, f"select state::text from jobs.jobs where id = '{job_id}'", "running")
        time.sleep(3)
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=10)
        assert worker.returncode == 0, err
        with psycopg.connect(example_db) as conn:
            assert conn.execute("select count(*) from example_log").fetchone()[0] == 0
    finally:
        if worker.poll() is None:
            worker.kill()
