"""Tenants who stall each other (docs/SECURITY.md): each tenant has its own limits and its own
lock slots, so neither another tenant's running jobs nor its open transaction holding every
slot it can reach holds back or stalls a tenant's claims, publishes and event waits. Each
test acts as the bound roles would, with a lock_timeout: a statement that waits on the other
tenant fails with 55P03 instead of returning.

How each was checked to fail without its guard is said in its docstring.
"""

import uuid

import psycopg
import pytest

from test_sweeper import eventually, one, swept  # noqa: F401 (swept: fixture)


@pytest.fixture
def roles(dsn):
    """A bound worker and a bound producer for the tenants acme and globex."""
    suffix = uuid.uuid4().hex[:8]
    made = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for tenant in ("acme", "globex"):
            for kind in ("worker", "producer"):
                role = f"t_{tenant}_{kind}_{suffix}"
                conn.execute(f"create role {role} login")
                conn.execute(f"select jobs.grant_{kind}(%s, tenant => %s)", (role, tenant))
                made[(tenant, kind)] = f"{dsn} user={role}"
    yield made
    with psycopg.connect(dsn, autocommit=True) as conn:
        for tenant, kind in made:
            role = f"t_{tenant}_{kind}_{suffix}"
            conn.execute(f"drop owned by {role} cascade")
            conn.execute(f"drop role {role}")


def impatient(dsn):
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("set lock_timeout = '2s'")
    return conn


def test_a_tenants_running_jobs_and_open_claim_hold_back_no_other_tenant(dsn, roles):
    """acme's jobs run under a job type's concurrency (1), a concurrency key and a rate limit
    (1 an hour), and acme's worker then holds an open transaction whose claim holds the lock
    slots of those limits. globex's worker claims its jobs of the same names and key at once.
    Checked to fail without the guard: at 515c644 (limits and slots shared by all tenants)
    globex's claim waited on acme's slot until lock_timeout (55P03)."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("insert into jobs_data.job_types (name, concurrency) values ('limited', 1)")
        admin.execute("insert into jobs_data.job_types (name, rate_limit, rate_period) values ('rated', 1, '1 hour')")
        for tenant in ("acme", "globex"):
            admin.execute("select jobs.enqueue('limited', tenant_id => %s)", (tenant,))
            admin.execute("select jobs.enqueue('keyed', tenant_id => %s, concurrency_key => 'k')", (tenant,))
            admin.execute("select jobs.enqueue('rated', tenant_id => %s)", (tenant,))
        admin.execute("select jobs.enqueue('keyed', tenant_id => 'acme', concurrency_key => 'k2')")
        admin.execute("select jobs.enqueue('limited', tenant_id => 'acme')")
        admin.execute("select jobs.enqueue('rated', tenant_id => 'acme')")
    with psycopg.connect(roles[("acme", "worker")], autocommit=True) as acme:
        names = acme.execute("select name from jobs.claim('acme-1', max_jobs => 10) order by name").fetchall()
        assert [n for (n,) in names] == ["keyed", "keyed", "limited", "rated"]
    with psycopg.connect(roles[("acme", "worker")]) as acme:
        # Its second 'limited' and 'rated' are held back: the claim holds their slots.
        assert acme.execute("select count(*) from jobs.claim('acme-2', max_jobs => 10)").fetchone()[0] == 0
        with impatient(roles[("globex", "worker")]) as globex:
            got = globex.execute("select name from jobs.claim('globex-1', max_jobs => 10) order by name").fetchall()
            assert [n for (n,) in got] == ["keyed", "limited", "rated"]
        acme.rollback()


@pytest.mark.parametrize("fairness", ["tenant", "concurrency_key"])
def test_a_bound_worker_in_a_fair_queue_takes_turns_among_its_own_tenants_only(dsn, roles, fairness):
    """A fair queue shared by acme and globex: acme's bound worker takes acme's jobs, its due
    one included (in turns among its keys, with concurrency_key), never globex's, and never
    waits on the rows globex's open claim holds; globex's worker then takes the rest, globex's.
    Checked to fail with the tenant condition taken out of the turns scan of
    jobs._fair_ready: acme's worker was handed globex's jobs."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("select jobs.set_fairness('shared', %s)", (fairness,))
        for tenant in ("globex", "acme"):
            for n in range(3):
                admin.execute("select jobs.enqueue('f', queue => 'shared', tenant_id => %s, concurrency_key => %s)",
                              (tenant, f"k{n}"))
            admin.execute("select jobs.enqueue('due', queue => 'shared', tenant_id => %s, run_at => jobs.clock() + '1 second')",
                          (tenant,))
        admin.execute("update jobs_data.jobs set run_at = jobs.clock() - interval '1 second' where name = 'due'")
    with psycopg.connect(roles[("globex", "worker")]) as globex_open:
        assert globex_open.execute("select count(*) from jobs.claim('g-0', array['shared'], 1)").fetchone()[0] == 1
        with impatient(roles[("acme", "worker")]) as acme:
            got = acme.execute("select tenant_id, name from jobs.claim('a-1', array['shared'], 10)").fetchall()
            assert sorted(got) == [("acme", "due"), ("acme", "f"), ("acme", "f"), ("acme", "f")]
        globex_open.commit()
    with impatient(roles[("globex", "worker")]) as globex:
        got = globex.execute("select tenant_id from jobs.claim('g-1', array['shared'], 10)").fetchall()
        assert got and {t for (t,) in got} == {"globex"}
    with psycopg.connect(dsn, autocommit=True) as admin:
        assert admin.execute("select count(*) from jobs.jobs where state <> 'running'").fetchone()[0] == 0


