"""Hostile roles against the preloaded server (docs/SECURITY.md): code planted where the
background worker (a superuser) might resolve a name, the clock offset, lock stalls, and a
sweep that must not wait on a client's open transaction.

How each was checked to fail without its guard is said in its docstring.
"""

import threading
import time
import uuid

import psycopg
import pytest

from test_sweeper import eventually, one, swept, wait_for_passes  # noqa: F401 (swept: fixture)

# Operators and functions for the type pairs pg_jobs's statements compare, where pg_catalog
# has no operator of exactly those types (an enum, regclass against oid, a function that
# pg_catalog only has as VARIADIC "any"): a planted one would be an exact match and win.
PLANTS = [
    ("operator", "=", "oid", "regclass"),
    ("operator", "=", "regclass", "oid"),
    ("operator", "=", "jobs.job_state", "jobs.job_state"),
    ("operator", "<>", "jobs.job_state", "jobs.job_state"),
    ("function", "format", "text", "integer", "integer"),
]


def plant(conn, schema):
    """As mallory: in `schema`, operators and functions that, run by a superuser, record the
    backend they ran in and make mallory a superuser."""
    conn.execute(
        f"""
        create function {schema}.pwn() returns void language plpgsql as $$
        begin
          if (select rolsuper from pg_catalog.pg_roles where rolname = current_user) then
            insert into public.pwned
            select current_user, backend_type from pg_catalog.pg_stat_activity
            where pid = pg_catalog.pg_backend_pid();
            execute 'alter role mallory superuser';
          end if;
        end $$"""
    )
    for n, (kind, name, *types) in enumerate(PLANTS):
        args = ", ".join(f"a{i} {t}" for i, t in enumerate(types))
        if kind == "operator":
            left, right = types
            conn.execute(
                f"create function {schema}.op{n}({args}) returns boolean language plpgsql as $$ "
                f"begin perform {schema}.pwn(); return a0::text {name} a1::text; end $$"
            )
            conn.execute(
                f"create operator {schema}.{name} (leftarg = {left}, rightarg = {right}, "
                f"function = {schema}.op{n})"
            )
        else:
            conn.execute(
                f"create function {schema}.{name}({args}) returns text language plpgsql as $$ "
                f"begin perform {schema}.pwn(); return ''; end $$"
            )


@pytest.fixture
def mallory(swept):
    """A worker role that may create objects in public and owns a schema named after the
    background worker's user (postgres), with operators and functions planted in both."""
    with psycopg.connect(swept, autocommit=True) as conn:
        conn.execute("create role mallory login")
        conn.execute("select jobs.grant_worker('mallory')")
        # pg_jobs grants no USAGE on its types; an admin might, and then these plants are made.
        conn.execute("grant usage on type jobs.job_state to mallory")
        conn.execute("grant create on schema public to mallory")
        conn.execute("create schema postgres authorization mallory")
        conn.execute("create table public.pwned (who text, backend text)")
        conn.execute("grant insert on public.pwned to public")
    with psycopg.connect(swept + " user=mallory", autocommit=True) as conn:
        plant(conn, "public")
        plant(conn, "postgres")
    yield swept
    with psycopg.connect(swept, autocommit=True) as conn:
        conn.execute("drop schema postgres cascade")
        conn.execute("drop owned by mallory cascade")
        conn.execute("drop table public.pwned")
        conn.execute("drop role mallory")
        conn.execute("alter system reset pg_jobs.vacuum_interval")
        conn.execute("select pg_reload_conf()")


