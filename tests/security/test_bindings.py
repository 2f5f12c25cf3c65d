"""A binding follows the grant (docs/SECURITY.md): a role that holds pg_jobs rights through
membership of a role bound to tenants is bound as that role is, whether it acts as itself or
after SET ROLE; one holding rights both through a bound role and an unbound one is refused
(insufficient_privilege, 42501) and changes nothing. And tenant monitors and tenant admins get
nothing that counts or ages another tenant's jobs. Each test acts as the attacking role would,
logged in as itself.

How each was checked to fail without its guard is said in its docstring.
"""

import uuid

import psycopg
import pytest


@pytest.fixture
def roles(dsn):
    """Makes roles (NOLOGIN groups or LOGIN roles) of this test, dropped afterwards."""
    made = []
    suffix = uuid.uuid4().hex[:8]
    admin = psycopg.connect(dsn, autocommit=True)

    def make(name, login=True):
        role = f"{name}_{suffix}"
        admin.execute(f"create role {role} {'login' if login else 'nologin'}")
        made.append(role)
        return role

    yield make, admin
    for role in reversed(made):
        admin.execute(f"drop owned by {role} cascade")
        admin.execute(f"drop role {role}")
    admin.close()


def as_role(dsn, role):
    return psycopg.connect(f"{dsn} user={role}", autocommit=True)


def jobs_of(admin):
    return admin.execute("select count(*) from jobs.jobs").fetchone()[0]


def test_a_member_of_a_bound_group_is_bound_as_the_group(dsn, roles):
    """The DBA's usual way: jobs.grant_producer on a NOLOGIN group bound to acme, the group
    granted to a login role. The member enqueues for acme, and is refused (tenant_not_allowed)
    for evil, as itself and after SET ROLE, with nothing enqueued. Checked to fail without the
    guard: at d7d86e0 (the binding read from the login role's own setting only) both enqueues
    for evil landed."""
    make, admin = roles
    group, member = make("grp_acme", login=False), make("svc")
    admin.execute("select jobs.grant_producer(%s, tenant => 'acme')", (group,))
    admin.execute(f"grant {group} to {member}")
    with as_role(dsn, member) as conn:
        conn.execute("select jobs.enqueue('report', tenant_id => 'acme')")
        before = jobs_of(admin)
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("select jobs.enqueue('report', tenant_id => 'evil')")
        assert refused.value.sqlstate == "PJ007"
        conn.execute(f"set role {group}")
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("select jobs.enqueue('report', tenant_id => 'evil')")
        assert refused.value.sqlstate == "PJ007"
    assert jobs_of(admin) == before == 1


def test_a_worker_through_a_bound_group_claims_only_its_tenants_jobs(dsn, roles):
    """A member of a worker group bound to acme claims acme's job and never evil's. Checked to
    fail without the guard: at d7d86e0 the member claimed both."""
    make, admin = roles
    group, member = make("wrk_acme", login=False), make("wsvc")
    admin.execute("select jobs.grant_worker(%s, tenant => 'acme')", (group,))
    admin.execute(f"grant {group} to {member}")
    for tenant in ("acme", "evil"):
        admin.execute("select jobs.enqueue('report', tenant_id => %s)", (tenant,))
    with as_role(dsn, member) as conn:
        claimed = conn.execute("select tenant_id from jobs.claim('w', max_jobs => 10)").fetchall()
    assert claimed == [("acme",)]
    assert admin.execute("select state::text from jobs.jobs where tenant_id = 'evil'").fetchone()[0] == "ready"


def test_rights_both_bound_and_unbound_are_refused_not_widened(dsn, roles):
    """A member of a group bound to acme and of an unbound producer group: every call is
    refused with insufficient_privilege (42501), its message naming both roles and its hint the fix,
    and nothing is enqueued; binding the member itself settles it (its own binding wins).
    Checked to fail without the guard: at d7d86e0 the member enqueued for evil."""
    make, admin = roles
    bound, unbound, member = make("grp_b", login=False), make("grp_u", login=False), make("both")
    admin.execute("select jobs.grant_producer(%s, tenant => 'acme')", (bound,))
    admin.execute("select jobs.grant_producer(%s)", (unbound,))
    admin.execute(f"grant {bound} to {member}")
    admin.execute(f"grant {unbound} to {member}")
    with as_role(dsn, member) as conn:
        for tenant in ("evil", "acme"):
            with pytest.raises(psycopg.Error) as refused:
                conn.execute("select jobs.enqueue('report', tenant_id => %s)", (tenant,))
            assert refused.value.sqlstate == "42501"
            assert bound in str(refused.value) and unbound in str(refused.value)
            assert "bind" in refused.value.diag.message_hint
    assert jobs_of(admin) == 0
    admin.execute("select jobs.grant_producer(%s, tenant => 'acme')", (member,))
    with as_role(dsn, member) as conn:
        conn.execute("select jobs.enqueue('report', tenant_id => 'acme')")
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("select jobs.enqueue('report', tenant_id => 'evil')")
        assert refused.value.sqlstate == "PJ007"
    assert jobs_of(admin) == 1


def test_an_unbound_member_of_unbound_groups_is_unbound(dsn, roles):
    """Membership of unbound groups only changes nothing: the member acts for any tenant."""
    make, admin = roles
    group, member = make("grp_all", login=False), make("free")
    admin.execute("select jobs.grant_producer(%s)", (group,))
    admin.execute(f"grant {group} to {member}")
    with as_role(dsn, member) as conn:
        for tenant in ("acme", "evil"):
            conn.execute("select jobs.enqueue('report', tenant_id => %s)", (tenant,))
    assert jobs_of(admin) == 2


def test_tenant_monitors_and_admins_read_no_other_tenants_figures(dsn, roles):
    """acme's monitor and acme's tenant admin, with jobs of evil waiting: jobs._oldest_ready
    answers the monitor nothing (the view of every tenant's figures needs it) and is not the
    tenant admin's to call, jobs._outcome_stats (counters of every tenant) is neither's, and
    jobs.queue_stats() counts acme's jobs only. Checked to fail without the guard: at d7d86e0
    both roles were granted both functions and read evil's oldest ready job's age and its
    outcome counters."""
    make, admin = roles
    monitor, tenant_admin = make("mon_acme"), make("adm_acme")
    admin.execute("select jobs.grant_monitor(%s, 'acme')", (monitor,))
    admin.execute("select jobs.grant_admin(%s, 'acme')", (tenant_admin,))
    admin.execute("select jobs.enqueue('report', tenant_id => 'evil')")
    for role in (monitor, tenant_admin):
        with as_role(dsn, role) as conn:
            if role == monitor:
                assert conn.execute("select jobs._oldest_ready('default')").fetchone()[0] is None
            else:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute("select jobs._oldest_ready('default')")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("select * from jobs._outcome_stats()")
            counts = conn.execute("select ready, oldest_ready_age from jobs.queue_stats() "
                                  "where queue = 'default'").fetchone()
            assert counts == (0, None)


def test_a_monitor_of_every_tenant_still_reads_every_figure(dsn, roles):
    """The unbound monitor (postgres_exporter's) reads the view with every tenant's counts and
    ages, as before."""
    make, admin = roles
    monitor = make("mon_all")
    admin.execute("select jobs.grant_monitor(%s)", (monitor,))
    admin.execute("select jobs.enqueue('report', tenant_id => 'evil')")
    with as_role(dsn, monitor) as conn:
        ready, age = conn.execute("select ready, oldest_ready_age from jobs.queue_stats "
                                  "where queue = 'default'").fetchone()
    assert ready == 1 and age is not None
