"""The background worker, against a cluster with shared_preload_libraries = 'pg_jobs'.

The cluster's worker sweeps only the database `postgres` (pg_jobs.database_name, set in
tests/cluster.conf), so these tests use that database; tests/server/test_launcher.py has the launcher
and many databases. Every wait polls with a deadline; none sleeps a fixed time to hope.
"""

import time

import psycopg
import pytest

import polling
from polling import one

DEADLINE = 20  # seconds; the sweep interval is set to 100 ms, restarts take 2 s


def eventually(dsn, sql, wanted, timeout=DEADLINE):
    polling.eventually(dsn, sql, wanted, timeout)

def worker_pid(dsn):
    return one(dsn, "select pid from pg_stat_activity where backend_type = 'pg_jobs sweeper'")


def wait_for_passes(dsn, count):
    """Waits until the worker has started `count` more passes (its query_start moves). The
    worker may be restarting, absent from pg_stat_activity for up to 2 s (a test terminated
    it); its first pass after that counts as one."""
    sql = "select query_start from pg_stat_activity where backend_type = 'pg_jobs sweeper'"
    seen, last = 0, one(dsn, sql)
    deadline = time.monotonic() + DEADLINE
    while seen < count:
        assert time.monotonic() < deadline, "the worker stopped sweeping"
        time.sleep(0.02)
        now = one(dsn, sql)
        if now is not None and now != last:
            seen += 1
        last = now


@pytest.fixture
def swept(server_dsn):
    """The swept database with pg_jobs created and a 100 ms sweep interval; reset afterwards."""
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute("create extension pg_jobs")
        conn.execute("alter system set pg_jobs.sweep_interval = '100ms'")
        conn.execute("select pg_reload_conf()")
    yield server_dsn
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute("drop extension pg_jobs")
        for setting in ("sweep_interval", "vacuum_interval", "completed_retention", "dead_retention"):
            conn.execute(f"alter system reset pg_jobs.{setting}")
        conn.execute("select pg_reload_conf()")