def test_code_planted_by_a_role_never_runs_as_the_background_worker(mallory):
    """Operators and functions planted in public and in a schema named after the worker's user,
    for the type pairs pg_jobs compares, while the worker sweeps a lapsed lease, an expired
    event and retention and checks for a vacuum many times over. Checked to fail without the
    guards: with 0.1.1's worker (no pinned search_path, jobs._vacuum_due unpinned) mallory
    was a superuser after the first vacuum check."""
    with psycopg.connect(mallory, autocommit=True) as conn:
        conn.execute("alter system set pg_jobs.vacuum_interval = '100ms'")
        conn.execute("alter system set pg_jobs.completed_retention = '1s'")
        conn.execute("select pg_reload_conf()")
        # 'done' first: claimed after the 100 ms lease below had lapsed, a claim of one job
        # would bury 'abandoned' in its only slot and answer no row (a fresh run at fcdec36).
        conn.execute("select jobs.enqueue('done')")
        job_id, claim = conn.execute("select id, claim from jobs.claim('w', array['default'])").fetchone()
        conn.execute("select jobs.complete(%s, %s)", (job_id, claim))
        conn.execute("select jobs.enqueue('abandoned', max_attempts => 1)")
        conn.execute("select count(*) from jobs.claim('gone', lease => '100 ms')")
        conn.execute("select jobs.publish('flash', ttl => '100 ms')")
    eventually(mallory, "select count(*) from jobs.jobs where name = 'done'", 0)
    eventually(mallory, "select state::text from jobs.jobs where name = 'abandoned'", "dead")
    eventually(mallory, "select count(*) from jobs.events", 0)
    wait_for_passes(mallory, 20)
    assert one(mallory, "select count(*) from public.pwned where backend = 'pg_jobs sweeper'") == 0
    assert one(mallory, "select rolsuper from pg_roles where rolname = 'mallory'") is False


