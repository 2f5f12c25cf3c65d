"""The launcher: one sweeper in every database that has pg_jobs, on a cluster of its own where
pg_jobs.database_name is unset (the default: every database is swept).

Each test says how it was checked to fail without its guard. Every wait polls with a deadline.
"""

import os
import time
import uuid

import psycopg
import pytest

import polling
from clusters import own_cluster
from polling import one

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PORT = int(os.environ.get("PG_JOBS_LAUNCHER_PORT", "54415"))
DEADLINE = 30  # seconds; well under the launcher's 60 s look at databases without pg_jobs


@pytest.fixture(scope="module")
def server():
    """A cluster with pg_jobs preloaded and every database swept, every 100 ms."""
    with own_cluster("pg_jobs-launcher.", PORT, "pg_jobs.sweep_interval = '100ms'\nlog_min_messages = log\n") as s:
        yield s


def eventually(dsn, sql, wanted, timeout=DEADLINE):
    polling.eventually(dsn, sql, wanted, timeout)

def sweepers(dbname):
    return ("select count(*) from pg_stat_activity where backend_type = 'pg_jobs sweeper' "
            f"and datname = '{dbname}'")


def sweeper_pid(dsn, dbname):
    return one(dsn, f"select pid from pg_stat_activity where backend_type = 'pg_jobs sweeper' "
                    f"and datname = '{dbname}'")


@pytest.fixture
def make_db(server):
    """make_db(extension=True, owner=None): a new database (with pg_jobs), dropped afterwards."""
    made = []

    def make(extension=True, owner=None):
        name = "l_" + uuid.uuid4().hex[:10]
        with psycopg.connect(server["dsn"], autocommit=True) as admin:
            admin.execute(f"create database {name}" + (f" owner {owner}" if owner else ""))
        made.append(name)
        dsn = f"{server['dsn']} dbname={name}"
        if extension:
            one(dsn, "create extension pg_jobs")
        return name, dsn

    yield make
    with psycopg.connect(server["dsn"], autocommit=True) as admin:
        for name in made:
            admin.execute(f"drop database if exists {name} with (force)")


def abandon_final_attempt(dsn):
    """Claims a one-attempt job under a short lease, then disconnects: no client is left, and
    only a sweep can bury it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select jobs.enqueue('abandoned', max_attempts => 1)")
        assert conn.execute("select count(*) from jobs.claim('gone', lease => '200 ms')").fetchone()[0] == 1


def test_every_database_with_pg_jobs_is_swept(make_db):
    """Before the launcher, one worker swept one database (pg_jobs.database_name, `postgres`):
    the job in the second database stayed running for ever."""
    (a, dsn_a), (b, dsn_b) = make_db(), make_db()
    abandon_final_attempt(dsn_a)
    abandon_final_attempt(dsn_b)
    eventually(dsn_a, "select state::text from jobs.jobs", "dead")
    eventually(dsn_b, "select state::text from jobs.jobs", "dead")
    assert one(dsn_a, sweepers(a)) == 1 and one(dsn_b, sweepers(b)) == 1


def test_a_database_without_pg_jobs_has_no_sweeper_and_is_picked_up_at_create_extension(make_db):
    """The sweeper that looks into a database without pg_jobs leaves at once; CREATE
    EXTENSION wakes the launcher at its commit. Without the wake-up (the hook's commit
    callback removed) the launcher looks again only after 60 s, past this test's deadline."""
    name, dsn = make_db(extension=False)
    time.sleep(1)  # ten sweep intervals: the launcher has looked
    assert one(dsn, sweepers(name)) == 0
    one(dsn, "create extension pg_jobs")
    abandon_final_attempt(dsn)
    eventually(dsn, "select state::text from jobs.jobs", "dead")


def test_drop_extension_ends_that_database_sweeper_only(make_db):
    (a, dsn_a), (b, dsn_b) = make_db(), make_db()
    eventually(dsn_a, sweepers(a), 1)
    eventually(dsn_b, sweepers(b), 1)
    one(dsn_a, "drop extension pg_jobs")
    eventually(dsn_a, sweepers(a), 0)
    assert one(dsn_b, sweepers(b)) == 1


@pytest.mark.parametrize("force", ["", " with (force)"])
def test_drop_database_of_a_swept_database_succeeds_and_the_launcher_carries_on(server, make_db, force):
    """DROP DATABASE (by its owner, not a superuser) fails while any other session is
    connected to it; the sweeper is one. The utility hook stops it first. Without the hook
    the DROP failed: 'database ... is being accessed by other users'. WITH (FORCE) terminates
    the sessions it finds at once, and the owner may not terminate the sweeper (a
    superuser's): the hook waits for it to leave. Without that wait the FORCE drop failed:
    'permission denied to terminate process'."""
    with psycopg.connect(server["dsn"], autocommit=True) as admin:
        admin.execute("drop role if exists launcher_owner")
        admin.execute("create role launcher_owner login createdb")
    name, dsn = make_db(owner="launcher_owner")
    eventually(dsn, sweepers(name), 1)
    owner = f"{server['dsn']} user=launcher_owner"
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute(f"drop database {name}{force}")
    assert one(server["dsn"], "select count(*) from pg_database where datname = %s", (name,)) == 0
    # The launcher is not wedged by the database it lost: a new one is swept.
    other, dsn_other = make_db()
    abandon_final_attempt(dsn_other)
    eventually(dsn_other, "select state::text from jobs.jobs", "dead")
    one(server["dsn"], "drop role launcher_owner")