def abandon_final_attempt(dsn):
    """Claims a one-attempt job under a short lease, then disconnects: no client is left."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select jobs.enqueue('abandoned', max_attempts => 1)")
        assert conn.execute("select count(*) from jobs.claim('gone', lease => '200 ms')").fetchone()[0] == 1


def test_the_worker_is_visible_in_pg_stat_activity(swept):
    eventually(swept, "select count(*) from pg_stat_activity where backend_type = 'pg_jobs sweeper'", 1)
    eventually(
        swept,
        "select query from pg_stat_activity where backend_type = 'pg_jobs sweeper'",
        "select * from jobs.sweep()",
    )


def test_a_final_attempt_lapse_becomes_dead_with_no_client_alive(swept):
    abandon_final_attempt(swept)
    eventually(swept, "select state::text from jobs.jobs", "dead")
    assert "final attempt" in one(swept, "select last_error from jobs.jobs")


def test_an_expired_event_disappears(swept):
    one(swept, "select jobs.publish('flash', ttl => '200 ms')")
    one(swept, "select jobs.publish('stays', ttl => '1 day')")
    eventually(swept, "select string_agg(name, ',') from jobs.events", "stays")


def test_retention_applies_after_alter_system_and_a_reload(swept):
    with psycopg.connect(swept, autocommit=True) as conn:
        conn.execute("select jobs.enqueue('done')")
        job_id, claim = conn.execute("select id, claim from jobs.claim('w')").fetchone()
        assert conn.execute("select jobs.complete(%s, %s)", (job_id, claim)).fetchone()[0]
    wait_for_passes(swept, 3)
    assert one(swept, "select count(*) from jobs.jobs") == 1  # kept: 7 days by default
    with psycopg.connect(swept, autocommit=True) as conn:
        conn.execute("alter system set pg_jobs.completed_retention = '1s'")
        conn.execute("select pg_reload_conf()")
    eventually(swept, "select count(*) from jobs.jobs", 0)


def test_a_killed_worker_comes_back_and_sweeps(swept):
    eventually(swept, "select count(*) from pg_stat_activity where backend_type = 'pg_jobs sweeper'", 1)
    before = worker_pid(swept)
    assert one(swept, "select pg_terminate_backend(%s)", (before,))
    eventually(
        swept,
        f"select count(*) from pg_stat_activity where backend_type = 'pg_jobs sweeper' and pid <> {before}",
        1,
    )
    abandon_final_attempt(swept)
    eventually(swept, "select state::text from jobs.jobs", "dead")


def test_the_worker_enqueues_a_due_schedule_slot_once(swept):
    """With no client calling jobs.run_schedules, the background worker enqueues a schedule's
    due slot, once however many passes follow. Checked by taking the schedules task out of
    jobs.sweep: the job never appears."""
    with psycopg.connect(swept, autocommit=True) as conn:
        conn.execute("""select jobs.schedule('yearly', '0 0 1 1 *', '{"name": "new_year"}')""")
        # The slot of this new year, as if no pass had run since it came.
        conn.execute("update jobs.schedules set next_slot = date_trunc('year', now(), 'UTC')")
    eventually(swept, "select count(*) from jobs.jobs where name = 'new_year'", 1)
    wait_for_passes(swept, 3)
    assert one(swept, "select count(*) from jobs.jobs") == 1
    assert one(swept, "select next_slot > now() from jobs.schedules") is True
    assert one(swept, "select last_slot = date_trunc('year', now(), 'UTC') from jobs.schedules") is True


SWEEPERS = "select count(*) from pg_stat_activity where backend_type = 'pg_jobs sweeper'"


def test_the_worker_copes_with_the_extension_dropped_and_created_again(swept):
    """Dropped, the sweeper of the database leaves; created again, the launcher starts one at
    the commit of CREATE EXTENSION."""
    wait_for_passes(swept, 2)
    with psycopg.connect(swept, autocommit=True) as conn:
        conn.execute("drop extension pg_jobs")
    eventually(swept, SWEEPERS, 0)
    with psycopg.connect(swept, autocommit=True) as conn:
        conn.execute("create extension pg_jobs")
    abandon_final_attempt(swept)
    eventually(swept, "select state::text from jobs.jobs", "dead")


def test_a_drop_extension_held_open_neither_blocks_nor_kills_the_worker(swept):
    """A DROP EXTENSION is held open while the worker comes round. The worker must not run
    into the tables being dropped: unguarded, its sweep waited on their locks and, once the drop
    committed, failed (relation "jobs.jobs" does not exist), and the worker exited and was
    restarted 2 s later. Guarded, it cannot take its share lock on the extension, skips the pass
    and says why, is the same process throughout, and leaves once the drop commits."""
    activity = "select query from pg_stat_activity where backend_type = 'pg_jobs sweeper'"
    eventually(swept, activity, "select * from jobs.sweep()")
    before = worker_pid(swept)
    with psycopg.connect(swept) as conn:  # one transaction, committed below
        conn.execute("drop extension pg_jobs")
        held_off = (
            "select query = 'waiting for a DROP EXTENSION pg_jobs to end' or wait_event_type = 'Lock' "
            "from pg_stat_activity where backend_type = 'pg_jobs sweeper'"
        )
        eventually(swept, held_off, True)
        wait_for_passes(swept, 2)  # it comes round again, still held off
        assert worker_pid(swept) == before, "the worker failed and was restarted"
        conn.commit()
    eventually(swept, SWEEPERS, 0)
    with psycopg.connect(swept, autocommit=True) as conn:
        conn.execute("create extension pg_jobs")  # for the next pass, and the fixture's drop
    abandon_final_attempt(swept)
    eventually(swept, "select state::text from jobs.jobs", "dead")


def test_the_rows_the_worker_deletes_count_toward_autovacuum(swept):
    """The worker reports its table statistics: the completed jobs it deletes show in
    n_tup_del and n_dead_tup, which is what wakes autovacuum for them."""
    with psycopg.connect(swept, autocommit=True) as conn:
        conn.execute(
            """insert into jobs.jobs (id, run_id, name, queue, state, priority, run_at, max_attempts,
                                      payload, enqueued_at, created_at, updated_at, finished_at)
               select g, g, 'old', 'default', 'completed', 0, now(), 1, '{}', now(), now(), now(),
                      now() - interval '8 days'
               from (select gen_random_uuid() as g from generate_series(1, 300)) as s""")
    eventually(swept, "select count(*) from jobs.jobs", 0)
    eventually(swept, "select n_tup_del >= 300 from pg_stat_user_tables where relid = 'jobs_data.jobs'::regclass", True)


def leave_dead_rows(dsn, n, or_vacuumed=False):
    """n dead row versions in jobs.jobs, reported to the statistics (at disconnect). With
    or_vacuumed, a vacuum that already took them counts too: a worker checking every 100 ms can
    vacuum them before a poll sees them (it did once on PostgreSQL 17, on a loaded machine)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """select count(*) from jobs.enqueue_batch(
                 (select jsonb_agg(jsonb_build_object('name', 'churn')) from generate_series(1, %s)))""",
            (n,),
        )
        conn.execute("delete from jobs.jobs")
    eventually(dsn, f"select n_dead_tup >= {n} or {or_vacuumed} and vacuum_count >= 1 from pg_stat_user_tables "
                    "where relid = 'jobs_data.jobs'::regclass", True)


