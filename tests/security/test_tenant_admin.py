"""Tenant admins and tenant monitors (jobs.grant_admin(role, tenant), jobs.grant_monitor(role,
tenant); docs/SECURITY.md): a role bound to tenants reads its tenants' jobs, attempts, steps,
events and counts only, acts on its tenants' jobs only, and nothing it writes of its own (a
function in its WHERE clause) sees another tenant's row. Refusals change nothing.

How each was checked to fail without its guard is said in its docstring.
"""

import uuid

import psycopg
import pytest


@pytest.fixture
def tenants(dsn):
    """Jobs of acme, globex and of no tenant, each with a failed attempt, a saved step and an
    event; a tenant admin and a tenant monitor of acme, and an admin of every tenant."""
    suffix = uuid.uuid4().hex[:8]
    roles = {kind: f"t_{kind}_{suffix}" for kind in ("tenant_admin", "tenant_monitor", "admin")}
    ids = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for role in roles.values():
            conn.execute(f"create role {role} login")
        conn.execute("select jobs.grant_admin(%s, 'acme')", (roles["tenant_admin"],))
        conn.execute("select jobs.grant_monitor(%s, 'acme')", (roles["tenant_monitor"],))
        conn.execute("select jobs.grant_admin(%s)", (roles["admin"],))
        # A schema of the tenant admin's own, where it may write functions.
        conn.execute(f"create schema own_{suffix} authorization {roles['tenant_admin']}")
        for tenant in ("acme", "globex", None):
            label = tenant or "none"
            job = conn.execute("select id from jobs.enqueue('work', jsonb_build_object('secret', %s::text), "
                               "tenant_id => %s, max_attempts => 3)", (label, tenant)).fetchone()[0]
            claim = conn.execute("select claim from jobs.claim('w') where id = %s", (job,)).fetchone()[0]
            conn.execute("select jobs.save_step(%s, %s, 'fetched', jsonb_build_object('secret', %s::text))",
                         (job, claim, label))
            conn.execute("select jobs.fail(%s, %s, %s)", (job, claim, f"error of {label}"))
            conn.execute("select jobs.publish('paid', jsonb_build_object('secret', %s::text), tenant_id => %s)",
                         (label, tenant))
            ids[label] = str(job)
    yield {"dsn": dsn, "ids": ids, "schema": f"own_{suffix}",
           **{kind: f"{dsn} user={role}" for kind, role in roles.items()}}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"drop schema own_{suffix} cascade")
        for role in roles.values():
            conn.execute(f"drop owned by {role} cascade")
            conn.execute(f"drop role {role}")


def secrets(conn, sql):
    return sorted(r[0] for r in conn.execute(sql).fetchall())


def everything(dsn):
    """Every row of the tables a tenant admin could touch, and the roles' privileges and
    settings: what a refusal must leave as it was."""
    with psycopg.connect(dsn) as conn:
        return [conn.execute(sql).fetchall() for sql in (
            "select j::text from jobs_data.jobs as j order by id",
            "select a::text from jobs_data.attempts as a order by job_id, attempt",
            "select s::text from jobs_data.steps as s order by run_id, seq",
            "select q::text from jobs_data.queues as q order by queue",
            "select t::text from jobs_data.job_types as t order by name",
            "select r.rolname, s.setconfig::text from pg_db_role_setting as s join pg_roles as r on r.oid = s.setrole "
            "order by 1",
            "select c.relname, c.relacl::text from pg_class as c where c.relnamespace in "
            "('jobs'::regnamespace, 'jobs_data'::regnamespace) order by 1",
        )]


