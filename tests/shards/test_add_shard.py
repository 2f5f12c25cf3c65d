"""Adding a shard and moving a tenant (jobs_router.add_shard, jobs_router.move_tenant), on a
router and two shards of this module's own, and a third server added: every tenant the shards
held keeps enqueuing to its shard, tenants not seen before hash over three shards, the new
shard gets the configuration; a server whose pg_jobs.shard is not the new number is refused
with nothing changed; a moved tenant's new jobs and schedules go to its new shard while its
jobs already enqueued stay reachable where they are. The Python library's shard_for agrees
with the router, placements given."""

import json
import os
import subprocess
import tempfile

import psycopg
import pytest

import pg_jobs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PORT = int(os.environ.get("PG_JOBS_ADD_SHARD_PORT", "54454"))  # two shards, the router, the added shard


def sh(*args, env=None):
    run = subprocess.run(["bash", *args], capture_output=True, text=True, env=env)
    assert run.returncode == 0, f"{' '.join(args)}: {run.stderr}"
    return run.stdout


def rows(dsn, sql, *args):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, args).fetchall()


@pytest.fixture(scope="module")
def two_shards():
    directory = tempfile.mkdtemp(prefix="pg_jobs-add-shard-")
    env = {**os.environ, "PG_JOBS_SHARDS_DIR": directory, "PG_JOBS_SHARDS_PORT": str(PORT)}
    conf = os.path.join(directory, "added.conf")
    try:
        lines = dict(line.split("=", 1) for line in sh(os.path.join(ROOT, "scripts/shards.sh"), "start", "2",
                                                       env=env).splitlines())
        with open(conf, "w") as f:
            f.write("pg_jobs.shard = 2\n")
        added = sh(os.path.join(ROOT, "scripts/cluster.sh"), "start", f"{directory}/added", str(PORT + 3), conf).strip()
        with psycopg.connect(added, autocommit=True) as conn:
            conn.execute("create extension pg_jobs")
        yield {"router": lines["router"], "shards": [lines["shard0"], lines["shard1"], added], "dir": directory}
    finally:
        sh(os.path.join(ROOT, "scripts/shards.sh"), "stop", env=env)
        sh(os.path.join(ROOT, "scripts/cluster.sh"), "stop", f"{directory}/added")
        subprocess.run(["rm", "-rf", directory], check=False)


def enqueue_shard(router, tenant):
    return rows(router, "select (jobs.enqueue('e', tenant_id => %s)).id", tenant)[0][0].bytes[15]


def routed(dsn):
    """The shard's connection string as the router takes it: no role (the caller's)."""
    return " ".join(p for p in dsn.split() if not p.startswith("user=")) + " connect_timeout=2"


def test_a_shard_added_keeps_every_tenant_where_it_was(two_shards):
    router, shards = two_shards["router"], two_shards["shards"]
    tenants = [f"old-{i}" for i in range(30)]
    before = {t: enqueue_shard(router, t) for t in tenants}
    assert set(before.values()) == {0, 1}
    rows(router, "select jobs.schedule('nightly-old-1', '0 3 * * *', %s)", json.dumps({"name": "rep", "tenant_id": "old-1"}))
    rows(router, "select jobs.config_apply(%s)",
         json.dumps({"queues": [{"queue": "held", "paused": True, "fairness": "tenant"}], "job_types": []}))

    # A server that is not shard 2 is refused, and nothing changes.
    with pytest.raises(psycopg.Error) as refused:
        rows(router, "select jobs_router.add_shard(%s)", routed(shards[1]))
    assert refused.value.sqlstate == "22023"
    assert "pg_jobs.shard = 2" in refused.value.diag.message_hint
    assert rows(router, "select count(*) from jobs_router.shards")[0][0] == 2
    assert rows(router, "select count(*) from jobs_router.placements")[0][0] == 0

    assert "shard 2 added" in rows(router, "select jobs_router.add_shard(%s)", routed(shards[2]))[0][0]
    assert {t: enqueue_shard(router, t) for t in tenants} == before
    new = {enqueue_shard(router, f"new-{i}") for i in range(30)}
    assert new == {0, 1, 2}
    configured = rows(shards[2], "select jobs.config_export()")[0][0]
    assert {"queue": "held", "paused": True, "fairness": "tenant"} in configured["queues"]

    placements = dict(rows(router, "select key, shard from jobs_router.placements"))
    expected = [rows(router, "select jobs_router.enqueue_shard(null, null, null, %s, 'e')", t)[0][0]
                for t in tenants + [f"new-{i}" for i in range(30)]]
    assert [pg_jobs.shard_for(3, "e", tenant_id=t, placements=placements)
            for t in tenants + [f"new-{i}" for i in range(30)]] == expected


def test_a_moved_tenant_enqueues_on_its_new_shard(two_shards):
    router, shards = two_shards["router"], two_shards["shards"]
    old = enqueue_shard(router, "old-1")
    target = 2 if old != 2 else 0
    job_id = rows(router, "select (jobs.enqueue('e', tenant_id => 'old-1')).id")[0][0]
    said = rows(router, "select jobs_router.move_tenant('old-1', %s)", target)[0][0]
    assert f"new jobs go to shard {target}" in said and f"finish on shard {old}" in said
    assert enqueue_shard(router, "old-1") == target
    assert [len(rows(dsn, "select from jobs.schedules where name = 'nightly-old-1'")) for dsn in shards] \
        == [1 if n == target else 0 for n in range(3)]
    assert rows(router, "select state from jobs.get_job(%s)", job_id) == [("ready",)]  # still where it was
    with pytest.raises(psycopg.Error) as refused:
        rows(router, "select jobs_router.move_tenant('old-1', 7)")
    assert refused.value.sqlstate == "22023"
    assert enqueue_shard(router, "old-1") == target