VACUUMS = "select vacuum_count from pg_stat_user_tables where relid = 'jobs_data.jobs'::regclass"


def test_the_worker_vacuums_the_table_when_autovacuum_would(swept):
    """Autovacuum visits a database once a minute by default; the worker checks jobs.jobs
    every pg_jobs.vacuum_interval against autovacuum's own threshold and vacuums it. Its
    vacuums count as vacuum_count (autovacuum's as autovacuum_count)."""
    with psycopg.connect(swept, autocommit=True) as conn:
        conn.execute("alter system set pg_jobs.vacuum_interval = '100ms'")
        conn.execute("select pg_reload_conf()")
    assert one(swept, VACUUMS) == 0
    leave_dead_rows(swept, 2000, or_vacuumed=True)
    eventually(swept, f"select ({VACUUMS}) >= 1", True)
    assert one(swept, "select n_dead_tup from pg_stat_user_tables where relid = 'jobs_data.jobs'::regclass") < 2000


@pytest.mark.parametrize("turned_off", ["vacuum_interval = 0", "autovacuum_enabled = false"])
def test_the_worker_leaves_vacuum_alone_where_it_is_turned_off(swept, turned_off):
    with psycopg.connect(swept, autocommit=True) as conn:
        if turned_off == "vacuum_interval = 0":
            conn.execute("alter system set pg_jobs.vacuum_interval = 0")
        else:
            conn.execute("alter system set pg_jobs.vacuum_interval = '100ms'")
            conn.execute("alter table jobs_data.jobs set (autovacuum_enabled = false)")
        conn.execute("select pg_reload_conf()")
    leave_dead_rows(swept, 2000)
    wait_for_passes(swept, 10)  # a second or more: ten vacuum intervals
    assert one(swept, VACUUMS) == 0
    assert one(swept, "select jobs._vacuum_due()") is (turned_off == "vacuum_interval = 0")