@pytest.mark.library(reason="the library's settings (sql-only/tests holds the edition's)")
def test_a_role_cannot_set_the_clock_offset(dsn):
    """With the library preloaded, pg_jobs.clock_offset is a superuser-only setting: SET,
    set_config and ALTER ROLE ... SET are refused for another role, and the leases it claims
    are not moved. (Without preload: pg_test/sql/security.sql.)"""
    swept = dsn
    with psycopg.connect(swept, autocommit=True) as conn:
        conn.execute("create role clockwork login")
        conn.execute("select jobs.grant_worker('clockwork')")
    try:
        with psycopg.connect(swept + " user=clockwork", autocommit=True) as conn:
            for attempt in (
                "set pg_jobs.clock_offset = '1d'",
                "select set_config('pg_jobs.clock_offset', '86400', false)",
                "alter role clockwork set pg_jobs.clock_offset = '1d'",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(attempt)
            conn.execute("select jobs.enqueue('timed')")
            lease_left = conn.execute(
                "select extract(epoch from lease_expires_at - clock_timestamp()) "
                "from jobs.claim('w', lease => '1 minute')"
            ).fetchone()[0]
            assert 0 < lease_left <= 60
    finally:
        with psycopg.connect(swept, autocommit=True) as conn:
            conn.execute("drop owned by clockwork cascade")
            conn.execute("drop role clockwork")


def test_an_idle_transaction_holding_a_settles_locks_never_stops_the_sweep(dsn):
    """A worker completes a job (its settle locks the job row and, taking its share of
    retention, the steps of the runs it prunes), then idles in its transaction. The sweep
    (jobs.sweep, under a statement_timeout) still finishes, releases a lapsed lease elsewhere
    and deletes the rest of the history. Checked to fail without the guard: with jobs._prune
    locking steps without SKIP LOCKED (0.1.1), the sweep waited on the idle client until the
    statement timeout."""
    swept = dsn  # a database of its own: the background worker sweeps another one
    with psycopg.connect(swept, autocommit=True) as conn:
        # A run with steps and two finished jobs past retention, and one lapsed lease.
        run = conn.execute("select (jobs.enqueue('stepper')).run_id").fetchone()[0]
        job, claim = conn.execute("select id, claim from jobs.claim('w', array['default'])").fetchone()
        conn.execute("select jobs.save_step(%s, %s, 'one', '1')", (job, claim))
        conn.execute("select jobs.complete(%s, %s)", (job, claim))
        conn.execute("select jobs.enqueue('stepper', run_id => %s)", (run,))
        job2, claim2 = conn.execute("select id, claim from jobs.claim('w', array['default'])").fetchone()
        conn.execute("select jobs.complete(%s, %s)", (job2, claim2))
        conn.execute(
            "update jobs.jobs set finished_at = now() - interval '31 days' "
            "- case when id = %s then interval '1 day' else interval '0' end",
            (job,),
        )
        for n in range(50):
            conn.execute("select jobs.enqueue('old', idempotency_key => %s)", (str(n),))
        conn.execute("select count(*) from jobs.claim('w', array['default'], 50)")
        conn.execute(
            "update jobs.jobs set state = 'completed', finished_at = now() - interval '30 days', "
            "lease_expires_at = null where name = 'old'"
        )
        conn.execute("select jobs.enqueue('lapsing')")
        conn.execute("select count(*) from jobs.claim('w', array['default'], lease => '100 ms')")
        conn.execute("select jobs.enqueue('held')")
        held, held_claim = conn.execute("select id, claim from jobs.claim('w', array['default'])").fetchone()
    idle = psycopg.connect(swept)
    try:
        # The settle's share of retention, forced (it is drawn one call in 8): the same
        # function, in the same transaction as a complete that the client leaves open. It
        # deletes the oldest completed job, the run's first, and locks the run's steps.
        # setseed: the complete's own one-in-8 share of retention is not drawn (its first
        # random() is 0.87), so what is deleted here is exactly the _prune below.
        idle.execute("select setseed(0)")
        idle.execute("select jobs.complete(%s, %s)", (held, held_claim))
        pruned = idle.execute(
            "select jobs_deleted from jobs._prune('{completed}', jobs.clock() - interval '1 day', 1)"
        ).fetchone()[0]
        assert pruned == 1
        time.sleep(0.2)  # the lease of 'lapsing' lapses
        with psycopg.connect(swept, autocommit=True) as conn:
            conn.execute("set statement_timeout = '5s'")
            done = dict(conn.execute("select task, affected from jobs.sweep()").fetchall())
            assert done["lapsed_leases"] == 1
            assert done["completed_deleted"] == 50  # every other one past retention
            assert one(swept, "select state::text from jobs.jobs where name = 'lapsing'") == "ready"
    finally:
        idle.rollback()
        idle.close()


def test_an_open_transaction_on_a_new_queue_holds_up_no_other_enqueue(dsn):
    """A producer enqueues to a queue never used before and leaves its transaction open; its
    registration of the queue name is uncommitted. Another producer's enqueue to that queue
    returns at once (it gives up waiting for the registration after lock_timeout), and the
    queue is registered once the first commits. Checked to fail without the guard: with
    0.1.1's unbounded insert into jobs.queues, the second enqueue waited until the statement
    timeout."""
    first = psycopg.connect(dsn)
    try:
        first.execute("select jobs.enqueue('a', queue => 'brand_new')")
        with psycopg.connect(dsn, autocommit=True) as second:
            second.execute("set statement_timeout = '5s'")
            second.execute("select jobs.enqueue('b', queue => 'brand_new')")
            assert second.execute("select count(*) from jobs.jobs where queue = 'brand_new'").fetchone()[0] == 1
        first.commit()
        assert one(dsn, "select count(*) from jobs.queues where queue = 'brand_new'") == 1
        assert one(dsn, "select count(*) from jobs.jobs where queue = 'brand_new'") == 2
    finally:
        first.close()


@pytest.mark.library(reason="the library's settings (sql-only/tests holds the edition's)")
def test_a_role_bound_to_a_tenant_cannot_unbind_itself(dsn):
    """With the library preloaded, pg_jobs.tenants is a superuser-only setting: a bound role
    cannot SET, RESET or ALTER ROLE it away (RESET ALL leaves it), and stays bound. (Without preload, and what a
    bound role may do: pg_test/sql/security.sql part 6.)"""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create role bound_worker login")
        conn.execute("select jobs.grant_worker('bound_worker', tenant => 'acme')")
        conn.execute("select jobs.enqueue('theirs', tenant_id => 'globex')")
    try:
        with psycopg.connect(dsn + " user=bound_worker", autocommit=True) as conn:
            db = conn.execute("select current_database()").fetchone()[0]
            for attempt in (
                "set pg_jobs.tenants = ''",
                "reset pg_jobs.tenants",
                f"alter role bound_worker in database {db} reset pg_jobs.tenants",
                f"alter role bound_worker in database {db} set pg_jobs.tenants = '[\"globex\"]'",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(attempt)
            conn.execute(f"alter role bound_worker in database {db} reset all")  # keeps it
        with psycopg.connect(dsn + " user=bound_worker", autocommit=True) as conn:
            assert conn.execute("select count(*) from jobs.claim('w')").fetchone()[0] == 0
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("drop owned by bound_worker cascade")
            conn.execute("drop role bound_worker")


def test_a_database_owner_cannot_have_pg_jobs_installed_into_a_schema_of_its_own(server_dsn):
    """A database owner (any role with CREATE on the database) makes a schema jobs before a DBA
    runs CREATE EXTENSION: the install refuses (42501) and creates nothing, as it does for a
    superuser's schema in which other roles may create. A superuser's own schema is used.
    Checked to fail without the guard: at 551070c the extension installed into the owner's
    schema, and the owner could rename jobs.sweep and plant its own for the sweeper to run."""
    name = "t_owner_" + uuid.uuid4().hex[:8]
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute("create role schema_squatter login")
        admin.execute(f"create database {name} owner schema_squatter")
    db = f"{server_dsn} dbname={name}"
    try:
        with psycopg.connect(db + " user=schema_squatter", autocommit=True) as conn:
            conn.execute("create schema jobs")
        with psycopg.connect(db, autocommit=True) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
                conn.execute("create extension pg_jobs")
            assert "belongs to schema_squatter" in str(refused.value)
            assert conn.execute("select count(*) from pg_extension where extname = 'pg_jobs'").fetchone()[0] == 0
            assert conn.execute("select count(*) from pg_namespace where nspname = 'jobs_data'").fetchone()[0] == 0
            conn.execute("drop schema jobs")
            conn.execute("create schema jobs")
            conn.execute("grant create on schema jobs to public")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("create extension pg_jobs")
            conn.execute("revoke create on schema jobs from public")
            conn.execute("create extension pg_jobs")
            assert conn.execute("select jobs.enqueue('fine') is not null").fetchone()[0]
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f"drop database {name} with (force)")
            admin.execute("drop role schema_squatter")


def test_a_worker_role_gets_lease_lost_from_complete_and_claim(dsn):
    """A worker role (not a superuser) that completes a claim it no longer holds through
    jobs.complete_and_claim is told lease_lost (PJ001), as the other settles tell it. Checked
    to fail without the guard: at 551070c the call raised 42501, permission denied for
    function _raise (complete_and_claim was not SECURITY DEFINER)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create role plain_worker login")
        conn.execute("select jobs.grant_worker('plain_worker')")
        conn.execute("select jobs.enqueue('once')")
    try:
        with psycopg.connect(dsn + " user=plain_worker", autocommit=True) as conn:
            job_id, claim = conn.execute("select id, claim from jobs.claim('w')").fetchone()
            assert conn.execute("select jobs.complete(%s, %s)", (job_id, claim)).fetchone()[0]
            with pytest.raises(psycopg.Error) as refused:
                conn.execute("select * from jobs.complete_and_claim(array[%s]::uuid[], array[%s]::bigint[], 'w')",
                             (job_id, claim))
            assert refused.value.sqlstate == "PJ001", refused.value
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("drop owned by plain_worker cascade")
            conn.execute("drop role plain_worker")


def test_a_producer_holding_a_slots_key_does_not_stall_the_schedules(dsn):
    """A producer's open transaction holding a due slot's idempotency key (its own enqueue of
    the schedule's job with that key, uncommitted) does not stall jobs.run_schedules (the
    sweeper's pass): it waits at most 100 ms, warns, leaves the slot due and enqueues nothing;
    once the producer commits, the next pass is handed the producer's job for the slot.
    Checked to fail without the guard: without the lock_timeout the pass waited for the
    producer's commit and the thread below was still running at its bound."""
    key_sql = ("select format('pg_jobs.schedule:yearly@%s', to_char(date_trunc('year', now(), 'UTC')"
               " at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'))")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select jobs.schedule('yearly', '0 0 1 1 *', jsonb_build_object('name', 'new_year'))")
        conn.execute("update jobs_data.schedules set next_slot = date_trunc('year', now(), 'UTC')")
        key = conn.execute(key_sql).fetchone()[0]
    with psycopg.connect(dsn) as producer:
        producer.execute("select jobs.enqueue('new_year', '{\"by\": \"producer\"}', idempotency_key => %s)", (key,))
        result = {}

        def run():
            with psycopg.connect(dsn, autocommit=True) as conn:
                result["enqueued"] = conn.execute("select count(*) from jobs.run_schedules()").fetchone()[0]
                result["due"] = conn.execute("select next_slot <= now() from jobs.schedules").fetchone()[0]

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(30)
        assert not thread.is_alive(), "the schedules' pass waited for the producer's transaction"
        assert result == {"enqueued": 0, "due": True}
        producer.commit()
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("select count(*), bool_and(j.payload->>'by' = 'producer')"
                            " from jobs.run_schedules() as s join jobs.jobs as j on j.id = s.job_id").fetchone() == (1, True)
        assert conn.execute("select next_slot > now() from jobs.schedules").fetchone()[0]
