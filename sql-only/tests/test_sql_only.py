"""The SQL-only edition installed by a role that is not a superuser, on a server into which
nothing of pg_jobs is installed (scripts/test-sql-only.sh starts it and sets
PG_JOBS_SQL_ONLY_DSN, a superuser's connection string), against hostile roles: no role but the
installing one moves the clock or a retention, unbinds its tenant, or reads the settings; code a
role plants where a name might resolve is never run by the owner's functions.

How each was checked to fail without its guard is said in its docstring.
"""

import os
import pathlib
import sys
import uuid

import psycopg
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
for folder in (ROOT / "tests", ROOT / "tests" / "server", ROOT / "tests" / "security", ROOT / "cli" / "tests"):
    sys.path.insert(0, str(folder))
from test_cli import pgjobs_json  # noqa: E402
from test_security import PLANTS  # noqa: E402

ROLES = ["pgj_owner", "pgj_worker", "pgj_bound", "pgj_admin", "pgj_mallory"]


@pytest.fixture(scope="module")
def server():
    dsn = os.environ.get("PG_JOBS_SQL_ONLY_DSN")
    if not dsn:
        pytest.fail("PG_JOBS_SQL_ONLY_DSN is not set: run these tests through scripts/test-sql-only.sh")
    return dsn


@pytest.fixture
def db(server):
    """A database owned by pgj_owner (no superuser, no CREATEROLE), with the edition installed
    by it and each role granted as its name says: {role: connection string}."""
    name = "sqlonly_" + uuid.uuid4().hex[:10]
    with psycopg.connect(server, autocommit=True) as su:
        for role in ROLES:
            if not su.execute("select 1 from pg_roles where rolname = %s", (role,)).fetchone():
                su.execute(f"create role {role} login")
        su.execute(f"create database {name} owner pgj_owner")
    dsns = {role: f"{server} dbname={name} user={role}" for role in ROLES}
    with psycopg.connect(dsns["pgj_owner"], autocommit=True) as owner:
        assert not owner.execute("select rolsuper from pg_roles where rolname = current_user").fetchone()[0]
        owner.execute((ROOT / "sql-only" / "pg_jobs.sql").read_text())
        owner.execute("select jobs.grant_worker('pgj_worker')")
        owner.execute("select jobs.grant_worker('pgj_bound', 'acme')")
        owner.execute("select jobs.grant_admin('pgj_admin')")
        owner.execute("select count(*) from jobs.sweep()")  # (as pg_cron would: no warning)
    try:
        yield dsns
    finally:
        with psycopg.connect(server, autocommit=True) as su:
            su.execute(f"drop database {name} with (force)")


def one(dsn, sql, *args, options=None):
    with psycopg.connect(dsn, autocommit=True, options=options or "") as conn:
        return conn.execute(sql, args).fetchone()[0]


def refused(dsn, sql, *args, options=None):
    with pytest.raises(psycopg.Error) as caught:
        one(dsn, sql, *args, options=options)
    return caught.value.sqlstate


def lease_ahead(dsn, options=None):
    """A claim's lease of 1 minute, less the server's own clock: the clock offset plus 1 min."""
    one(dsn, "select (jobs.enqueue('tick')).id", options=options)
    return one(dsn, "select extract(epoch from lease_expires_at - clock_timestamp())::int "
                    "from jobs.claim('w', lease => '1 minute')", options=options)


def test_the_owner_works_the_queue_as_a_worker_does(db):
    """The API as the extension's, installed by a role that is not a superuser."""
    job = one(db["pgj_owner"], "select (jobs.enqueue('hello', '{\"a\": 1}')).id")
    with psycopg.connect(db["pgj_worker"], autocommit=True) as conn:
        got = conn.execute("select id, claim from jobs.claim('w')").fetchone()
        assert got[0] == job
        assert conn.execute("select jobs.complete(%s, %s, '{\"ok\": true}')", got).fetchone()[0]
    assert one(db["pgj_owner"], "select state::text from jobs.jobs where id = %s", job) == "completed"


def test_no_role_but_the_owner_moves_the_clock(db):
    """A worker's SET of pg_jobs.clock_offset (in the session, or as a connection option) is
    ignored, and the settings table is out of its reach and an admin's; the owner's UPDATE moves
    the clock. Checked: it failed with jobs_config.setting counting any role's session value."""
    day = "-c pg_jobs.clock_offset=1d"
    assert lease_ahead(db["pgj_worker"], options=day) <= 60
    assert lease_ahead(db["pgj_admin"], options=day) <= 60
    for role in ("pgj_worker", "pgj_admin", "pgj_mallory"):
        assert refused(db[role], "insert into jobs_config.settings values ('clock_offset', 86400)") == "42501"
        assert refused(db[role], "select jobs_config.setting('clock_offset')") == "42501"
    one(db["pgj_owner"], "insert into jobs_config.settings values ('clock_offset', 86400) returning 1")
    assert lease_ahead(db["pgj_worker"]) > 86400