def test_a_failed_drop_database_by_another_role_leaves_the_sweeper_alone(server, make_db):
    """A role that may not drop a database must not stop its sweeper by trying: the hook
    stops a sweeper only for the database's owner or a superuser. Without that check the
    sweeper was stopped at each attempt (a new pid), and a role looping on it kept the
    database unswept."""
    with psycopg.connect(server["dsn"], autocommit=True) as admin:
        admin.execute("drop role if exists launcher_mallory")
        admin.execute("create role launcher_mallory login createdb")
    name, dsn = make_db()
    eventually(dsn, sweepers(name), 1)
    before = sweeper_pid(dsn, name)
    mallory = f"{server['dsn']} user=launcher_mallory"
    for statement in (f"drop database {name}", f"alter database {name} rename to x_{name}",
                      f"create database x_{name} template {name}"):
        with psycopg.connect(mallory, autocommit=True) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    time.sleep(0.5)
    assert sweeper_pid(dsn, name) == before
    one(server["dsn"], "drop role launcher_mallory")


def test_create_database_from_a_swept_template(server, make_db):
    """CREATE DATABASE ... TEMPLATE needs the template without sessions: the hook stops its
    sweeper, and the copy, which has pg_jobs, is swept too. Without the hook: 'source
    database ... is being accessed by other users'."""
    name, dsn = make_db()
    eventually(dsn, sweepers(name), 1)
    copy = "c_" + name
    try:
        one(server["dsn"], f"create database {copy} template {name}")
        copy_dsn = f"{server['dsn']} dbname={copy}"
        abandon_final_attempt(copy_dsn)
        eventually(copy_dsn, "select state::text from jobs.jobs", "dead")
        eventually(dsn, sweepers(name), 1, timeout=DEADLINE)  # the template's is back after its pause
    finally:
        one(server["dsn"], f"drop database if exists {copy} with (force)")


def test_database_name_restricts_the_worker_to_one_database(server, make_db):
    (a, dsn_a), (b, dsn_b) = make_db(), make_db()
    eventually(dsn_b, sweepers(b), 1)
    try:
        one(server["dsn"], f"alter system set pg_jobs.database_name = '{a}'")
        one(server["dsn"], "select pg_reload_conf()")
        eventually(dsn_b, sweepers(b), 0)
        eventually(dsn_a, sweepers(a), 1)
    finally:
        one(server["dsn"], "alter system reset pg_jobs.database_name")
        one(server["dsn"], "select pg_reload_conf()")
    eventually(dsn_b, sweepers(b), 1)


def test_the_cap_on_databases_is_kept_and_logged(server, make_db):
    try:
        one(server["dsn"], "alter system set pg_jobs.max_databases = 1")
        one(server["dsn"], "select pg_reload_conf()")
        make_db(), make_db()
        time.sleep(1)
        total = one(server["dsn"], "select count(*) from pg_stat_activity where backend_type = 'pg_jobs sweeper'")
        assert total <= 1
        deadline = time.monotonic() + DEADLINE
        while "pg_jobs.max_databases (1) reached" not in open(os.path.join(server["dir"], "log")).read():
            assert time.monotonic() < deadline, "no LOG line for the cap"
            time.sleep(0.1)
    finally:
        one(server["dsn"], "alter system reset pg_jobs.max_databases")
        one(server["dsn"], "select pg_reload_conf()")


def test_a_killed_launcher_comes_back_and_no_database_gets_two_sweepers(server, make_db):
    name, dsn = make_db()
    eventually(dsn, sweepers(name), 1)
    launcher = "select pid from pg_stat_activity where backend_type = 'pg_jobs launcher'"
    before = one(dsn, launcher)
    assert one(dsn, "select pg_terminate_backend(%s)", (before,))
    eventually(dsn, f"select count(*) from pg_stat_activity where backend_type = 'pg_jobs launcher' "
                    f"and pid <> {before}", 1)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        assert one(dsn, sweepers(name)) <= 1
        time.sleep(0.05)
    abandon_final_attempt(dsn)
    eventually(dsn, "select state::text from jobs.jobs", "dead")


def test_a_database_whose_sweeper_restarts_keeps_its_place_under_the_cap(server, make_db):
    """With pg_jobs.max_databases = 1, a database whose sweeper is terminated gets it back
    after the restart delay; a database made meanwhile (a CREATEDB role's clone, say) does not
    take its place. Checked to fail without the guard: the new database's sweeper started
    while the first one's restarted, and the first database was left unswept for good."""
    try:
        one(server["dsn"], "alter system set pg_jobs.max_databases = 1")
        one(server["dsn"], "select pg_reload_conf()")
        a, dsn_a = make_db()
        eventually(dsn_a, sweepers(a), 1)
        pid = sweeper_pid(dsn_a, a)
        assert one(dsn_a, "select pg_terminate_backend(%s)", (pid,))
        b, dsn_b = make_db()
        eventually(dsn_a, sweepers(a) + f" and pid <> {pid}", 1)
        assert one(dsn_b, sweepers(b)) == 0
    finally:
        one(server["dsn"], "alter system reset pg_jobs.max_databases")
        one(server["dsn"], "select pg_reload_conf()")