def test_a_tenant_admin_reads_its_tenants_rows_and_counts_only(tenants):
    """Checked to fail without the guard: with the views' WHERE clauses removed (sql/
    tenant_views.sql) it read globex's and no tenant's jobs, attempts, steps and events; with
    jobs.queue_stats() not branching on the binding it counted 3 delayed jobs."""
    with psycopg.connect(tenants["tenant_admin"], autocommit=True) as conn:
        assert secrets(conn, "select payload->>'secret' from jobs.tenant_jobs") == ["acme"]
        assert secrets(conn, "select error from jobs.tenant_attempts") == ["error of acme"]
        assert secrets(conn, "select output->>'secret' from jobs.tenant_steps") == ["acme"]
        # An event published for every tenant reaches acme's jobs too.
        assert secrets(conn, "select payload->>'secret' from jobs.tenant_events") == ["acme", "none"]
        counts = conn.execute("select queue, delayed, ready from jobs.queue_stats()").fetchall()
        assert counts == [("default", 1, 0)]
        assert conn.execute("select count(*) from jobs.outcome_stats()").fetchone()[0] == 0
        for table in ("jobs.jobs", "jobs_data.jobs", "jobs.attempts", "jobs.steps", "jobs.events",
                      "jobs_data.events", "jobs.queue_stats", "jobs.schedules"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(f"select * from {table}")
        # Shared by every tenant, and read only.
        assert conn.execute("select count(*) from jobs.queues").fetchone()[0] >= 1
    # The admin of every tenant reads every row, and nothing through the tenants' views.
    with psycopg.connect(tenants["admin"], autocommit=True) as conn:
        assert secrets(conn, "select payload->>'secret' from jobs.jobs") == ["acme", "globex", "none"]
        assert conn.execute("select count(*) from jobs.tenant_jobs").fetchone()[0] == 0


def test_a_function_of_the_tenant_admins_own_sees_no_other_tenants_row(tenants):
    """A cheap function in the WHERE clause that reports every value it is shown (RAISE
    NOTICE). Checked to fail without the guard: with the views made without security_barrier
    the planner ran it first, and it reported globex's payload."""
    seen = []
    with psycopg.connect(tenants["tenant_admin"], autocommit=True) as conn:
        conn.add_notice_handler(lambda n: seen.append(n.message_primary))
        conn.execute(f"""create function {tenants['schema']}.peek(v text) returns boolean
                         language plpgsql cost 0.0000001 as $$
                         begin raise notice 'seen %', v; return true; end $$""")
        for view, column in (("tenant_jobs", "payload::text"), ("tenant_steps", "output::text"),
                             ("tenant_attempts", "error"), ("tenant_events", "payload::text")):
            conn.execute(f"select * from jobs.{view} where {tenants['schema']}.peek({column})").fetchall()
    assert seen and not [s for s in seen if "globex" in s], seen


def test_a_tenant_admin_acts_on_its_tenants_jobs_only_and_a_refusal_changes_nothing(tenants):
    """Checked to fail without the guard: without jobs._check_tenant_job in jobs.cancel it
    cancelled globex's job."""
    ids = tenants["ids"]
    before = everything(tenants["dsn"])
    with psycopg.connect(tenants["tenant_admin"], autocommit=True) as conn:
        for call in ("jobs.cancel(%s)", "jobs.promote(%s)", "jobs.requeue(%s)"):
            for other in (ids["globex"], ids["none"]):
                with pytest.raises(psycopg.Error, match="no job has id") as refused:
                    conn.execute(f"select {call}", (other,))
                assert refused.value.sqlstate == "PJ003"  # job_not_found, as for an unknown id
        for sql in ("select jobs.pause_queue('default')", "select jobs.sweep()",
                    "select jobs.grant_admin(current_user::name)",
                    "select jobs.schedule('s', '* * * * *', '{\"name\": \"x\"}')",
                    "insert into jobs.job_types (name) values ('x')",
                    "update jobs.queues set paused = true",
                    "select jobs.enqueue('x', tenant_id => 'acme')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql)
    assert everything(tenants["dsn"]) == before
    with psycopg.connect(tenants["tenant_admin"], autocommit=True) as conn:
        conn.execute("select jobs.promote(%s)", (ids["acme"],))
        conn.execute("select jobs.cancel(%s)", (ids["acme"],))
        conn.execute("select jobs.requeue(%s, 'fetched')", (ids["acme"],))
        assert conn.execute("select state from jobs.tenant_jobs").fetchall() == [("ready",)]
        assert conn.execute("select count(*) from jobs.tenant_steps").fetchone()[0] == 0


def test_a_tenant_monitor_counts_its_tenants_jobs_only(tenants):
    """Checked to fail without the guard: the view jobs.queue_stats, which a monitor may read,
    counted every tenant's jobs before it answered a bound role no rows."""
    with psycopg.connect(tenants["tenant_monitor"], autocommit=True) as conn:
        assert conn.execute("select queue, delayed from jobs.queue_stats()").fetchall() == [("default", 1)]
        assert conn.execute("select count(*) from jobs.queue_stats").fetchone()[0] == 0
        assert conn.execute("select count(*) from jobs.outcome_stats").fetchone()[0] == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("select * from jobs.tenant_jobs")


def test_the_grants_keep_tenant_admins_and_admins_of_every_tenant_apart(tenants):
    """An admin of every tenant is not made a tenant admin (its table rights would remain),
    nor a tenant admin an admin of every tenant (its binding would remain), nor is a superuser
    bound; each refusal says why and changes nothing."""
    before = everything(tenants["dsn"])
    admin = tenants["admin"].rsplit("user=", 1)[1]
    tenant_admin = tenants["tenant_admin"].rsplit("user=", 1)[1]
    with psycopg.connect(tenants["dsn"], autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="admin of every tenant"):
            conn.execute("select jobs.grant_admin(%s, 'acme')", (admin,))
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="is a tenant admin"):
            conn.execute("select jobs.grant_admin(%s)", (tenant_admin,))
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="superuser"):
            conn.execute("select jobs.grant_admin(current_user::name, 'acme')")
        with pytest.raises(psycopg.errors.NullValueNotAllowed):
            conn.execute("select jobs.grant_admin(%s, null)", (tenant_admin,))
    assert everything(tenants["dsn"]) == before