def test_a_tenants_open_transaction_on_an_event_stalls_no_other_tenant(dsn, roles):
    """acme's worker suspends its job on an event (name, key) and leaves its transaction open;
    acme's producer publishes another in an open transaction. globex's producer publishes the
    first at once, and globex's worker waits on the second at once ('waiting': acme's
    event is not globex's). Checked to fail without the guard: at 515c644 (one slot per name
    and key for every tenant) both waited on acme's transactions until lock_timeout (55P03)."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        for tenant in ("acme", "globex"):
            admin.execute("select jobs.enqueue('waiter', tenant_id => %s)", (tenant,))
    with psycopg.connect(roles[("acme", "worker")]) as acme, \
            psycopg.connect(roles[("acme", "producer")]) as acme_producer:
        job_id, claim = acme.execute("select id, claim from jobs.claim('acme')").fetchone()
        assert acme.execute("select status from jobs.await_event(%s, %s, 'paid', 'order-1')",
                            (job_id, claim)).fetchone()[0] == "waiting"
        acme_producer.execute("select jobs.publish('paid', '{}', 'order-2')")
        with impatient(roles[("globex", "producer")]) as globex_producer:
            globex_producer.execute("select jobs.publish('paid', '{}', 'order-1')")
        with impatient(roles[("globex", "worker")]) as globex:
            job_id, claim = globex.execute("select id, claim from jobs.claim('globex')").fetchone()
            assert globex.execute("select status from jobs.await_event(%s, %s, 'paid', 'order-2')",
                                  (job_id, claim)).fetchone()[0] == "waiting"
        acme.commit()
        acme_producer.commit()
    with psycopg.connect(dsn, autocommit=True) as admin:
        states = admin.execute("select tenant_id, state::text from jobs.jobs order by tenant_id").fetchall()
        # globex's event does not wake acme's waiter, nor acme's globex's.
        assert states == [("acme", "suspended"), ("globex", "suspended")]


def test_a_producer_attaching_a_child_in_an_open_transaction_does_not_stall_the_sweeper(swept):
    """acme's parent runs with a child on its final attempt under a short lease; acme's
    producer attaches another child to the parent and leaves its transaction open, holding the
    parent's row. The sweeper buries the lapsed child without waiting for that transaction, and
    goes on: globex's abandoned final attempt is buried too. Once the producer commits, a pass
    applies the move it left (jobs_data.family_pending): the parent counts one live child, the
    producer's. Checked to fail without the guard: at b465760 the sweeper waited on the parent's
    row, and neither job was buried while the producer's transaction was open."""
    with psycopg.connect(swept, autocommit=True) as conn:
        conn.execute("truncate jobs_data.jobs, jobs_data.family_pending")
        conn.execute("select jobs.enqueue('parent', tenant_id => 'acme', queue => 'parents')")
        parent, claim = conn.execute(
            "select id, claim from jobs.claim('w', array['parents'], lease => '1 hour')").fetchone()
        conn.execute("""select jobs.spawn(%s, %s, '{"name": "first", "child_key": "first", "max_attempts": 1}')""",
                     (parent, claim))
        assert conn.execute("select count(*) from jobs.claim('w', lease => '300 ms')").fetchone()[0] == 1
        conn.execute("select jobs.enqueue('theirs', tenant_id => 'globex', max_attempts => 1, queue => 'globex')")
        assert conn.execute("select count(*) from jobs.claim('w', array['globex'], lease => '300 ms')").fetchone()[0] == 1
    with psycopg.connect(swept) as producer:
        producer.execute("select jobs.enqueue('second', tenant_id => 'acme', parent_id => %s, queue => 'later')",
                         (parent,))
        eventually(swept, "select count(*) from jobs.jobs where name in ('first', 'theirs') and state = 'dead'", 2,
                   timeout=10)
        producer.commit()
    eventually(swept, "select count(*) from jobs_data.family_pending", 0, timeout=10)
    assert one(swept, "select children_live from jobs_data.jobs where id = %s", (parent,)) == 1