def test_no_role_changes_a_retention_or_the_payload_limit(db):
    """pg_jobs.completed_retention set in a session counts for nobody (the extension's is
    server-wide), and pg_jobs.max_payload_size only for a superuser's session. Checked: it
    failed with every session's value counted."""
    opts = "-c pg_jobs.completed_retention=0 -c pg_jobs.max_payload_size=1"
    with psycopg.connect(db["pgj_worker"], autocommit=True, options=opts) as conn:
        conn.execute("select jobs.enqueue('big', jsonb_build_object('x', repeat('y', 4000)))")
        job, claim = conn.execute("select id, claim from jobs.claim('w')").fetchone()
        conn.execute("select jobs.complete(%s, %s)", (job, claim))
    assert one(db["pgj_owner"], "select state::text from jobs.jobs where id = %s", job) == "completed"


def test_a_bound_role_cannot_unbind_itself(db):
    """A worker bound to acme, connecting with pg_jobs.tenants emptied or set to another
    tenant, still enqueues for acme only and is handed acme's jobs only; its binding's row is
    out of its reach. Checked: it failed with jobs._tenants reading the session's setting
    first."""
    owner = db["pgj_owner"]
    one(owner, "select (jobs.enqueue('theirs', tenant_id => 'globex')).id")
    one(owner, "select (jobs.enqueue('mine', tenant_id => 'acme')).id")
    for options in ("-c pg_jobs.tenants=", "-c pg_jobs.tenants=[\"globex\"]"):
        assert refused(db["pgj_bound"], "select (jobs.enqueue('x', tenant_id => 'globex')).id",
                       options=options) == "PJ007"
        with psycopg.connect(db["pgj_bound"], autocommit=True, options=options) as conn:
            names = conn.execute("select array_agg(name order by name) from jobs.claim('w', max_jobs => 10, "
                                 "lease => '1 second')").fetchone()[0]
            assert names in (["mine"], None)
    assert refused(db["pgj_bound"], "delete from jobs_config.tenant_bindings") == "42501"
    assert refused(db["pgj_admin"], "delete from jobs_config.tenant_bindings") == "42501"
    assert one(owner, "select count(*) from jobs.jobs where name = 'theirs' and state = 'ready'") == 1


def test_a_stranger_calls_nothing(db):
    """A role granted nothing calls no function of jobs and reads no table."""
    assert refused(db["pgj_mallory"], "select (jobs.enqueue('x')).id") == "42501"
    assert refused(db["pgj_mallory"], "select count(*) from jobs_data.jobs") == "42501"
    assert refused(db["pgj_mallory"], "select count(*) from jobs_config.tenant_bindings") == "42501"


def plant_recorder(conn, schema):
    """As mallory: in `schema`, the operators and functions of tests/security/test_security.py's PLANTS
    on types a worker may use (pg_jobs's own types are not granted), each recording who ran it
    (whoever it is: the owner need not be a superuser to be worth impersonating)."""
    conn.execute(f"create function {schema}.seen() returns void language sql as "
                 "$$ insert into public.pwned select current_user $$")
    for n, (kind, name, *types) in enumerate(PLANTS):
        if any(t.startswith("jobs.") for t in types):
            continue
        args = ", ".join(f"a{i} {t}" for i, t in enumerate(types))
        if kind == "operator":
            conn.execute(f"create function {schema}.op{n}({args}) returns boolean language plpgsql as $$ "
                         f"begin perform {schema}.seen(); return a0::text {name} a1::text; end $$")
            conn.execute(f"create operator {schema}.{name} (leftarg = {types[0]}, rightarg = {types[1]}, "
                         f"function = {schema}.op{n})")
        else:
            conn.execute(f"create function {schema}.{name}({args}) returns text language plpgsql as $$ "
                         f"begin perform {schema}.seen(); return ''; end $$")


