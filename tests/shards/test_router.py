"""pg_jobs through its router (router/pg_jobs_router.sql, PL/Proxy) over three shards: jobs
enqueued by tenant are each completed exactly once by workers claiming across the shards while
one shard is stopped and started again; 200 concurrent enqueues of one key make one job;
children are spawned, claimed and completed through the router; a batch that would span shards
is refused with nothing enqueued; pausing a queue pauses it on every shard; a schedule fires on
one shard only; a configuration is applied to every shard, and one refused changes none."""

import json
import os
import subprocess
import threading
import time
import uuid

import psycopg
import pytest

BIN = os.environ.get("PG_JOBS_PG_BIN", "/usr/lib/postgresql/15/bin")  # the release under test


def connect(dsn):
    return psycopg.connect(dsn, autocommit=True, connect_timeout=5)


def rows(dsn, sql, *args):
    with connect(dsn) as conn:
        return conn.execute(sql, args).fetchall()


def jobs_everywhere(shards, where, *args):
    return sum(rows(dsn, f"select count(*) from jobs.jobs where {where}", *args)[0][0] for dsn in shards["shards"])


def pg_ctl(shards, number, *args):
    subprocess.run(["runuser", "-u", "postgres", "--", f"{BIN}/pg_ctl", "-D", f"{shards['dir']}/shard{number}",
                    "-w", *args], check=True, capture_output=True)


def test_jobs_are_completed_exactly_once_with_a_shard_stopped_mid_drain(shards):
    queue, total = "drain-" + uuid.uuid4().hex[:8], 1200
    with connect(shards["router"]) as conn:
        ids = {conn.execute("select id from jobs.enqueue('work', queue => %s, tenant_id => %s)",
                            (queue, f"tenant-{i % 30}")).fetchone()[0] for i in range(total)}
    assert {u.bytes[15] for u in ids} == {0, 1, 2}
    completed, unanswered, lock, stop = [], set(), threading.Lock(), threading.Event()
    done_while_down = []

    def worker(name):
        conn, settling = None, set()
        deadline = time.monotonic() + 120
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                conn = conn or connect(shards["router"])
                claimed = conn.execute("select id, claim from jobs.claim(%s, array[%s], 10, '2 seconds')",
                                       (name, queue)).fetchall()
                if not claimed:
                    time.sleep(0.05)
                for job_id, claim in claimed:
                    settling.add(job_id)
                    if conn.execute("select jobs.complete(%s, %s)", (job_id, claim)).fetchone()[0]:
                        with lock:
                            completed.append(job_id)
                            if down.is_set():
                                done_while_down.append(job_id)
                    settling.discard(job_id)
            except psycopg.Error:
                unanswered.update(settling)  # (a complete whose answer was lost: done or not)
                conn = None  # (the router's connection to the stopped shard failed: start again)
                time.sleep(0.1)

    down = threading.Event()
    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    while len(completed) < total // 4:
        time.sleep(0.01)
    pg_ctl(shards, 2, "-m", "immediate", "stop")
    down.set()
    time.sleep(2)
    down.clear()
    pg_ctl(shards, 2, "-l", f"{shards['dir']}/shard2/log", "start")
    deadline = time.monotonic() + 90
    while jobs_everywhere(shards, "queue = %s and state = 'completed'", queue) < total and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join()
    assert jobs_everywhere(shards, "queue = %s and state = 'completed'", queue) == total
    assert len(completed) == len(set(completed))  # no job completed twice
    # every job's completion was answered, but those whose answer the stop took
    assert ids - set(completed) <= unanswered
    assert len(ids - set(completed)) <= 4 * 10
    assert done_while_down  # the other shards were drained while one was down