def test_a_worker_holding_a_child_in_an_open_transaction_does_not_stall_the_sweepers_cascade(swept):
    """acme's parent, on its final attempt, lapses while acme's worker holds one of its
    children in an open transaction (a heartbeat inside BEGIN). The sweeper buries the parent
    and cancels the children it can lock without waiting for that transaction, and goes on:
    globex's abandoned final attempt is buried too. Once the worker's transaction ends, a pass
    cancels the held child. Checked to fail without the guard: at b465760 the sweeper's cascade
    waited on the held child, and the parent's burial did not land while the transaction was
    open."""
    with psycopg.connect(swept, autocommit=True) as conn:
        conn.execute("truncate jobs_data.jobs, jobs_data.family_pending")
        conn.execute("select jobs.enqueue('parent', tenant_id => 'acme', queue => 'parents', max_attempts => 1)")
        parent, claim = conn.execute(
            "select id, claim from jobs.claim('w', array['parents'], lease => '2 seconds')").fetchone()
        for key in ("held", "free"):
            conn.execute("select jobs.spawn(%s, %s, jsonb_build_object('name', 'child', 'child_key', %s::text))",
                         (parent, claim, key))
        held, held_claim = conn.execute("select id, claim from jobs.claim('w', lease => '1 hour')").fetchone()
        conn.execute("select jobs.enqueue('theirs', tenant_id => 'globex', max_attempts => 1, queue => 'globex')")
        assert conn.execute("select count(*) from jobs.claim('w', array['globex'], lease => '300 ms')").fetchone()[0] == 1
    with psycopg.connect(swept) as worker:
        assert worker.execute("select jobs.heartbeat(%s, %s) is not null", (held, held_claim)).fetchone()[0]
        eventually(swept, "select count(*) from jobs.jobs where name in ('parent', 'theirs') and state = 'dead'", 2,
                   timeout=10)
        eventually(swept, "select count(*) from jobs.jobs where name = 'child' and state = 'cancelled'", 1,
                   timeout=10)
        worker.commit()
    eventually(swept, "select count(*) from jobs.jobs where name = 'child' and state = 'cancelled'", 2, timeout=10)
    eventually(swept, "select count(*) from jobs_data.family_pending", 0, timeout=10)