def test_code_planted_where_a_name_might_resolve_is_not_run_by_the_owner(db):
    """Operators and functions planted by a worker in public (made writable by all) and put first on the
    owner's search_path are never run by pg_jobs's functions, which pin theirs to pg_catalog,
    pg_temp: the owner's enqueue, claim, spawn, fail (and with it the triggers that cancel the
    child and move the counts) and sweep run no planted code. Checked: a call of format(text,
    int, int) made by the owner as plain SQL ran the plant."""
    owner = db["pgj_owner"]
    with psycopg.connect(owner.replace("user=pgj_owner", "user=postgres"), autocommit=True) as su:
        su.execute("grant create on schema public to public")
        su.execute("create table public.pwned (who text)")
        su.execute("grant select, insert on public.pwned to public")
    one(owner, "select jobs.grant_worker('pgj_mallory')")
    with psycopg.connect(db["pgj_mallory"], autocommit=True) as mallory:
        plant_recorder(mallory, "public")
    with psycopg.connect(owner, autocommit=True, options="-c search_path=public,pg_catalog") as conn:
        parent = conn.execute("select (jobs.enqueue('parent')).id").fetchone()[0]
        job, claim = conn.execute("select id, claim from jobs.claim('w')").fetchone()
        assert job == parent
        conn.execute("select jobs.spawn(%s, %s, %s)", (job, claim, '{"name": "kid", "child_key": "k1"}'))
        conn.execute("select jobs.fail(%s, %s, 'no', retryable => false)", (job, claim))
        conn.execute("select * from jobs.sweep()")
        assert conn.execute("select state::text from jobs.jobs where name = 'kid'").fetchone()[0] == "cancelled"
        assert conn.execute("select count(*) from public.pwned").fetchone()[0] == 0
        # The guard is the pinned search_path: the same call written here runs the plant.
        conn.execute("select format('%%s of %%s', 1, 2)")
        assert conn.execute("select count(*) from public.pwned").fetchone()[0] > 0


def test_a_claim_warns_once_per_connection_when_nothing_sweeps(db):
    """Without the background worker a database is swept only by what runs jobs.sweep() (pg_cron):
    the first claim of a connection warns when no sweep ran for ten minutes, and says how to
    schedule one; a sweep is noted when it runs (jobs.sweep reads dead_retention once per pass,
    which the edition's jobs._retention notes: this fails if sweep.sql stops reading it)."""
    owner = db["pgj_owner"]
    one(owner, "update jobs_config.last_sweep set at = clock_timestamp() - interval '1 hour' returning 1")
    warnings = []
    with psycopg.connect(db["pgj_worker"], autocommit=True) as conn:
        conn.add_notice_handler(lambda d: warnings.append((d.severity_nonlocalized, d.message_primary,
                                                           d.message_hint)))
        for _ in range(3):
            conn.execute("select count(*) from jobs.claim('w')")
    assert len(warnings) == 1, warnings
    assert warnings[0][0] == "WARNING" and warnings[0][1].startswith("pg_jobs: nothing has swept this database since")
    assert "cron.schedule_in_database" in warnings[0][2] and "'pgj_owner')" in warnings[0][2]
    one(owner, "select count(*) from jobs.sweep()")
    assert one(owner, "select at > clock_timestamp() - interval '1 minute' from jobs_config.last_sweep")
    with psycopg.connect(db["pgj_worker"], autocommit=True) as conn:
        conn.add_notice_handler(lambda d: warnings.append(d.message_primary))
        conn.execute("select count(*) from jobs.claim('w')")
    assert len(warnings) == 1


def test_doctor_checks_the_sweep_of_the_edition(db):
    """`pgjobs doctor` on the edition, as its owner: pg_jobs found, no check of the library's
    preload, and the sweep judged by when jobs.sweep() last ran, with the line that schedules it
    for this database and owner; fine once a sweep ran. Checked: it failed with the edition taken
    for a database without pg_jobs (doctor's query of pg_extension alone)."""
    owner = db["pgj_owner"]
    one(owner, "update jobs_config.last_sweep set at = null returning 1")
    found = {c["check"]: c for c in pgjobs_json(owner, "doctor")}
    assert found["extension"]["ok"] is True and "preload" not in found
    dbname = owner.rsplit("dbname=", 1)[1].split()[0]
    assert found["sweeper"]["ok"] is False and "nothing has swept database" in found["sweeper"]["problem"]
    assert f"'select jobs.sweep()', '{dbname}', 'pgj_owner')" in found["sweeper"]["fix"]
    one(owner, "select count(*) from jobs.sweep()")
    found = {c["check"]: c for c in pgjobs_json(owner, "doctor")}
    assert found["sweeper"]["ok"] is True