@pytest.mark.parametrize("tenant", [None, "tenant-key"])
def test_one_key_makes_one_job_under_200_concurrent_enqueues(shards, tenant):
    key, barrier, answers = uuid.uuid4().hex, threading.Barrier(50), []

    def producer():
        with connect(shards["router"]) as conn:
            barrier.wait()
            for _ in range(4):
                answers.append(conn.execute("select id from jobs.enqueue('once', idempotency_key => %s, "
                                            "tenant_id => %s)", (key, tenant)).fetchone()[0])

    threads = [threading.Thread(target=producer) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(answers) == 200 and len(set(answers)) == 1
    assert jobs_everywhere(shards, "idempotency_key = %s", key) == 1


def test_children_are_spawned_and_completed_through_the_router(shards):
    router, queue = shards["router"], "family-" + uuid.uuid4().hex[:8]
    with connect(router) as conn:
        parent = conn.execute("select id from jobs.enqueue('parent', queue => %s, tenant_id => 'fam')",
                              (queue,)).fetchone()[0]
        job_id, claim = conn.execute("select id, claim from jobs.claim('w', array[%s])", (queue,)).fetchone()
        assert job_id == parent
        children = [conn.execute("select id from jobs.spawn(%s, %s, %s)",
                                 (parent, claim, json.dumps({"name": "child", "child_key": f"c{i}", "queue": queue}))
                                 ).fetchone()[0] for i in range(3)]
        assert {c.bytes[15] for c in children} == {parent.bytes[15]}
        assert conn.execute("select status from jobs.await_children(%s, %s)", (parent, claim)).fetchone()[0] == "waiting"
        for child_id, child_claim in conn.execute("select id, claim from jobs.claim('w', array[%s], 10)",
                                                  (queue,)).fetchall():
            assert conn.execute("select jobs.complete(%s, %s)", (child_id, child_claim)).fetchone()[0]
        job_id, claim = conn.execute("select id, claim from jobs.claim('w', array[%s])", (queue,)).fetchone()
        assert job_id == parent
        assert conn.execute("select status from jobs.await_children(%s, %s)", (parent, claim)).fetchone()[0] == "done"
        assert conn.execute("select jobs.complete(%s, %s)", (parent, claim)).fetchone()[0]
        states = conn.execute("select state from jobs.get_jobs(%s)", (children + [parent],)).fetchall()
    assert [s for (s,) in states] == ["completed"] * 4


def test_a_batch_across_shards_is_refused_and_nothing_is_enqueued(shards):
    queue = "batch-" + uuid.uuid4().hex[:8]
    tenants = {}
    for i in range(100):  # two tenants of different shards
        shard = rows(shards["router"], "select jobs_router.hash_shard(%s)", f"t{i}")[0][0]
        tenants.setdefault(shard, f"t{i}")
    specs = [{"name": "b", "queue": queue, "tenant_id": t} for t in list(tenants.values())[:2]]
    with pytest.raises(psycopg.Error) as refused:
        rows(shards["router"], "select * from jobs.enqueue_batch(%s)", json.dumps(specs))
    assert refused.value.sqlstate == "22023"
    assert "one batch per tenant" in refused.value.diag.message_hint
    assert jobs_everywhere(shards, "queue = %s", queue) == 0
    one_tenant = [dict(specs[0], payload={"n": n}) for n in range(3)]
    assert len(rows(shards["router"], "select * from jobs.enqueue_batch(%s)", json.dumps(one_tenant))) == 3
    assert jobs_everywhere(shards, "queue = %s", queue) == 3


def test_pausing_a_queue_pauses_it_on_every_shard(shards):
    queue = "pause-" + uuid.uuid4().hex[:8]
    router = shards["router"]
    rows(router, "select jobs.enqueue('p', queue => %s, tenant_id => 'one')", queue)
    rows(router, "select jobs.pause_queue(%s)", queue)
    assert [rows(dsn, "select paused from jobs.queues where queue = %s", queue)
            for dsn in shards["shards"]] == [[(True,)]] * 3
    assert rows(router, "select * from jobs.claim('w', array[%s])", queue) == []
    assert rows(router, "select paused, ready from jobs.queue_stats() where queue = %s", queue) == [(True, 1)]
    rows(router, "select jobs.resume_queue(%s)", queue)
    assert len(rows(router, "select * from jobs.claim('w', array[%s])", queue)) == 1
    unknown = "never-" + uuid.uuid4().hex[:8]
    with pytest.raises(psycopg.Error) as refused:
        rows(router, "select jobs.pause_queue(%s)", unknown)
    assert refused.value.sqlstate == "22023"
    assert sum(len(rows(dsn, "select from jobs.queues where queue = %s", unknown)) for dsn in shards["shards"]) == 0


def test_a_schedule_fires_once_across_the_shards(shards):
    router, job = shards["router"], "report-" + uuid.uuid4().hex[:8]
    schedule = "nightly-" + uuid.uuid4().hex[:8]
    first, second = (rows(router, "select jobs_router.hash_shard(%s)", t)[0][0] for t in ("acme", "zeta"))
    assert first != second
    for tenant in ("acme", "zeta"):  # made again for another tenant: it moves to that tenant's shard
        rows(router, "select jobs.schedule(%s, '* * * * *', %s)", schedule,
             json.dumps({"name": job, "tenant_id": tenant}))
    assert [len(rows(dsn, "select from jobs.schedules where name = %s", schedule)) for dsn in shards["shards"]] \
        == [1 if n == second else 0 for n in range(3)]
    for dsn in shards["shards"]:  # every shard's scheduler, two minutes on
        with connect(dsn) as conn:
            conn.execute("set pg_jobs.clock_offset = '120s'")
            conn.execute("select * from jobs.run_schedules()")
    assert jobs_everywhere(shards, "name = %s", job) == 1
    assert rows(router, "select jobs.unschedule(%s)", schedule) == [(True,)]
    assert sum(len(rows(dsn, "select from jobs.schedules where name = %s", schedule)) for dsn in shards["shards"]) == 0


def test_the_configuration_is_applied_to_every_shard(shards):
    router, queue, job = shards["router"], "cfg-" + uuid.uuid4().hex[:8], "cfg-" + uuid.uuid4().hex[:8]
    config = rows(shards["shards"][0], "select jobs.config_export()")[0][0]
    config["queues"].append({"queue": queue, "paused": True, "fairness": "tenant"})
    config["job_types"].append({"name": job, "max_attempts": 3, "backoff": "fixed", "backoff_base": "00:00:05",
                                "backoff_max": "01:00:00", "jitter": 0.1, "dead_letter": True,
                                "rate_limit_per_key": False, "key_concurrency": 1, "when_busy": "queue"})
    before = [rows(dsn, "select jobs.config_export()")[0][0] for dsn in shards["shards"]]
    for bad in ({"queues": "emails"}, {"job_types": [{"name": job, "max_attempts": 0}]}):
        with pytest.raises(psycopg.Error) as refused:
            rows(router, "select jobs.config_apply(%s)", json.dumps(bad))
        assert refused.value.sqlstate in ("22023", "23502", "23514")
        assert [rows(dsn, "select jobs.config_export()")[0][0] for dsn in shards["shards"]] == before
    rows(router, "select jobs.config_apply(%s)", json.dumps(config))
    for dsn in shards["shards"]:  # (a queue the configuration does not name is left alone)
        exported = rows(dsn, "select jobs.config_export()")[0][0]
        assert [q for q in exported["queues"] if q in config["queues"]] == sorted(config["queues"],
                                                                                   key=lambda q: q["queue"])
        assert exported["job_types"] == sorted(exported["job_types"], key=lambda t: t["name"])
        assert [t["max_attempts"] for t in exported["job_types"] if t["name"] == job] == [3]
        assert [t["name"] for t in exported["job_types"]] == sorted(t["name"] for t in config["job_types"])


def test_a_role_calls_the_router_with_its_own_grants(shards):
    """A role that is no superuser works through the router as it would on one server: what
    its grants on each shard allow, and nothing of the router's own."""
    role = "router_worker_" + uuid.uuid4().hex[:6]
    for dsn in shards["shards"]:
        with connect(dsn) as conn:
            conn.execute(f"create role {role} login")
            conn.execute("select jobs.grant_worker(%s)", (role,))
    with connect(shards["router"]) as conn:
        conn.execute(f"create role {role} login")
    worker = shards["router"].replace("user=postgres", f"user={role}")
    queue = "grants-" + uuid.uuid4().hex[:8]
    job_id = rows(worker, "select id from jobs.enqueue('g', queue => %s, tenant_id => 'acme')", queue)[0][0]
    claimed = rows(worker, "select id, claim from jobs.claim('w', array[%s])", queue)
    assert [c[0] for c in claimed] == [job_id]
    assert rows(worker, "select jobs.complete(%s, %s)", *claimed[0]) == [(True,)]
    for refused_sql, state in [
        ("select * from jobs.queue_stats()", "42501"),  # a worker's grants on the shards do not include it
        ("select * from jobs_router.shards", "42501"),  # the shards' connection strings
        ("select * from jobs_router.placements", "42501"),
        ("select jobs_router.set_shards(array['host=elsewhere'])", "42501"),
        ("select jobs_router.add_shard('host=elsewhere')", "42501"),
        ("select jobs_router.move_tenant('acme', 0)", "42501"),
    ]:
        with pytest.raises(psycopg.Error) as refused:
            rows(worker, refused_sql)
        assert refused.value.sqlstate == state, refused_sql
    assert rows(shards["router"], "select count(*) from jobs_router.shards") == [(3,)]
