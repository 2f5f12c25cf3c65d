"""Shard-aware workers of both libraries (pg_jobs.ShardedWorker, createShardedWorker) over the
three shards: jobs enqueued through the router by tenant are each completed once, and each
job's effect (a row its handler writes through the connection of the transaction that
completes it, on the job's shard) happens exactly once, while one shard is killed and started
again mid-drain: the worker keeps working the other shards meanwhile, and its dispatcher for
that shard connects again. The libraries' producers hash an enqueue as the router does."""

import json
import os
import signal
import subprocess
import time
import uuid

import pytest
from test_router import connect, jobs_everywhere, pg_ctl, rows

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = os.path.join(ROOT, ".venv/bin/python")

PYTHON_WORKER = """
import sys
import pg_jobs
dsns, queue, table = sys.argv[1].split("|"), sys.argv[2], sys.argv[3]

@pg_jobs.job("effect")
async def effect(payload, ctx):
    await ctx.conn.execute(f"insert into {table} (job_id) values (%s)", (ctx.job.id,))

pg_jobs.ShardedWorker(dsns, jobs=[effect], queues=[queue], concurrency=4, lease=3, poll=0.5).run()
"""

NODE_WORKER = """
import { createShardedWorker, defineJob } from '%s/clients/node/dist/esm/index.js';
const [dsns, queue, table] = process.argv.slice(1);
const effect = defineJob({ name: 'effect', async handler(payload, ctx) {
  await ctx.tx.query(`insert into ${table} (job_id) values ($1)`, [ctx.job.id]);
} });
await createShardedWorker({ shards: dsns.split('|'), jobs: [effect], queues: [queue], concurrency: 4,
                            leaseMs: 3000, pollMs: 500 }).run();
""" % ROOT


def tail(log):
    log.flush()
    log.seek(0)
    return "".join(line for line in log.readlines()[-30:] if "job completed" not in line)


def url(dsn):
    """node-postgres takes URLs, not key=value connection strings."""
    parts = dict(item.split("=", 1) for item in dsn.split())
    return f"postgres://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"


def worker_command(language, dsns, queue, table):
    if language == "python":
        return [PYTHON, "-c", PYTHON_WORKER, "|".join(dsns), queue, table]
    return ["node", "--input-type=module", "-e", NODE_WORKER, "|".join(map(url, dsns)), queue, table]


@pytest.mark.parametrize("language", ["python", "node"])
def test_a_sharded_worker_completes_each_job_once_with_a_shard_stopped(shards, language):
    queue, table, total = f"lib-{language}-{uuid.uuid4().hex[:6]}", f"effects_{language}_{uuid.uuid4().hex[:6]}", 600
    for dsn in shards["shards"]:
        with connect(dsn) as conn:
            conn.execute(f"create table {table} (job_id uuid primary key)")
    with connect(shards["router"]) as conn:
        for i in range(total):
            conn.execute("select jobs.enqueue('effect', queue => %s, tenant_id => %s)", (queue, f"t{i % 30}"))
    log = open(os.path.join(shards["dir"], f"{queue}.log"), "w+")
    worker = subprocess.Popen(worker_command(language, shards["shards"], queue, table), cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=log, text=True)
    try:
        deadline = time.monotonic() + 60
        while jobs_everywhere(shards, "queue = %s and state = 'completed'", queue) < total // 4:
            assert worker.poll() is None, tail(log)
            assert time.monotonic() < deadline, "the worker did not start working"
            time.sleep(0.1)
        pg_ctl(shards, 1, "-m", "immediate", "stop")
        down_at = sum(rows(dsn, "select count(*) from jobs.jobs where queue = %s and state = 'completed'", queue)[0][0]
                      for dsn in (shards["shards"][0], shards["shards"][2]))
        time.sleep(2)
        up_at = sum(rows(dsn, "select count(*) from jobs.jobs where queue = %s and state = 'completed'", queue)[0][0]
                    for dsn in (shards["shards"][0], shards["shards"][2]))
        pg_ctl(shards, 1, "-l", f"{shards['dir']}/shard1/log", "start")
        deadline = time.monotonic() + 90
        while jobs_everywhere(shards, "queue = %s and state = 'completed'", queue) < total:
            assert worker.poll() is None, tail(log)
            assert time.monotonic() < deadline, "the drain did not end"
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, tail(log)
    assert up_at > down_at  # the other shards were worked while one was down
    for dsn in shards["shards"]:
        jobs = {j for (j,) in rows(dsn, "select id from jobs.jobs where queue = %s", queue)}
        effects = {j for (j,) in rows(dsn, f"select job_id from {table}")}
        assert effects == jobs  # each job's effect once, on its shard (a second is a unique violation)
    assert jobs_everywhere(shards, "queue = %s", queue) == total


@pytest.mark.parametrize("language", ["python", "node"])
def test_a_producer_hashes_as_the_router_does(shards, language):
    cases = [{"name": "send", "tenantId": f"tenant-{i}"} for i in range(20)] + [{"name": f"job-{i}"} for i in range(20)]
    expected = [rows(shards["router"], "select jobs_router.enqueue_shard(null, null, null, %s, %s)",
                     c.get("tenantId"), c["name"])[0][0] for c in cases]
    given = "01a24f10-2312-7014-816f-8dbb9b785a02"
    if language == "python":
        program = ("import json, sys, pg_jobs\n"
                   "cases = json.loads(sys.argv[1])\n"
                   "print(json.dumps([pg_jobs.shard_for(3, c['name'], tenant_id=c.get('tenantId')) for c in cases]"
                   " + [pg_jobs.shard_for(3, 'x', id=sys.argv[2])]))")
        out = subprocess.run([PYTHON, "-c", program, json.dumps(cases), given], capture_output=True, text=True, check=True)
    else:
        program = (f"import {{ shardFor }} from '{ROOT}/clients/node/dist/esm/index.js';\n"
                   "const [cases, given] = [JSON.parse(process.argv[1]), process.argv[2]];\n"
                   "console.log(JSON.stringify([...cases.map((c) => shardFor(3, c.name, { tenantId: c.tenantId })),"
                   " shardFor(3, 'x', { id: given })]));")
        out = subprocess.run(["node", "--input-type=module", "-e", program, json.dumps(cases), given],
                             capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == expected + [2]