def test_a_sigterm_ends_a_vacuum_in_progress(swept):
    """A shutdown or pg_terminate_backend during the worker's vacuum ends it there, as it ends
    a backend's command, instead of waiting for the vacuum to finish. The vacuum is slowed to
    minutes here (vacuum_cost_delay, which VACUUM obeys; 10k dead rows): with the worker's
    own SIGTERM handler, which only sets a flag the worker reads between passes, the process
    stayed until the vacuum ended. Autovacuum is held off meanwhile (a long naptime): the
    table's own autovacuum runs at full speed, and once, in a full run on a loaded machine, it
    took the dead rows before the worker did, which then had none to vacuum."""
    with psycopg.connect(swept, autocommit=True) as conn:
        conn.execute("alter system set vacuum_cost_delay = '100ms'")
        conn.execute("alter system set vacuum_cost_limit = 1")
        conn.execute("alter system set autovacuum_naptime = '1h'")
        conn.execute("alter system set pg_jobs.vacuum_interval = '100ms'")
        conn.execute("select pg_reload_conf()")
    try:
        leave_dead_rows(swept, 10000)
        vacuuming = (
            "select pid from pg_stat_activity where backend_type = 'pg_jobs sweeper' "
            "and state = 'active' and query = 'vacuum (skip_locked) jobs_data.jobs'"
        )
        eventually(swept, f"select count(*) from ({vacuuming}) as v", 1)
        pid = one(swept, vacuuming)
        with psycopg.connect(swept, autocommit=True) as conn:
            # Read by the next worker: it must not start the slow vacuum again.
            conn.execute("alter system set pg_jobs.vacuum_interval = 0")
            conn.execute("select pg_reload_conf()")
            assert conn.execute("select pg_terminate_backend(%s)", (pid,)).fetchone()[0]
        eventually(swept, f"select count(*) from pg_stat_activity where pid = {pid}", 0)
    finally:
        with psycopg.connect(swept, autocommit=True) as conn:
            conn.execute("alter system reset vacuum_cost_delay")
            conn.execute("alter system reset vacuum_cost_limit")
            conn.execute("alter system reset autovacuum_naptime")
            conn.execute("select pg_reload_conf()")
    # The postmaster starts a new worker, which sweeps.
    abandon_final_attempt(swept)
    eventually(swept, "select state::text from jobs.jobs where name = 'abandoned'", "dead")


def test_a_sigterm_during_back_to_back_passes_ends_the_worker(swept):
    """A pg_terminate_backend that lands while the worker runs full passes back to back (here
    100,000 lapsed leases, 5,000 a pass) ends it: the launcher starts another. Checked to fail
    without the guard: pgrx's sigterm_received() clears the flag it answers, so the check
    between passes swallowed the signal and the same worker swept on (its pid still there at
    the deadline)."""
    eventually(swept, "select count(*) from pg_stat_activity where backend_type = 'pg_jobs sweeper'", 1)
    with psycopg.connect(swept, autocommit=True) as conn:
        conn.execute("alter system set pg_jobs.sweep_interval = '1h'")  # passes only when full
        conn.execute("select pg_reload_conf()")
        conn.execute(
            """insert into jobs_data.jobs (id, run_id, name, queue, state, attempt, max_attempts, claim,
                                           lease_expires_at, lease_scan_at, payload, enqueued_at,
                                           created_at, updated_at)
               select u, u, 'lapsed', 'default', 'running', 1, 5, 1, now() - interval '1 hour',
                      now() - interval '1 hour', '{}', now(), now(), now()
               from (select gen_random_uuid() as u from generate_series(1, 100000)) as g""")
        conn.execute("alter system set pg_jobs.sweep_interval = '100ms'")
        conn.execute("select pg_reload_conf()")
    # Terminate it once it is in the passes (some leases released, most not).
    deadline = time.monotonic() + DEADLINE
    while one(swept, "select count(*) from jobs_data.jobs where state = 'ready'") == 0:
        assert time.monotonic() < deadline, "the worker never started on the lapsed leases"
        time.sleep(0.01)
    pid = worker_pid(swept)
    assert one(swept, "select pg_terminate_backend(%s)", (pid,))
    eventually(swept, f"select count(*) from pg_stat_activity where pid = {pid}", 0)
